"""``crkafka status --coordinator ENDPOINT [--bootstrap HOST:PORT]``: what an operator needs to see.

1. One ``status`` request to the coordinator (the snapshot HTTP /status serves)
   gives the regions (phase, last consistent checkpoint, resets, why FAILED,
   recent checkpoints and resets, the Kafka transactions still to resolve),
   their members, the registered groups and the pending checkpoint merges.
2. With a Kafka bootstrap address (``--bootstrap`` or ``KAFKA_BOOTSTRAP_SERVERS``)
   the committed and end offsets of every group the coordinator knows are read
   from the broker (:mod:`coordinator.cli.lag`, bounded by ``--timeout``)
   and shown per partition with the lag.
3. Each endpoint given (a leader on Kafka and its standbys, comma-separated) is
   probed with one ping (``CoordinatorClient.probe``, bounded by
   :data:`ROLE_PING_S`): its role (leader, standby, loading, unreachable), the
   leader a standby names and the epoch its reply carried. The document shows the
   leader's endpoint and epoch as the status reply says them.
4. The result is printed as tables, or with ``--json`` as one versioned JSON
   document (:data:`JSON_VERSION`; fields are only added within a version).
   ``--watch [SECONDS]`` repeats this until Ctrl-C (or ``--count`` rounds).

Exit code 0; 2 when the coordinator or the broker does not answer (the
message names which, and where) or the flags are wrong. The tables and the
JSON still carry whatever was read before the failure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from coordinator.cli.lag import BrokerUnavailable, PartitionLag, read_lag
from coordinator.client import CoordinatorClient
from coordinator.protocol import curve_keys
from coordinator.protocol.common.cli_types import bounded_duration, bounded_int
from coordinator.protocol.common.endpoints import parse_endpoints
from coordinator.protocol.wire.errors import CoordinatorError, CoordinatorUnavailable
from coordinator.protocol.wire.status import CoordinatorStatus

#: Version of the ``--json`` document; a field is renamed or removed only with a new version.
JSON_VERSION = 2
#: Bounds of ``--watch`` (a faster refresh loads the coordinator loop for nothing).
WATCH_MIN_S, WATCH_MAX_S = 0.2, 3600.0
#: Bound of ``--timeout``: each request waits at most this long.
TIMEOUT_MAX_S = 300.0
#: Bound of ``--count``: more refreshes than this (days at the fastest
#: ``--watch``) is a typo, refused like any other bad flag.
COUNT_MAX = 1_000_000
EXIT_OK, EXIT_UNREACHABLE = 0, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--coordinator",
        required=True,
        metavar="ENDPOINT",
        help="e.g. tcp://127.0.0.1:5570; a leader on Kafka and its standbys comma-separated",
    )
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"),
        metavar="HOST:PORT",
        help="Kafka bootstrap servers, for committed/end offsets and lag "
        "(default $KAFKA_BOOTSTRAP_SERVERS; without it no lag is shown)",
    )
    parser.add_argument(
        "--timeout",
        type=bounded_duration(0.1, TIMEOUT_MAX_S),
        default=5.0,
        metavar="SECONDS",
        help="seconds to wait for the coordinator and for the broker (default 5)",
    )
    parser.add_argument("--json", action="store_true", help=f"print one JSON document (version {JSON_VERSION})")
    parser.add_argument(
        "--watch",
        nargs="?",
        const=2.0,
        default=None,
        type=bounded_duration(WATCH_MIN_S, WATCH_MAX_S),
        metavar="SECONDS",
        help="refresh every SECONDS (default 2) until Ctrl-C",
    )
    parser.add_argument(
        "--count",
        type=bounded_int(1, COUNT_MAX),
        default=None,
        metavar="N",
        help=f"with --watch: stop after N refreshes (1..{COUNT_MAX})",
    )
    parser.add_argument("--curve-server-key", metavar="FILE", help="the coordinator's public key (.key)")
    parser.add_argument("--curve-keypair", metavar="FILE", help="this client's keypair (.key_secret)")


# ---------------------------------------------------------------------------- the document


def build_document(
    snap: CoordinatorStatus | None,
    lag: list[PartitionLag],
    *,
    coordinator: str,
    bootstrap: str | None,
    errors: list[str],
) -> dict[str, Any]:
    """The versioned ``--json`` document from a coordinator snapshot (None: the
    coordinator did not answer) and the lag rows."""
    regions = {}
    for name, r in sorted(((snap and snap.regions) or {}).items()):
        regions[name] = {
            "phase": r.phase.value,
            "mode": r.mode,
            "last_consistent": r.last_consistent,
            "seq": r.seq,
            "checkpoints": r.checkpoints,
            "resets": r.reset.resets,
            "consecutive_resets": r.reset.consecutive_resets,
            "max_consecutive_resets": r.reset.max_consecutive_resets,
            "backoff_left_s": r.reset.backoff_left_s,  # a held RESUME after repeated failures
            "failure_streak": r.reset.failure_streak,  # the backoff's count (coordinator/region/timing.py)
            "failed_reason": r.failed_reason,
            "waiting_for": list(r.waiting_for),
            "members": [
                {
                    "name": m,
                    "pid": info.pid,
                    "silent_s": info.silent_s,
                    "kafka_generation": None if info.kafka is None else info.kafka.generation,
                    "dead_letters": info.dead_letters,
                }
                for m, info in sorted(r.members.items())
            ],
            # member -> {seq, prepared, fence, bootstrap, error}: Kafka transactions still to resolve
            # (coordinator/region/resolve.py)
            "transactions": {m: t.to_body() for m, t in r.transactions.items()},
            "recent_checkpoints": [c.to_body() for c in r.recent_checkpoints],
            "recent_resets": [x.to_body() for x in r.recent_resets],
        }
    registry = None if snap is None else snap.registry
    groups = {
        g: {
            "region_index": v.region_index,
            "members": list(v.members),
            "reset_pending": v.reset_pending,
            "control_variables": v.control_variables,
        }
        for g, v in sorted(({} if registry is None else registry.groups).items())
    }
    merges = () if snap is None or snap.merge is None else snap.merge.pending
    return {
        "version": JSON_VERSION,
        "time": round(time.time(), 3),
        "coordinator": {
            "endpoint": coordinator if snap is None or snap.endpoint is None else snap.endpoint,
            "reachable": snap is not None,
            "loaded": None if snap is None else snap.loaded,
            "uptime_s": None if snap is None else snap.uptime_s,
            "leader": None if snap is None else snap.leader,
            "epoch": None if snap is None else snap.epoch,
        },
        "regions": regions,
        "groups": groups,
        "merges": [m.to_body() for m in merges],
        "limits": {} if snap is None else dict(snap.limits),
        "limit_rejections": {} if registry is None else dict(registry.limit_rejections),
        "lag": {"bootstrap": bootstrap, "partitions": [p.to_dict() for p in lag]},
        "errors": errors,
    }


def known_groups(snap: CoordinatorStatus) -> list[str]:
    """Kafka groups the coordinator knows: its regions (a region's name is its group) and registered groups."""
    return sorted(set(snap.regions or {}) | set({} if snap.registry is None else snap.registry.groups))


# ---------------------------------------------------------------------------- tables


def _table(headers: list[str], rows: list[list[object]]) -> str:
    cells = [headers] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_document(doc: dict[str, Any]) -> str:
    c = doc["coordinator"]
    state = "unreachable" if not c["reachable"] else ("loaded" if c["loaded"] else "loading the log")
    out = [
        f"coordinator {c['endpoint']}  {state}  uptime={c['uptime_s']}s  leader={c['leader'] or '-'}  "
        f"epoch={'-' if c['epoch'] is None else c['epoch']}"
    ]
    for e in c.get("endpoints", ()):  # each endpoint given: the leader and its standbys
        named = f"  (names the leader {e['leader']})" if e["role"] == "standby" and e["leader"] else ""
        epoch = "" if e["epoch"] is None else f"  epoch={e['epoch']}"
        out.append(f"  {e['endpoint']}  {e['role']}{epoch}{named}")
    regions = doc["regions"]
    out += ["", f"regions ({len(regions)})"]
    rows = [
        [
            name,
            r["phase"] if r.get("backoff_left_s") is None else f"{r['phase']} ({r['backoff_left_s']:.1f}s)",
            r["last_consistent"],
            r["checkpoints"],
            r["resets"],
            f"{r['consecutive_resets']}/{r['max_consecutive_resets']}",
            r.get("failure_streak", 0),
            len(r["members"]),
        ]
        for name, r in regions.items()
    ]
    out.append(
        _table(
            ["region", "phase", "last_checkpoint", "checkpoints", "resets", "consecutive", "streak", "members"], rows
        )
        if rows
        else "  (none)"
    )
    for name, r in regions.items():
        if r["failed_reason"]:
            out.append(f"  {name} FAILED: {r['failed_reason']}")
    rows = [
        [name, m["name"], m["pid"], m["silent_s"], m["kafka_generation"], m["dead_letters"]]
        for name, r in regions.items()
        for m in r["members"]
    ]
    out += ["", f"members ({len(rows)})"]
    columns = ["region", "member", "pid", "silent_s", "kafka_generation", "dead_letters"]
    out.append(_table(columns, rows) if rows else "  (none)")
    rows = [
        [name, member, t["seq"], t["prepared"], t["fence"], t["bootstrap"] or "(members only)", t["error"] or ""]
        for name, r in regions.items()
        for member, t in sorted(r["transactions"].items())
    ]
    if rows:  # only regions whose members run transactional sinks have any
        out += ["", f"transactions to resolve ({len(rows)} members)"]
        columns = ["region", "member", "checkpoint", "prepared", "fence_ids", "cluster", "last_error"]
        out.append(_table(columns, rows))
    lag = doc["lag"]
    out += [
        "",
        f"lag (Kafka {lag['bootstrap']})"
        if lag["bootstrap"]
        else "lag: not read (give --bootstrap HOST:PORT or set KAFKA_BOOTSTRAP_SERVERS)",
    ]
    if lag["bootstrap"]:
        rows = [[p["group"], p["topic"], p["partition"], p["committed"], p["end"], p["lag"]] for p in lag["partitions"]]
        out.append(
            _table(["group", "topic", "partition", "committed", "end", "lag"], rows)
            if rows
            else "  (no committed offsets)"
        )
    groups = doc["groups"]
    out += ["", f"groups ({len(groups)})"]
    rows = [
        [
            name,
            g["region_index"],
            len(g["members"]),
            ",".join(g["members"]),
            "yes" if g["reset_pending"] else "no",
            g["control_variables"],
        ]
        for name, g in groups.items()
    ]
    out.append(
        _table(["group", "region", "n", "members", "reset_pending", "control_vars"], rows) if rows else "  (none)"
    )
    merges = doc["merges"]
    out += ["", f"pending merges ({len(merges)})"]
    rows = [
        [
            m["group"],
            m["seq"],
            m["attempt"],
            f"{len(m['contributors'])}/{m['n_contributors']}",
            ",".join(m["contributors"]),
            m["age_s"],
        ]
        for m in merges
    ]
    out.append(_table(["group", "seq", "attempt", "have", "contributors", "age_s"], rows) if rows else "  (none)")
    if doc["limit_rejections"]:
        out += ["", "limit rejections: " + ", ".join(f"{k}={v}" for k, v in sorted(doc["limit_rejections"].items()))]
    for err in doc["errors"]:
        out.append(f"error: {err}")
    return "\n".join(out)


# ---------------------------------------------------------------------------- run


def _client_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"timeout": args.timeout}
    if args.curve_server_key or args.curve_keypair:
        if not (args.curve_server_key and args.curve_keypair):
            raise ValueError("--curve-server-key and --curve-keypair go together")
        kwargs["curve_server_key"] = curve_keys.load_public_key(args.curve_server_key)
        kwargs["curve_keypair"] = curve_keys.load_keypair(args.curve_keypair)
    return kwargs


