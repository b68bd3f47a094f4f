"""``crkafka member PIPELINE_MODULE --coordinator ENDPOINT``: one member process.

Runs one member of a region alone, so members can run on other hosts against
the same coordinator and broker (``crkafka run`` starts these for you). The
region settings (--period, --drain-timeout, ...) must be the same on every
member: the first member to join fixes them and later ones with other values
are refused with a message naming the setting.

Kafka properties: ``--kafka-config FILE`` (a ``.properties`` file), ``--kafka
KEY=VALUE`` items and ``env:NAME`` values (``cr_consumer.kafka.properties``).
``crkafka run`` hands its members their properties as JSON on stdin
(``--kafka-stdin``), so no secret is ever on a command line.

Every time flag takes a duration (``500ms``, ``10s``, ``1m`` or seconds).
CURVE: ``--curve-server-key FILE --curve-keypair FILE`` (the spelling of
``crkafka status``). Flags are matched whole (no abbreviations), so a prefix
of a flag is refused rather than taken for it.

SIGTERM/SIGINT stop the member at any time: once it runs, gracefully (it
leaves the region); while it is still joining the coordinator or
bootstrapping Kafka, at once (exit 0; after at most ``INTERRUPT_GRACE_S`` of
clean-up).

Exit codes (``cr_consumer.exit_code.ExitCode``): 0 stopped by SIGTERM/SIGINT, 1 failure, 2 bad
settings, 3 the region FAILED.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

from coordinator.protocol.common.cli_types import duration
from coordinator.protocol.common.logging_setup import add_logging_arguments, setup_logging
from cr_consumer.cli import refuse
from cr_consumer.exit_code import ExitCode
from cr_consumer.kafka import properties
from cr_consumer.runtime.member.process import Member
from cr_consumer.runtime.member.setup import MemberSettings, default_stem

log = logging.getLogger(__name__)

#: How long the clean-up after a SIGTERM during start-up may take before the
#: process exits anyway: a Kafka client blocked in its bootstrap cannot be
#: interrupted, and its close waits for it (10 s), past the runner's own
#: SIGTERM -> SIGKILL grace. A member that never ran holds nothing to save; the
#: region drops it like a crashed one.
INTERRUPT_GRACE_S = 3.0


def parse_pairs(items: list[str] | None, what: str) -> dict[str, object]:
    """``KEY=VALUE`` items -> dict; integers become ints (pipeline parameters)."""
    try:
        raw = properties.parse_items(items, what)
    except properties.KafkaPropertiesError as exc:
        raise SystemExit(str(exc)) from None
    return {k: properties.typed(v) for k, v in raw.items()}


class Interrupted(BaseException):
    """Raised by the signal handler while the member is not yet running its loop (a
    BaseException, like KeyboardInterrupt, so start-up code that handles errors lets it pass)."""


def add_region_arguments(parser: argparse.ArgumentParser) -> None:
    """Settings shared by ``crkafka run`` and ``crkafka member``."""
    parser.add_argument(
        "pipeline",
        metavar="PIPELINE_MODULE",
        help="module name (examples.wordcount, imported from the working directory) or .py path "
        "exposing build(ctx) -> Pipeline; MODULE:FUNCTION names another build function",
    )
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"),
        help="Kafka bootstrap servers (default $KAFKA_BOOTSTRAP_SERVERS)",
    )
    parser.add_argument("--group", help="consumer group id, also the region's name (default crkafka-<module>)")
    parser.add_argument("--region-index", type=int, default=0, help="consistent region index (default 0)")
    parser.add_argument("--out", default="out", help="output directory of the pipeline's sinks (default ./out)")
    parser.add_argument("--state-dir", default="state", help="checkpoints and logs (default ./state)")
    parser.add_argument("--period", type=duration, default=1.0, help="time between checkpoints (default 1s)")
    parser.add_argument(
        "--operator-driven",
        action="store_true",
        help="checkpoint when the source asks (trigger count) instead of periodically",
    )
    parser.add_argument("--drain-timeout", type=duration, default=30.0, help="duration (default 30s)")
    parser.add_argument("--reset-timeout", type=duration, default=30.0, help="duration (default 30s)")
    parser.add_argument("--max-resets", type=int, default=5, help="max consecutive resets before FAILED (default 5)")
    parser.add_argument(
        "--failure-memory",
        type=duration,
        default=60.0,
        help="a checkpoint that moves no offset clears the consecutive-reset count only this long "
        "after the last failure; failures this far apart start a new backoff streak "
        "(default 60s)",
    )
    parser.add_argument(
        "--reset-backoff",
        type=duration,
        default=0.5,
        help="hold before resuming after the 2nd failure reset of a streak (failures less than "
        "--failure-memory apart), doubling with each further one (default 0.5s)",
    )
    parser.add_argument("--reset-backoff-max", type=duration, default=30.0, help="the longest such hold (default 30s)")
    parser.add_argument(
        "--member-timeout", type=duration, default=5.0, help="a member silent this long is dropped (default 5s)"
    )
    parser.add_argument("--param", action="append", metavar="NAME=VALUE", help="pipeline parameter (repeatable)")
    parser.add_argument(
        "--kafka",
        action="append",
        metavar="PROP=VALUE",
        help="Kafka consumer property by dotted name (repeatable), e.g. session.timeout.ms=6000; "
        "a value env:NAME is read from the environment variable NAME (use it for secrets)",
    )
    parser.add_argument(
        "--kafka-client",
        choices=("kafka-python", "librdkafka"),
        default=None,
        help="Kafka client library of the source: kafka-python (pure Python, the default) or "
        "librdkafka (confluent-kafka, the [librdkafka] extra: about twice the throughput)",
    )
    parser.add_argument(
        "--kafka-config",
        metavar="FILE",
        help="Kafka consumer properties file (Java .properties, as Kafka's tools take; mode 0600 "
        "if it holds secrets); --kafka items override it",
    )
    parser.add_argument(
        "--curve-server-key", metavar="FILE", help="CURVE: the coordinator's public key (.key); needs --curve-keypair"
    )
    parser.add_argument(
        "--curve-keypair", metavar="FILE", help="CURVE: this member's keypair (.key_secret from cr-coordinator keygen)"
    )
    parser.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        help="address the members' /metrics endpoints bind (default 127.0.0.1; 0.0.0.0 for all)",
    )


def region_settings(args: argparse.Namespace, members: int = 1) -> dict[str, object]:
    return {
        "mode": "operator_driven" if args.operator_driven else "periodic",
        "period_s": args.period,
        "drain_timeout_s": args.drain_timeout,
        "reset_timeout_s": args.reset_timeout,
        "max_consecutive_resets": args.max_resets,
        "failure_memory_s": args.failure_memory,
        "reset_backoff_s": args.reset_backoff,
        "reset_backoff_max_s": args.reset_backoff_max,
        "member_timeout_s": args.member_timeout,
        "min_members": members,
    }


def default_group(pipeline: str) -> str:
    return f"crkafka-{default_stem(pipeline)}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_region_arguments(parser)
    parser.add_argument(
        "--coordinator",
        required=True,
        help="coordinator endpoint, e.g. tcp://127.0.0.1:5570; a leader on Kafka and its standbys comma-separated",
    )
    parser.add_argument("--name", default=f"member-{os.getpid()}", help="member name, unique in the region")
    parser.add_argument("--min-members", type=int, default=1, help="members the first reset waits for")
    parser.add_argument(
        "--kafka-stdin",
        action="store_true",
        help="read Kafka properties as JSON from stdin (how crkafka run passes them)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus /metrics on this port (0: any free port, logged; default: none)",
    )


def run(args: argparse.Namespace) -> ExitCode:
    if not args.bootstrap:
        return refuse("member", "give --bootstrap HOST:PORT or set KAFKA_BOOTSTRAP_SERVERS")
    try:
        kafka = properties.read_stdin(sys.stdin.buffer) if args.kafka_stdin else {}
        kafka.update(properties.from_cli(args.kafka_config, args.kafka))
    except properties.KafkaPropertiesError as exc:
        return refuse("member", str(exc))
    settings = MemberSettings(
        pipeline=args.pipeline,
        bootstrap=args.bootstrap,
        coordinator=args.coordinator,
        group=args.group or default_group(args.pipeline),
        member=args.name,
        output_dir=args.out,
        state_dir=args.state_dir,
        region_index=args.region_index,
        region=region_settings(args, args.min_members),
        params=parse_pairs(args.param, "--param"),
        kafka=kafka,
        kafka_client=args.kafka_client,
        curve_server_key=args.curve_server_key,
        curve_keypair=args.curve_keypair,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
    )
    member = Member(settings)

    interrupted: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        log.info("%s: %s: stopping", settings.member, signal.Signals(signum).name)
        member.stop()
        # Joining or bootstrapping: no loop would notice the stop. Raised once, so a
        # second signal does not cut the shutdown that the first one started.
        if not member.running.is_set() and not interrupted:
            interrupted.append(signal.Signals(signum).name)
            timer = threading.Timer(INTERRUPT_GRACE_S, _exit_now, args=(settings.member,))
            timer.name, timer.daemon = "member-stop-grace", True
            timer.start()
            raise Interrupted(interrupted[0])

    try:
        # The handlers and the log line inside the try: a signal may land as soon as
        # a handler is set, or while this line is still being logged (a supervisor
        # that waits for it signals at once).
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, on_signal)
        log.info(
            "%s: joining region %s at %s (Kafka %s)",
            settings.member,
            settings.group,
            settings.coordinator,
            settings.bootstrap,
        )
        return member.run()
    except Interrupted as exc:
        log.info("%s: stopped by %s before it was running", settings.member, exc)
        return ExitCode.OK


def _exit_now(member: str) -> None:
    """The clean-up after an early SIGTERM did not finish in INTERRUPT_GRACE_S: exit OK."""
    log.warning(
        "%s: clean-up after the stop request takes longer than %.0fs (a Kafka client still "
        "bootstrapping?); exiting now",
        member,
        INTERRUPT_GRACE_S,
    )
    logging.shutdown()
    os._exit(ExitCode.OK)


def main(argv: list[str] | None = None) -> ExitCode:
    """``python -m cr_consumer.cli.member``: what ``crkafka run`` spawns (no other
    sub-command is imported, so a member starts fast and alone)."""
    parser = argparse.ArgumentParser(prog="crkafka member", description=__doc__.split("\n\n")[0], allow_abbrev=False)
    add_logging_arguments(parser)
    add_arguments(parser)
    args = parser.parse_args(argv)
    setup_logging(args.log_level, args.log_format)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
