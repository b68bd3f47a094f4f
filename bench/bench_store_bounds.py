"""Log bytes per registration and the largest record a compaction writes (no broker).

Figures:
1. registrations of MEMBERS members (names of NAME_BYTES bytes) into one group,
   one record each: log bytes appended by each registration (mean, first,
   last) and the whole log;
2. compaction of GROUPS groups with names of GROUP_NAME_BYTES bytes (one
   control variable each): the largest record in the compacted segment
   (the frame limit is 64 MiB), and whether a restart sees every group.

Record sizes are read from the frame headers directly, so the script also
measures an older checkout (``--code DIR``) whose reader would reject them.

    .venv/bin/python bench/bench_store_bounds.py [--members 1500] [--groups 10001] [--code DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

NAME_BYTES = 700
GROUP_NAME_BYTES = 7000


def record_sizes(state_dir: Path) -> list[int]:
    """Body sizes of every record of the newest segment, from the headers only."""
    (seg,) = sorted(state_dir.glob("segment-*.log"))[-1:]
    data = seg.read_bytes()
    sizes, pos = [], 0
    while pos + 8 <= len(data):
        (length,) = struct.unpack_from(">I", data, pos)
        sizes.append(length)
        pos += 8 + length
    return sizes


def bench_registrations(store_cls, base: Path, members: int) -> dict:
    store = store_cls(base / "members")
    store.load()
    per = []
    t0 = time.perf_counter()
    for i in range(members):
        before = store.stats().log_bytes
        store.register_member("group", 0, f"{i:05d}-" + "m" * (NAME_BYTES - 6))
        per.append(store.stats().log_bytes - before)
        store.sync()
    seconds = time.perf_counter() - t0
    total = store.stats().log_bytes
    store.close()
    request_bytes = members * (NAME_BYTES + 60)  # name + group + JSON envelope, roughly
    return {
        "members": members,
        "name_bytes": NAME_BYTES,
        "bytes_per_register_mean": round(sum(per) / len(per)),
        "bytes_first_register": per[0],
        "bytes_last_register": per[-1],
        "log_bytes_total": total,
        "log_bytes_per_request_byte": round(total / request_bytes, 2),
        "seconds": round(seconds, 2),
    }


def bench_compaction(store_cls, base: Path, groups: int) -> dict:
    path = base / "groups"
    store = store_cls(path)
    store.load()
    for g in range(groups):
        store.put_initial_offsets(f"{g:05d}-" + "g" * (GROUP_NAME_BYTES - 6), {("orders", 0): g})
    store.sync()
    t0 = time.perf_counter()
    try:
        store.compact()
        outcome = "ok"
    except Exception as exc:  # noqa: BLE001 - an older checkout may fail here: report it
        outcome = f"{type(exc).__name__}: {str(exc)[:120]}"
    seconds = time.perf_counter() - t0
    store.close()
    sizes = record_sizes(path)
    again = store_cls(path)
    report = again.load()
    seen = len(again.groups())
    again.close()
    return {
        "groups": groups,
        "group_name_bytes": GROUP_NAME_BYTES,
        "compaction": outcome,
        "compaction_s": round(seconds, 2),
        "records": len(sizes),
        "largest_record_bytes": max(sizes),
        "frame_limit_bytes": 64 << 20,
        "groups_after_restart": seen,
        "truncated_bytes_at_restart": report.truncated_bytes,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--members", type=int, default=1500)
    ap.add_argument("--groups", type=int, default=10_001)
    ap.add_argument(
        "--code",
        default=str(Path(__file__).resolve().parents[1]),
        help="checkout whose coordinator package is measured (default: this one)",
    )
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir, removed)")
    args = ap.parse_args()
    sys.path.insert(0, args.code)
    from coordinator.store.state_store import StateStore

    base = Path(args.dir or tempfile.mkdtemp(prefix="bench-store-bounds-"))
    try:
        out = {"code": args.code, "registrations": bench_registrations(StateStore, base, args.members)}
        shutil.rmtree(base / "members", ignore_errors=True)
        out["compaction"] = bench_compaction(StateStore, base, args.groups)
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
