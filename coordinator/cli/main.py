"""``cr-coordinator``: run the coordinator process in the foreground (or make CURVE keys).

    cr-coordinator --bind tcp://127.0.0.1:5570 --state-dir DIR [--http 127.0.0.1:9570]
                   [--state file|kafka --kafka-bootstrap HOST:PORT --log-topic NAME
                    [--log-replication-factor 3] [--log-min-insync-replicas 2] [--log-write-timeout 10s]
                    [--log-lease 5s] [--standby] [--advertise tcp://HOST:PORT]]
                   [--retention 7d] [--curve-secret-key FILE --curve-allow DIR_OR_FILE]
                   [--resolve-kafka-config FILE]
                   [--allow-remote] [--max-frame-bytes N] [--log-level INFO] [--truncate-corrupt]
                   [--max-connections N] [--handshake-timeout 10s]
                   [--max-groups N] [--max-members-per-group N] [--max-control-variables-per-group N]
                   [--max-regions N] [--max-pending-merges N] [--max-pending-merge-bytes N]
                   [--member-lease 1h] [--region-expiry 7d] [--gc-policy freeze|none]
                   [--compact-min-bytes N] [--compact-dead-ratio R] [--fault-point STEP:pause|crash]
    cr-coordinator keygen --out DIR [--name NAME]

Start-up, in order:

1. Arguments are checked; a bad one fails here, naming the flag. A bind to a
   non-loopback address is refused unless CURVE is on or ``--allow-remote``;
   ``--http`` on a non-loopback address is refused unless ``--allow-remote``
   (CURVE does not cover HTTP: /status would be open to the network).
   ``--fault-point STEP:ACTION`` (a test and drill aid,
   ``coordinator.store.fault_point``) installs its hook here, before the store exists.
2. The state dir is created 0700 if missing and checked (no symlink, owned by
   this user, not writable by others: ``security.prepare_state_dir``), then
   locked (``coordinator.store.log.recovery.hold_state_dir``): a second coordinator on the same
   directory fails here, before it binds or prints ``ready``. The state store
   is opened on its log: the segment file in the directory (``--state file``,
   the default), or the Kafka topic ``--log-topic`` (``--state kafka``,
   ``coordinator.store.kafka``; the directory then holds only the lock). With
   ``--standby`` the load follows the topic until the leader stops writing for
   ``--log-lease``, then takes over (docs/durable-state.md); until then every
   request gets NOT_LEADER naming the leader's endpoint (LOAD_IN_PROGRESS while it
   knows none). The endpoint a leader names in its lease records is the bound one,
   or ``--advertise`` (required when ``--bind`` is a wildcard address).
3. With CURVE, the ZAP authenticator thread starts before the socket binds.
4. The soft file descriptor limit is raised to the hard one; the server binds
   with its connection limits (``coordinator.server.connections``) and starts its loop; the store's log is replayed in the
   background (requests get LOAD_IN_PROGRESS meanwhile).
5. ``--http`` starts the /metrics and /status endpoint.
6. One line ``ready endpoint=... http=... pid=...`` is printed on stdout, so
   launchers can wait for it.
7. Once the state is loaded, ``--gc-policy`` (default ``freeze``) is applied:
   the loaded heap leaves the garbage collector's scans
   (``coordinator.protocol.common.gc_policy``: full collections stalled the loop).

Shutdown on SIGTERM/SIGINT: stop the loop (queued replies are flushed, pending
writes synced), close the store (flush + fsync), stop HTTP and the
authenticator; exit 0. A fatal failure (load or sync error) exits 1.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import zmq

from coordinator import __version__, security
from coordinator.protocol import curve_keys
from coordinator.protocol.common.cli_types import bounded_int, duration
from coordinator.protocol.common.endpoints import check_endpoint
from coordinator.protocol.common.gc_policy import GcPolicy, freeze_after_start
from coordinator.protocol.common.logging_setup import parse_log_levels, setup_logging
from coordinator.protocol.wire.envelope import DEFAULT_MAX_FRAME_BYTES, MAX_FRAME_LIMIT_BYTES, MIN_FRAME_LIMIT_BYTES
from coordinator.region.service import RegionControllerService
from coordinator.region.txn_client import TxnClientConfig, load_client_config
from coordinator.server.api import CurveServerConfig
from coordinator.server.connections import (
    DEFAULT_HANDSHAKE_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
    FD_RESERVE,
    ConnectionLimits,
    raise_nofile_limit,
)
from coordinator.server.http import CoordinatorMetrics, HttpEndpoint, parse_host_port
from coordinator.server.limits import MAX_LIMIT, Limits
from coordinator.server.loop import EXPIRE_INTERVAL_S, CoordinatorServer
from coordinator.services.merge import MergeService
from coordinator.services.registry import ControlVariablesService, RegistryService
from coordinator.store import fault_point
from coordinator.store.kafka.settings import (
    DEFAULT_LEASE_S,
    DEFAULT_MIN_INSYNC_REPLICAS,
    DEFAULT_REPLICATION_FACTOR,
    DEFAULT_WRITE_TIMEOUT_S,
    KafkaLogSettings,
)
from coordinator.store.log.frame import LogError

log = logging.getLogger(__name__)

DEFAULT_BIND = "tcp://127.0.0.1:5570"


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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cr-coordinator",
        description="The consistent-region coordinator: group registry, control variables, checkpoint merge. "
        "Use 'cr-coordinator keygen --out DIR' to make CURVE keys.",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--bind", default=DEFAULT_BIND, help=f"ZeroMQ endpoint to bind (default {DEFAULT_BIND})")
    p.add_argument("--state-dir", required=True, help="directory of the durable state (created if missing)")
    p.add_argument("--http", default=None, metavar="HOST:PORT", help="serve /metrics and /status here")
    p.add_argument(
        "--retention",
        type=duration,
        default=7 * 86400.0,
        help="tombstone the control variables of a group idle this long (default 7d)",
    )
    p.add_argument("--curve-secret-key", default=None, metavar="FILE", help="server keypair (.key_secret) for CURVE")
    p.add_argument("--curve-allow", default=None, metavar="DIR_OR_FILE", help="allowed client public keys (.key)")
    p.add_argument("--allow-remote", action="store_true", help="allow a non-loopback bind without CURVE")
    p.add_argument(
        "--max-frame-bytes",
        type=bounded_int(MIN_FRAME_LIMIT_BYTES, MAX_FRAME_LIMIT_BYTES),
        default=DEFAULT_MAX_FRAME_BYTES,
        metavar="N",
        help=f"largest request parsed; larger ones get TOO_LARGE ({MIN_FRAME_LIMIT_BYTES}..{MAX_FRAME_LIMIT_BYTES}, "
        f"default {DEFAULT_MAX_FRAME_BYTES})",
    )
    p.add_argument(
        "--expire-interval",
        type=duration,
        default=EXPIRE_INTERVAL_S,
        help=f"how often retention expiry runs (default {EXPIRE_INTERVAL_S:g}s)",
    )
    p.add_argument(
        "--log-level",
        default="INFO",
        metavar="LEVELS",
        help="a level (DEBUG, INFO, WARNING, ERROR) or per-logger levels, e.g. "
        "root=INFO,coordinator=DEBUG (default INFO)",
    )
    p.add_argument(
        "--log-format",
        default="text",
        choices=("text", "json"),
        help="text (default) or json (one JSON object per line)",
    )
    p.add_argument(
        "--gc-policy",
        default=GcPolicy.FREEZE.value,
        choices=[policy.value for policy in GcPolicy],
        help="freeze (default): gc.freeze() the heap once the state is loaded, so full collections "
        "do not re-scan it on the loop thread; none: leave the collector alone",
    )
    add_connection_arguments(p)
    _add_limit_flags(p)
    _add_state_flags(p)
    p.add_argument(
        "--resolve-kafka-config",
        type=_txn_client,
        default=None,
        metavar="FILE",
        help="kafka-python security settings (JSON object, mode 600) for the clusters the regions' Kafka sinks "
        "write to, used when the coordinator ends a region's transactions itself (docs/region.md); "
        "default: plaintext",
    )
    _add_maintenance_flags(p)
    p.add_argument(
        "--truncate-corrupt",
        action="store_true",
        help="if the state log is damaged where acknowledged records may lie (a bad record followed by "
        "valid ones, or a CRC-valid record that does not decode), cut it at the damage instead of refusing "
        "to start; the cut bytes are kept in <segment>.corrupt-<offset> (see docs/durable-state.md)",
    )
    return p


#: StateStore's defaults (docs/durable-state.md, "Compaction" and "Snapshots").
DEFAULT_COMPACT_MIN_BYTES = 1 << 20
DEFAULT_COMPACT_DEAD_RATIO = 0.5


def _ratio(text: str) -> float:
    """A number strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text} is outside (0, 1)")
    return value


