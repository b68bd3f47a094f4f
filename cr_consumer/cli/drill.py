"""``crkafka drill``: run a checkpoint/reset fault drill and verify its output.

    crkafka drill --scenario kill-member [--members 3] [--partitions 8]
                  [--messages 200000] [--bootstrap HOST:PORT] [--out DIR]
                  [--seed N] [--rate R] [--period S] [--pause S] [--timeout S]
                  [--sink file|kafka] [--dead-letter] [--poison] [--state]
                  [--coordinator-standby] [--json]

``--scenario all`` runs every scenario in turn (seeds N, N+1, ...), but
pause-broker against an external cluster (it can only pause the embedded
broker; asked for alone it is refused, exit code 2) and, with
``--coordinator-standby``, but pause-broker (it would stop the coordinators' log). Progress
goes to stderr; the JSON report (a list for ``all``) goes to stdout, preceded by
a short summary unless ``--json``. Exit code 0 only if every drill passed:
nothing missing, duplicated, altered or unexpected, no transaction left open
in the output topic (``--sink kafka``), every count right (``--state``), and the fault
fired.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from coordinator.protocol.common.cli_types import duration, positive_int
from cr_consumer.cli import refuse
from cr_consumer.drill.config import (
    EMBEDDED_BROKER_ONLY,
    NOT_WITH_COORDINATOR_STANDBY,
    SCENARIOS,
    STANDBY_LEASE_S,
    DrillConfig,
)
from cr_consumer.drill.faults import PAUSE_S
from cr_consumer.drill.pipeline import SinkKind
from cr_consumer.drill.plot import SKIPPED_MESSAGE, matplotlib_available
from cr_consumer.drill.report import DrillReport
from cr_consumer.drill.scenarios import run_drill
from cr_consumer.exit_code import ExitCode
from cr_consumer.testing.broker import ENV_BOOTSTRAP, BrokerStartError


def _bootstrap(text: str) -> str:
    for server in text.split(","):
        host, sep, port = server.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise argparse.ArgumentTypeError(f"{server!r} is not HOST:PORT")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scenario", required=True, choices=(*SCENARIOS, "all"), help="the fault to inject ('all' runs every scenario)"
    )
    parser.add_argument("--members", type=positive_int, default=3, help="member processes (default 3)")
    parser.add_argument("--partitions", type=positive_int, default=8, help="input partitions (default 8)")
    parser.add_argument("--messages", type=positive_int, default=200_000, help="records to produce (default 200000)")
    parser.add_argument(
        "--bootstrap",
        type=_bootstrap,
        default=None,
        help=f"Kafka bootstrap servers (default ${ENV_BOOTSTRAP}, else an embedded broker)",
    )
    parser.add_argument(
        "--out", default="drill-out", help="directory for outputs, reports and plots (default drill-out)"
    )
    parser.add_argument("--seed", type=int, default=None, help="RNG seed (default: random, printed in the report)")
    parser.add_argument(
        "--rate",
        type=float,  # >= 0: checked with the other settings (DrillConfig)
        default=0.0,
        help="production rate in records/s (default 0: as fast as possible)",
    )
    parser.add_argument(
        "--period",
        type=duration,
        default=2.0,
        help="checkpoint period, a duration (default 2s; see docs/drills.md on 1 s and group joins)",
    )
    parser.add_argument(
        "--pause",
        type=duration,
        default=PAUSE_S,
        help=f"length of the pause-* scenarios' SIGSTOP, a duration (default {PAUSE_S:g}s)",
    )
    parser.add_argument(
        "--session-timeout-ms",
        type=positive_int,
        default=6000,
        help="Kafka session.timeout.ms of the members (default 6000)",
    )
    parser.add_argument(
        "--eager",
        action="store_true",
        help="members rebalance eagerly (partition.assignment.strategy=range,roundrobin; "
        "default: the runtime's cooperative-sticky)",
    )
    parser.add_argument(
        "--timeout", type=duration, default=None, help="bound on one drill, a duration (default 120s + messages/2000 s)"
    )
    parser.add_argument(
        "--kafka-client",
        choices=("kafka-python", "librdkafka"),
        default=None,
        help="the members' Kafka client library (default kafka-python; librdkafka needs the [librdkafka] extra)",
    )
    parser.add_argument(
        "--no-standby",
        action="store_true",
        help="the runner keeps no warm standby member process: restarts start cold (crkafka run --no-standby)",
    )
    parser.add_argument(
        "--sink",
        choices=[kind.value for kind in SinkKind],
        default=SinkKind.FILE.value,
        help="where the pipeline writes: files (default) or an output topic through the transactional Kafka sink",
    )
    parser.add_argument(
        "--dead-letter",
        action="store_true",
        help="the pipeline dead-letters its poison records into a sink of the --sink kind; "
        "the drill checks each is there exactly once",
    )
    parser.add_argument(
        "--poison",
        action="store_true",
        help="mix poison records into the input whatever the scenario (the poison scenario always does)",
    )
    parser.add_argument(
        "--state",
        action="store_true",
        help="the pipeline keeps a count per key on a Kafka changelog (ctx.keyed_state); "
        "the drill checks every record's count against the input (not with new-topic)",
    )
    parser.add_argument(
        "--coordinator-standby",
        action="store_true",
        help="the coordinator keeps its log on the drill's broker (--state kafka, lease "
        f"{STANDBY_LEASE_S:g}s) with one standby; members get both endpoints; kill-coordinator "
        "kills the leader (not restarted), pause-coordinator pauses it past the lease; the standby "
        "takes over (not with pause-broker)",
    )
    parser.add_argument("--json", action="store_true", help="print only the JSON report on stdout")


def configs(args: argparse.Namespace) -> list[DrillConfig]:
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "big")
    scenarios: tuple[str, ...] = (args.scenario,)
    if args.scenario == "all":
        external = args.bootstrap or os.environ.get(ENV_BOOTSTRAP)
        scenarios = tuple(s for s in SCENARIOS if not (external and s in EMBEDDED_BROKER_ONLY))
        if external:
            print(
                f"crkafka drill: skipping {', '.join(EMBEDDED_BROKER_ONLY)} (needs the embedded broker; "
                f"the drills run against {external})",
                file=sys.stderr,
            )
        if args.coordinator_standby:
            scenarios = tuple(s for s in scenarios if s not in NOT_WITH_COORDINATOR_STANDBY)
            print(
                f"crkafka drill: skipping {', '.join(NOT_WITH_COORDINATOR_STANDBY)} (it would stop the "
                "coordinators' log on the broker)",
                file=sys.stderr,
            )
        if args.state:
            scenarios = tuple(s for s in scenarios if s != "new-topic")
            print("crkafka drill: skipping new-topic (--state keeps state for one input topic)", file=sys.stderr)
    timeout = args.timeout if args.timeout is not None else 120.0 + args.messages / 2000
    return [
        DrillConfig(
            scenario=name,
            members=args.members,
            partitions=args.partitions,
            messages=args.messages,
            bootstrap=args.bootstrap,
            out=args.out,
            seed=seed + i,
            rate=args.rate,
            period_s=args.period,
            session_timeout_ms=args.session_timeout_ms,
            timeout_s=timeout,
            cooperative=not args.eager,
            kafka_client=args.kafka_client,
            pause_s=args.pause,
            standby=not args.no_standby,
            sink=SinkKind(args.sink),
            dead_letter=args.dead_letter,
            poison=args.poison,
            state=args.state,
            coordinator_standby=args.coordinator_standby,
        )
        for i, name in enumerate(scenarios)
    ]


def _summary(report: DrillReport) -> str:
    verdict = "PASS" if report["ok"] else "FAIL"
    return (
        f"{verdict} {report['scenario']} seed={report['seed']}: produced {report['produced']} "
        f"(poison {report['poison']}), delivered {report['delivered']}, missing {report['missing']}, "
        f"duplicates {report['duplicates']}, "
        + (
            f"aborted {report['aborted']}, open transactions {report['open_transactions']}, "
            if report["sink"] == SinkKind.KAFKA.value
            else ""
        )
        + (f"wrong states {report['wrong_states']}, " if report["wrong_states"] is not None else "")
        + (
            f"dead letters {report['dead_letters']} (missing {report['dead_letter_missing']}, "
            f"duplicates {report['dead_letter_duplicates']}, unexpected {report['dead_letter_unexpected']}), "
            if report["dead_letters"] is not None
            else ""
        )
        + f"resets {report['resets']}, checkpoints {report['checkpoints']}, "
        f"detect {report['time_to_detect_s']} s, recover {report['time_to_recover_s']} s"
        + (_takeover_summary(report) if report["takeover"] is not None else "")
        + (f", error: {report['error']}" if report["error"] else "")
        + (
            f"\n  plot: {report['plot']}"
            if report["plot"]
            else f"\n  {SKIPPED_MESSAGE}"
            if not matplotlib_available()
            else ""
        )
    )


def _takeover_summary(report: DrillReport) -> str:
    t = report["takeover"]
    assert t is not None
    exited = f", old leader exited {t['old_leader_exit']}" if t["old_leader_exit"] is not None else ""
    return (
        f", takeover {t['takeover_s']} s (epoch {t['epoch_before']} -> {t['epoch_after']}{exited}), "
        f"resume after it {t['resume_after_takeover_s']} s"
    )


def run(args: argparse.Namespace) -> ExitCode:
    try:
        cfgs = configs(args)
    except ValueError as exc:
        return refuse("drill", str(exc))
    try:
        reports = [run_drill(cfg) for cfg in cfgs]
    except BrokerStartError as exc:  # no broker extra and no --bootstrap: say how to get one
        return refuse("drill", str(exc))
    if not args.json:
        for r in reports:
            print(_summary(r))
    doc = reports if args.scenario == "all" else reports[0]
    print(json.dumps(doc, indent=2))
    return ExitCode.OK if all(r["ok"] for r in reports) else ExitCode.ERROR
