"""``crkafka status --coordinator ENDPOINT``: a coordinator's state as readable tables.

Sends one ``status`` request (the same snapshot as HTTP /status) and prints
the groups (region index, members, reset-pending flag, control variables),
the pending checkpoint merges and the store's figures. ``--json`` prints the
raw snapshot. Exit code 0, or 1 when the coordinator does not answer.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from coordinator import security
from coordinator.client import CoordinatorClient
from coordinator.errors import CoordinatorError, CoordinatorUnavailable


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--coordinator", required=True, metavar="ENDPOINT", help="e.g. tcp://127.0.0.1:5570")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the answer (default 5)")
    parser.add_argument("--json", action="store_true", help="print the raw JSON snapshot")
    parser.add_argument("--curve-server-key", metavar="FILE", help="the coordinator's public key (.key)")
    parser.add_argument("--curve-keypair", metavar="FILE", help="this client's keypair (.key_secret)")


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [headers] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_status(snap: dict[str, Any]) -> str:
    out = [f"coordinator {snap.get('endpoint')}  loaded={snap.get('loaded')}  uptime={snap.get('uptime_s')}s"]
    groups = snap.get("groups", {})
    out.append("")
    out.append(f"groups ({snap.get('n_groups', len(groups))})")
    rows = [
        [g, v.get("region_index"), len(v.get("members", [])), ",".join(v.get("members", [])),
         "yes" if v.get("reset_pending") else "no", v.get("control_variables")]
        for g, v in sorted(groups.items())
    ]
    out.append(_table(["group", "region", "n", "members", "reset_pending", "control_vars"], rows) if rows else "  (none)")
    merges = snap.get("merges", [])
    out.append("")
    out.append(f"pending merges ({len(merges)}; completed {snap.get('merges_completed', 0)}, "
               f"timed out {snap.get('merge_timeouts', 0)})")
    rows = [
        [m["group"], m["seq"], m["attempt"], f"{len(m['contributors'])}/{m['n_contributors']}",
         ",".join(m["contributors"]), m["age_s"]]
        for m in merges
    ]
    out.append(_table(["group", "seq", "attempt", "have", "contributors", "age_s"], rows) if rows else "  (none)")
    store = snap.get("store", {})
    if store:
        out.append("")
        out.append("store")
        out.append(_table(["figure", "value"], [[k, v] for k, v in sorted(store.items())]))
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    kwargs: dict[str, Any] = {"timeout": args.timeout}
    try:
        if args.curve_server_key or args.curve_keypair:
            if not (args.curve_server_key and args.curve_keypair):
                print("crkafka status: --curve-server-key and --curve-keypair go together", file=sys.stderr)
                return 2
            kwargs["curve_server_key"] = security.load_public_key(args.curve_server_key)
            kwargs["curve_keypair"] = security.load_keypair(args.curve_keypair)
        with CoordinatorClient(args.coordinator, **kwargs) as client:
            snap = client.status()
    except (CoordinatorUnavailable, CoordinatorError, security.SecurityConfigError, ValueError) as exc:
        print(f"crkafka status: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(snap, indent=2, sort_keys=True) if args.json else format_status(snap))
    return 0