#: Bound of the ping that tells what each endpoint is (``roles``): a reachable coordinator
#: answers within milliseconds; an unreachable one must not stall the status for long.
ROLE_PING_S = 0.5


def roles(endpoints: tuple[str, ...], client_kwargs: dict[str, Any]) -> list[dict[str, Any]]:
    """What each endpoint given is (step 3): ``role`` ``leader`` (it serves), ``standby`` (it
    answers NOT_LEADER, ``leader`` the endpoint it names), ``loading`` (LOAD_IN_PROGRESS: a
    coordinator replaying its log, or a standby that knows no leader) or ``unreachable``;
    ``epoch`` the one its reply carried. One ping each, bounded by :data:`ROLE_PING_S`."""
    out = []
    kwargs = {**client_kwargs, "timeout": ROLE_PING_S, "try_timeout": ROLE_PING_S}
    for endpoint in endpoints:
        entry: dict[str, Any]
        try:
            with CoordinatorClient(endpoint, **kwargs) as client:
                probe = client.probe(ROLE_PING_S)
            entry = {"role": probe.role.value, "leader": probe.leader, "epoch": probe.epoch}
        except CoordinatorError as exc:
            entry = {"role": f"error {exc}", "leader": None, "epoch": None}
        out.append({"endpoint": endpoint, **entry})
    return out