def _fault_point(text: str) -> fault_point.FaultPoint:
    try:
        return fault_point.parse_fault_point(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_maintenance_flags(p: argparse.ArgumentParser) -> None:
    """When the log is compacted (or snapshotted), and the fault point (tests and drills)."""
    g = p.add_argument_group("maintenance", "compaction of the file log, snapshots of the Kafka log")
    g.add_argument(
        "--compact-min-bytes",
        type=bounded_int(0, 1 << 50),
        default=DEFAULT_COMPACT_MIN_BYTES,
        metavar="N",
        help=f"compact (--state kafka: snapshot) only a log of at least N bytes (default {DEFAULT_COMPACT_MIN_BYTES})",
    )
    g.add_argument(
        "--compact-dead-ratio",
        type=_ratio,
        default=DEFAULT_COMPACT_DEAD_RATIO,
        metavar="R",
        help=f"compact (--state kafka: snapshot) when more than R of the log's entries are dead, 0 < R < 1 "
        f"(default {DEFAULT_COMPACT_DEAD_RATIO:g})",
    )
    g.add_argument(
        "--fault-point",
        type=_fault_point,
        default=None,
        metavar="STEP:ACTION",
        help="a test and drill aid: the first time the write path reaches STEP (one of "
        f"{', '.join(fault_point.FAULT_STEPS)}), SIGSTOP (ACTION pause) or SIGKILL (ACTION crash) this process",
    )


def _txn_client(value: str) -> TxnClientConfig:
    try:
        return load_client_config(Path(value))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_state_flags(p: argparse.ArgumentParser) -> None:
    """Where the durable log lives (docs/durable-state.md)."""
    g = p.add_argument_group("durable state", "where the coordinator's durable log lives (docs/durable-state.md)")
    g.add_argument(
        "--state",
        default="file",
        choices=("file", "kafka"),
        help="file (default): a segment file in --state-dir; kafka: a one-partition topic (--kafka-bootstrap, "
        "--log-topic), so a coordinator started on an empty --state-dir restores the state",
    )
    g.add_argument("--kafka-bootstrap", default=None, metavar="HOST:PORT[,...]", help="the cluster of --state kafka")
    g.add_argument(
        "--log-topic",
        default=None,
        metavar="NAME",
        help="the log topic of --state kafka (created if missing, with NAME.snapshots for snapshots)",
    )
    g.add_argument(
        "--log-replication-factor",
        type=bounded_int(1, 32),
        default=DEFAULT_REPLICATION_FACTOR,
        metavar="N",
        help=f"replication factor of the topics the coordinator creates (default {DEFAULT_REPLICATION_FACTOR})",
    )
    g.add_argument(
        "--log-min-insync-replicas",
        type=bounded_int(1, 32),
        default=DEFAULT_MIN_INSYNC_REPLICAS,
        metavar="N",
        help=f"min.insync.replicas of the topics the coordinator creates (default {DEFAULT_MIN_INSYNC_REPLICAS}): "
        "an acknowledged write is on at least this many replicas",
    )
    g.add_argument(
        "--log-write-timeout",
        type=duration,
        default=DEFAULT_WRITE_TIMEOUT_S,
        metavar="DURATION",
        help=f"longest wait for one group commit's acknowledgements; past it the coordinator stops "
        f"(default {DEFAULT_WRITE_TIMEOUT_S:g}s)",
    )
    g.add_argument(
        "--log-lease",
        type=duration,
        default=DEFAULT_LEASE_S,
        metavar="DURATION",
        help=f"a standby takes over after the log topic went this long without a write; the leader writes a "
        f"lease record after a third of it without one (default {DEFAULT_LEASE_S:g}s)",
    )
    g.add_argument(
        "--advertise",
        default=None,
        metavar="ENDPOINT",
        help="the endpoint clients reach this coordinator at, named to them by standbys while it leads "
        "(default: the bound endpoint; required with --state kafka when --bind is a wildcard address)",
    )
    g.add_argument(
        "--standby",
        action="store_true",
        help="follow the --state kafka log without serving (requests get LOAD_IN_PROGRESS) and take over, "
        "fencing the leader, when the log goes --log-lease without a write",
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


def add_connection_arguments(p: argparse.ArgumentParser) -> None:
    """The connection limits (coordinator.server.connections; docs/security.md)."""
    p.add_argument(
        "--max-connections",
        type=int,
        default=DEFAULT_MAX_CONNECTIONS,
        help=f"open client connections at most; more are closed at once (default {DEFAULT_MAX_CONNECTIONS}, "
        f"lowered to the file descriptor limit minus {FD_RESERVE})",
    )
    p.add_argument(
        "--handshake-timeout",
        type=duration,
        default=DEFAULT_HANDSHAKE_TIMEOUT_S,
        help=f"close a connection that has not completed its handshake after this long "
        f"(default {DEFAULT_HANDSHAKE_TIMEOUT_S:g}s)",
    )


def connection_limits(args: argparse.Namespace, parser: argparse.ArgumentParser) -> ConnectionLimits:
    try:
        return ConnectionLimits(max_connections=args.max_connections, handshake_timeout_s=args.handshake_timeout)
    except ValueError as exc:
        parser.error(f"--max-connections/--handshake-timeout: {exc}")


#: Integer limits: flag -> Limits field (defaults and meaning in coordinator.server.limits).
_LIMIT_FLAGS = {
    "--max-groups": "max_groups",
    "--max-members-per-group": "max_members_per_group",
    "--max-control-variables-per-group": "max_control_variables_per_group",
    "--max-regions": "max_regions",
    "--max-pending-merges": "max_pending_merges",
    "--max-pending-merge-bytes": "max_pending_merge_bytes",
}
_LIMIT_HELP = {
    "max_groups": "groups held (registry entries or control variables)",
    "max_members_per_group": "registered names per group, members per region",
    "max_control_variables_per_group": "control variables per group",
    "max_regions": "regions of the region controller",
    "max_pending_merges": "checkpoint merges waiting for contributions",
    "max_pending_merge_bytes": "estimated bytes held by pending merges",
    "member_lease_s": "unregister an operator name silent this long",
    "region_expiry_s": "drop a region without members this long",
}
#: Duration limits: flag -> Limits field.
_LIMIT_DURATIONS = {"--member-lease": "member_lease_s", "--region-expiry": "region_expiry_s"}


def _add_limit_flags(p: argparse.ArgumentParser) -> None:
    defaults = Limits()
    g = p.add_argument_group("limits", "resource limits; a request over one gets LIMIT_EXCEEDED (docs/protocol.md)")
    for flag, field in _LIMIT_FLAGS.items():
        g.add_argument(
            flag,
            dest=field,
            type=bounded_int(1, MAX_LIMIT),
            default=getattr(defaults, field),
            metavar="N",
            help=f"{_LIMIT_HELP[field]} (default {getattr(defaults, field)})",
        )
    for flag, field in _LIMIT_DURATIONS.items():
        g.add_argument(
            flag,
            dest=field,
            type=duration,
            default=getattr(defaults, field),
            metavar="DURATION",
            help=f"{_LIMIT_HELP[field]} (default {getattr(defaults, field):g}s)",
        )


def limits_from_args(args: argparse.Namespace) -> Limits:
    return Limits(**{field: vars(args)[field] for field in (*_LIMIT_FLAGS.values(), *_LIMIT_DURATIONS.values())})


def build_keygen_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cr-coordinator keygen", description="write a CURVE keypair")
    p.add_argument("--out", required=True, help="directory for NAME.key (public) and NAME.key_secret")
    p.add_argument("--name", default="coordinator", help="file name stem (default 'coordinator')")
    return p


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


def _hold_state_dir(path: Path) -> Callable[[], None]:
    """Create/check the state dir and lock it for this process; returns the release function."""
    from coordinator.store.log.recovery import hold_state_dir

    security.prepare_state_dir(path)
    return hold_state_dir(path)


def serve(args: argparse.Namespace) -> int:
    if args.fault_point is not None:
        log.warning("fault point %s installed (a test and drill aid)", args.fault_point)
        fault_point.install(args.fault_point)
    raise_nofile_limit()
    release_state_dir = _hold_state_dir(Path(args.state_dir))
    try:
        return _serve_locked(args)
    finally:
        release_state_dir()


def _serve_locked(args: argparse.Namespace) -> int:
    from coordinator.store.kafka.kafka_log import KafkaLog
    from coordinator.store.state_store import StateStore

    ctx = zmq.Context()
    curve_cfg = None
    auth = None
    if args.curve_secret_key:
        public, secret = curve_keys.load_keypair(args.curve_secret_key)
        allowed = security.load_allow_list(args.curve_allow)
        curve_cfg = CurveServerConfig(public_key=public, secret_key=secret)
        auth = security.CurveAuthenticator(ctx, allowed)
        auth.start()
    log_backend = KafkaLog(args.kafka_settings, standby=args.standby) if args.kafka_settings is not None else None
    store = StateStore(
        Path(args.state_dir),
        retention_s=args.retention,
        truncate_corrupt=args.truncate_corrupt,
        log=log_backend,
        compact_dead_ratio=args.compact_dead_ratio,
        compact_min_bytes=args.compact_min_bytes,
    )
    metrics = CoordinatorMetrics()
    server = CoordinatorServer(
        store,
        args.bind,
        max_frame_bytes=args.max_frame_bytes,
        curve=curve_cfg,
        context=ctx,
        metrics=metrics,
        expire_interval_s=args.expire_interval,
        connection_limits=args.connection_limits,
        limits=limits_from_args(args),
        leadership=log_backend,
        advertise=args.advertise,
    )
    registry = RegistryService()
    server.add_service(registry)
    server.add_service(ControlVariablesService(registry))
    server.add_service(MergeService(registry))
    server.add_service(RegionControllerService(args.resolve_kafka_config))

    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("signal %s: shutting down", signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)

    http = None
    try:
        endpoint = server.start()
        log.info(
            "coordinator bound to %s, advertised as %s (state dir %s, CURVE %s)",
            endpoint,
            server.advertised,
            args.state_dir,
            "on" if curve_cfg else "off",
        )
        if args.http:
            http = HttpEndpoint(args.http, server, metrics)
            http.start()
        print(f"ready endpoint={endpoint} http={http.address if http else '-'} pid={os.getpid()}", flush=True)
        gc_policy = GcPolicy(args.gc_policy)
        gc_pending = True
        while not stop.wait(0.2):
            if server.wait(0):
                break
            if gc_pending and server.loaded.is_set():  # 7.
                gc_pending = False
                freeze_after_start(gc_policy, "coordinator", level=logging.INFO)
    finally:
        if log_backend is not None:
            log_backend.stop_standby.set()  # a standby still following the log stops (StandbyStopped)
        server.stop()
        try:
            store.close()
        finally:
            if http is not None:
                http.stop()
            if auth is not None:
                auth.stop()
            if not server.running:  # a wedged loop still holds its socket: do not hang in term()
                ctx.term()
    return _exit_code(server.failure, stopped=stop.is_set())


def _exit_code(failure: BaseException | None, *, stopped: bool) -> int:
    """0 after a clean stop (a signal, also to a standby that had not taken over), 1 after a failure."""
    from coordinator.store.kafka.tail import StandbyStopped

    if isinstance(failure, StandbyStopped) and stopped:
        log.info("standby stopped before it took over")
        return 0
    if failure is not None:
        log.error("coordinator stopped after a failure: %s", failure)
        return 1
    log.info("coordinator stopped cleanly")
    return 0


def keygen(argv: list[str]) -> int:
    args = build_keygen_parser().parse_args(argv)
    try:
        public, secret = curve_keys.keygen(args.out, args.name)
    except curve_keys.SecurityConfigError as exc:  # a key already there
        print(f"cr-coordinator keygen: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # --out cannot be created or written
        print(f"cr-coordinator keygen: cannot write keys to {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"public key: {public}\nsecret key: {secret}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["keygen"]:
        return keygen(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    _check(args, parser)
    setup_logging(args.level, args.log_format)
    try:
        return serve(args)
    except (OSError, curve_keys.SecurityConfigError, LogError) as exc:
        log.error("cannot start: %s", exc)
        return 2


if __name__ == "__main__":
    sys.exit(main())
