"""``crkafka run PIPELINE_MODULE --members N``: a region of N member processes.

Starts a coordinator unless ``--coordinator`` is given, starts N members
(``crkafka member``), restarts members that die, prints the region's status
every ``--status-every`` seconds, and stops everything on Ctrl-C / SIGTERM
(``--duration S`` stops after S seconds, for scripts and demos).

Exit codes (``cr_consumer.exit_code.ExitCode``): 0 stopped cleanly, 2 bad settings, 3 the region FAILED
(too many consecutive resets; the status line says why).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time

from coordinator.protocol.common.cli_types import duration, port, positive_int
from coordinator.protocol.region.replies import RegionPhase
from coordinator.protocol.region.status import RegionStatus
from cr_consumer.cli import refuse
from cr_consumer.cli.member import add_region_arguments, default_group, parse_pairs
from cr_consumer.exit_code import ExitCode
from cr_consumer.kafka.properties import KafkaPropertiesError, from_cli
from cr_consumer.runtime.member.setup import SettingsError
from cr_consumer.runtime.runner.region_runner import Region

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_region_arguments(parser)
    parser.add_argument("--members", type=positive_int, default=3, help="member processes (default 3)")
    parser.add_argument("--coordinator", help="use this coordinator endpoint instead of starting one")
    parser.add_argument("--no-restart", action="store_true", help="do not restart members that die")
    parser.add_argument(
        "--no-standby",
        action="store_true",
        help="keep no warm standby member process: a restarted or added member starts cold "
        "(default: one standby, with the member's imports done, takes over a member's name "
        "at once; about 40 MB)",
    )
    parser.add_argument("--duration", type=duration, help="stop after this long (e.g. 30s, 5m)")
    parser.add_argument("--status-every", type=duration, default=5.0, help="print the status this often (default 5s)")
    parser.add_argument(
        "--metrics-port",
        type=port,
        metavar="BASE",
        help="member-N serves Prometheus /metrics on port BASE+N (a restarted member keeps "
        "its port; default: no member endpoint)",
    )


def _line(status: RegionStatus) -> str:
    return (
        f"region {status.name}: {status.phase.value} members={sorted(status.members)} "
        f"last_consistent={status.last_consistent} checkpoints={status.checkpoints} "
        f"resets={status.reset.resets} consecutive={status.reset.consecutive_resets}"
        + (f" failed: {status.failed_reason}" if status.failed_reason else "")
    )


def run(args: argparse.Namespace) -> ExitCode:
    if not args.bootstrap:
        return refuse(
            "run", "give --bootstrap HOST:PORT or set KAFKA_BOOTSTRAP_SERVERS (`crkafka broker` starts an embedded one)"
        )
    try:
        kafka = from_cli(args.kafka_config, args.kafka)
    except KafkaPropertiesError as exc:
        return refuse("run", str(exc))
    try:
        region = Region(
            args.pipeline,
            members=args.members,
            bootstrap=args.bootstrap,
            coordinator=args.coordinator,
            group=args.group or default_group(args.pipeline),
            output_dir=args.out,
            state_dir=args.state_dir,
            period_s=args.period,
            operator_driven=args.operator_driven,
            drain_timeout_s=args.drain_timeout,
            reset_timeout_s=args.reset_timeout,
            max_consecutive_resets=args.max_resets,
            failure_memory_s=args.failure_memory,
            reset_backoff_s=args.reset_backoff,
            reset_backoff_max_s=args.reset_backoff_max,
            member_timeout_s=args.member_timeout,
            region_index=args.region_index,
            params=parse_pairs(args.param, "--param"),
            kafka=kafka,
            kafka_client=args.kafka_client,
            restart_members=not args.no_restart,
            log_level=str(args.log_level),
            log_format=args.log_format,
            curve_server_key=args.curve_server_key,
            curve_keypair=args.curve_keypair,
            metrics_port=args.metrics_port,
            metrics_host=args.metrics_host,
            standby=not args.no_standby,
        )
    except ValueError as exc:
        return refuse("run", str(exc))
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("%s: stopping the region", signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    try:
        region.start()
    except SettingsError as exc:
        return refuse("run", str(exc))
    print(
        f"region {region.group}: coordinator {region.endpoint} (http {region.http_address or '-'}), "
        f"members {region.live_members()}, "
        f"output {region.output_dir}, logs {region.state_dir / 'logs'}",
        flush=True,
    )
    for name, address in region.metrics_addresses().items():
        print(f"{name}: metrics on http://{address}/metrics", flush=True)
    try:
        return _watch(region, args, stop)
    finally:
        region.stop()


def _watch(region: Region, args: argparse.Namespace, stop: threading.Event) -> ExitCode:
    """Print the region's status every ``--status-every`` seconds until a signal,
    ``--duration`` or a failure; the exit code."""
    started = time.monotonic()
    next_status = time.monotonic() + args.status_every
    while not stop.wait(0.2):
        if region.failed:
            print(f"region {region.group}: {region.failed}", file=sys.stderr, flush=True)
            return region.exit_code()
        if args.duration is not None and time.monotonic() - started >= args.duration:
            break
        if time.monotonic() >= next_status:
            next_status = time.monotonic() + args.status_every
            try:
                status = region.status()
            except Exception as exc:  # noqa: BLE001 - the coordinator may be restarting: report and go on
                print(f"region {region.group}: status unavailable ({exc})", flush=True)
                continue
            print(_line(status), flush=True)
            if status.phase is RegionPhase.FAILED:
                return ExitCode.REGION_FAILED
    return ExitCode.OK
