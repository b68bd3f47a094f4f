"""``cr-coordinator``'s flags: the argument parser, each flag's type, bound and default.

A flag's own value is checked as it is parsed, by its type (a bounded number, a duration, a
ratio, a fault point, a Kafka client settings file): a bad one is a usage error naming the
flag. What the flags mean together is checked after parsing (``checks.py``).
``limits_from_args`` turns the limit flags into the server's ``Limits``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from coordinator import __version__
from coordinator.protocol.common.cli_types import bounded_int, duration, usage_error_of
from coordinator.protocol.common.gc_policy import GcPolicy
from coordinator.protocol.wire.envelope import DEFAULT_MAX_FRAME_BYTES, MAX_FRAME_LIMIT_BYTES, MIN_FRAME_LIMIT_BYTES
from coordinator.region.txn_client import load_client_config
from coordinator.server.connections import DEFAULT_HANDSHAKE_TIMEOUT_S, DEFAULT_MAX_CONNECTIONS, FD_RESERVE
from coordinator.server.limits import MAX_LIMIT, Limits
from coordinator.server.loop import EXPIRE_INTERVAL_S
from coordinator.store import fault_point
from coordinator.store.kafka.settings import (
    DEFAULT_LEASE_S,
    DEFAULT_MIN_INSYNC_REPLICAS,
    DEFAULT_REPLICATION_FACTOR,
    DEFAULT_WRITE_TIMEOUT_S,
)

DEFAULT_BIND = "tcp://127.0.0.1:5570"


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
        type=usage_error_of(lambda value: load_client_config(Path(value))),
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
        type=usage_error_of(fault_point.parse_fault_point),
        default=None,
        metavar="STEP:ACTION",
        help="a test and drill aid: the first time the write path reaches STEP (one of "
        f"{', '.join(fault_point.FAULT_STEPS)}), SIGSTOP (ACTION pause) or SIGKILL (ACTION crash) this process",
    )


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
