"""What ``cr-coordinator``'s flags mean together, checked after parsing (start-up step 1, ``serve.py``).

A bad combination is a usage error naming the flags, before the state dir is touched:

- a bind to a non-loopback address is refused unless CURVE is on or ``--allow-remote``;
  ``--curve-secret-key`` and ``--curve-allow`` go together;
- ``--http`` must be HOST:PORT, on a loopback address unless ``--allow-remote`` (CURVE does
  not cover HTTP: /status would be open to the network);
- ``--state kafka`` needs its cluster and topic, and the Kafka flags need it; a wildcard
  ``--bind`` needs ``--advertise``.

The checks add what they derive to the arguments: ``connection_limits``, ``level`` (the log
levels) and ``kafka_settings`` (None for ``--state file``).
"""

from __future__ import annotations

import argparse
import ipaddress
from pathlib import Path

from coordinator.cli.flags import build_parser
from coordinator.protocol.common.endpoints import check_endpoint
from coordinator.protocol.common.logging_setup import parse_log_levels
from coordinator.server.connections import ConnectionLimits
from coordinator.server.http import parse_host_port
from coordinator.store.kafka.settings import KafkaLogSettings


def is_loopback_endpoint(endpoint: str) -> bool:
    """True for ipc://, inproc:// and tcp:// on a loopback address."""
    scheme, sep, rest = endpoint.partition("://")
    if not sep:
        raise ValueError(f"--bind {endpoint!r} must look like tcp://HOST:PORT")
    if scheme in ("ipc", "inproc"):
        return True
    if scheme != "tcp":
        raise ValueError(f"--bind {endpoint!r}: only tcp://, ipc:// and inproc:// are supported")
    host = rest.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # '*', an interface name or a host name


def is_wildcard_endpoint(endpoint: str) -> bool:
    """True for a tcp:// bind on every interface (``*``, ``0.0.0.0``, ``::``)."""
    scheme, _sep, rest = endpoint.partition("://")
    host = rest.rpartition(":")[0].strip("[]")
    return scheme == "tcp" and host in ("*", "0.0.0.0", "::")


def parse_args(argv: list[str]) -> argparse.Namespace:
    """``argv`` parsed (``flags.build_parser``) and checked; a usage error exits 2, naming the flag."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _check(args, parser)
    return args


def _check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    try:
        local = is_loopback_endpoint(args.bind)
    except ValueError as exc:
        parser.error(str(exc))
    curve = args.curve_secret_key is not None
    if (args.curve_secret_key is None) != (args.curve_allow is None):
        parser.error("--curve-secret-key and --curve-allow go together (CURVE needs both)")
    if not local and not curve and not args.allow_remote:
        parser.error(
            f"--bind {args.bind} is not a loopback address: turn on CURVE (--curve-secret-key and "
            f"--curve-allow) or pass --allow-remote to accept unauthenticated remote clients"
        )
    if args.http is not None:
        _check_http(args, parser)
    args.connection_limits = connection_limits(args, parser)
    try:
        args.level = parse_log_levels(args.log_level)
    except argparse.ArgumentTypeError as exc:
        parser.error(f"--log-level: {exc}")
    state = Path(args.state_dir)
    if state.exists() and not state.is_dir():
        parser.error(f"--state-dir {state} exists and is not a directory")
    _check_state(args, parser)


def _check_http(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """``--http`` must be HOST:PORT on loopback unless ``--allow-remote``: /status
    lists groups, members, pids and merges, and HTTP has no authentication."""
    try:
        host, _port = parse_host_port(args.http)
    except ValueError as exc:
        parser.error(f"--http: {exc}")
    if not is_loopback_endpoint(f"tcp://{host}:0") and not args.allow_remote:
        parser.error(
            f"--http {args.http} is not a loopback address: /metrics and /status have no authentication "
            f"(CURVE covers only --bind); serve them on 127.0.0.1 or pass --allow-remote to expose them"
        )


def _check_state(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """``--state kafka`` needs its cluster and topic, and the Kafka flags need it."""
    args.kafka_settings = None
    if args.state == "file":
        given = [
            flag
            for flag, value in (
                ("--kafka-bootstrap", args.kafka_bootstrap),
                ("--log-topic", args.log_topic),
                ("--standby", args.standby or None),
                ("--advertise", args.advertise),
            )
            if value is not None
        ]
        if given:
            parser.error(f"{' and '.join(given)} need --state kafka")
        return
    if args.kafka_bootstrap is None or args.log_topic is None:
        parser.error("--state kafka needs --kafka-bootstrap and --log-topic")
    if args.truncate_corrupt:
        parser.error("--truncate-corrupt cuts a damaged segment file; it does not apply to --state kafka")
    if args.advertise is not None:
        try:
            check_endpoint(args.advertise)
        except ValueError as exc:
            parser.error(f"--advertise: {exc}")
    elif is_wildcard_endpoint(args.bind):
        parser.error(
            f"--bind {args.bind} is a wildcard address, which clients cannot reach: give --advertise "
            "tcp://HOST:PORT, the endpoint standbys name to clients while this coordinator leads"
        )
    try:
        args.kafka_settings = KafkaLogSettings(
            args.kafka_bootstrap,
            args.log_topic,
            replication_factor=args.log_replication_factor,
            min_insync_replicas=args.log_min_insync_replicas,
            write_timeout_s=args.log_write_timeout,
            lease_s=args.log_lease,
        )
    except ValueError as exc:
        parser.error(f"--state kafka: {exc}")


def connection_limits(args: argparse.Namespace, parser: argparse.ArgumentParser) -> ConnectionLimits:
    try:
        return ConnectionLimits(max_connections=args.max_connections, handshake_timeout_s=args.handshake_timeout)
    except ValueError as exc:
        parser.error(f"--max-connections/--handshake-timeout: {exc}")