def collect(args: argparse.Namespace, client_kwargs: dict[str, Any]) -> dict[str, Any]:
    """One round: the coordinator's snapshot, then the lag; failures become ``errors``; what
    each endpoint given is (``roles``)."""
    errors: list[str] = []
    snap: CoordinatorStatus | None = None
    lag: list[PartitionLag] = []
    try:
        with CoordinatorClient(args.coordinator, **client_kwargs) as client:
            snap = client.status()
    except (CoordinatorUnavailable, CoordinatorError) as exc:
        errors.append(f"coordinator {args.coordinator}: {exc}")
    if snap is not None and args.bootstrap:
        groups = known_groups(snap)
        if groups:
            try:
                lag = read_lag(args.bootstrap, groups, args.timeout)
            except BrokerUnavailable as exc:
                errors.append(str(exc))
    doc = build_document(snap, lag, coordinator=args.coordinator, bootstrap=args.bootstrap, errors=errors)
    doc["coordinator"]["endpoints"] = roles(parse_endpoints(args.coordinator), client_kwargs)
    return doc


def run(args: argparse.Namespace) -> int:
    if args.count is not None and args.watch is None:
        print("crkafka status: --count N goes with --watch", file=sys.stderr)
        return 2
    try:
        client_kwargs = _client_kwargs(args)
    except (curve_keys.SecurityConfigError, ValueError, OSError) as exc:
        print(f"crkafka status: {exc}", file=sys.stderr)
        return 2
    rounds = 0
    try:
        while True:
            doc = collect(args, client_kwargs)
            rounds += 1
            if args.json:
                print(json.dumps(doc, sort_keys=True, default=str, indent=None if args.watch else 2), flush=True)
            else:
                if args.watch is not None and sys.stdout.isatty():
                    print("\x1b[H\x1b[2J", end="")
                print(format_document(doc), flush=True)
                if args.watch is not None:
                    print(f"\n(every {args.watch:g}s; Ctrl-C to stop)", flush=True)
            for err in doc["errors"]:
                print(f"crkafka status: {err}", file=sys.stderr, flush=True)
            if args.watch is None or (args.count is not None and rounds >= args.count):
                return EXIT_UNREACHABLE if doc["errors"] else EXIT_OK
            time.sleep(args.watch)
    except KeyboardInterrupt:
        return EXIT_OK
