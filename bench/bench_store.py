"""Benchmark of the coordinator's durable state (coordinator.store.state_store), no broker needed.

Figures, each with a baseline measured in the same run:
1. durable control-variable writes per second: single (one entry per record,
   sync after each) and batched (N entries per record, one sync each); baseline:
   the same framed bytes written with os.write + os.fsync, no store.
2. memory per control variable at 1,000,000 entries (tracemalloc of the table;
   names pre-created and interned, as a real workload reuses them); baseline: a dict
   {(group, topic, partition): offset}. And the objects the table adds to the
   cyclic GC's work (baseline: the same table built of array('q')).
3. replay time for 1,000,000 entries, from the log the batched writes leave,
   from a compacted segment, and from 1,000,000 one-entry requests (the
   rebatching compaction runs meanwhile); baseline: reading the file and
   checking every CRC without decoding.
4. compaction of 1,000,000 live entries while the caller keeps writing: the
   longest caller pause (snapshot, switch) and the time in the background.

    .venv/bin/python bench/bench_store.py [--entries 1000000] [--dir /tmp/x]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import tempfile
import time
import tracemalloc
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coordinator.store import records
from coordinator.store.control_table import ControlTable
from coordinator.store.log import segment
from coordinator.store.state_store import StateStore


def fresh(base: Path, name: str) -> Path:
    path = base / name
    shutil.rmtree(path, ignore_errors=True)
    return path


def bench_writes(base: Path, singles: int, batches: int, batch: int) -> dict:
    out = {}
    # baseline: raw framed appends, one fsync each
    path = fresh(base, "raw")
    path.mkdir()
    payload = records.encode(time.time(), [records.control_entry("group-x", "topic", [7], [123456])])
    frame = segment.encode_record(payload)
    fd = os.open(path / "raw.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    t0 = time.perf_counter()
    for _ in range(singles):
        os.write(fd, frame)
        os.fsync(fd)
    out["raw_single_per_s"] = singles / (time.perf_counter() - t0)
    big = segment.encode_record(
        records.encode(time.time(), [records.control_entry("group-x", "topic", list(range(batch)), [123456] * batch)])
    )
    t0 = time.perf_counter()
    for _ in range(batches):
        os.write(fd, big)
        os.fsync(fd)
    out["raw_batched_entries_per_s"] = batches * batch / (time.perf_counter() - t0)
    os.close(fd)

    store = StateStore(fresh(base, "single"))
    store.load()
    t0 = time.perf_counter()
    for i in range(singles):
        store.put_initial_offsets(f"group-{i % 100}", {("topic", i): 123456})
        store.sync()
    out["store_single_per_s"] = singles / (time.perf_counter() - t0)
    store.close()

    store = StateStore(fresh(base, "batched"))
    store.load()
    t0 = time.perf_counter()
    for i in range(batches):
        store.put_initial_offsets(f"group-{i}", {("topic", p): 123456 + p for p in range(batch)})
        store.sync()
    out["store_batched_entries_per_s"] = batches * batch / (time.perf_counter() - t0)
    store.close()
    # group commit: several requests (of 100 entries) per sync, as the server loop does
    store = StateStore(fresh(base, "group-commit"))
    store.load()
    t0 = time.perf_counter()
    n = 0
    for i in range(batches):
        for r in range(10):
            store.put_initial_offsets(f"group-{i}-{r}", {("topic", p): p for p in range(batch // 10)})
            n += batch // 10
        store.sync()
    out["store_group_commit_entries_per_s"] = n / (time.perf_counter() - t0)
    store.close()
    return out


SHAPES = {  # groups, topics per group, partitions per topic
    "1000g x 10t x 100p": (1000, 10, 100),
    "10000g x 1t x 100p": (10000, 1, 100),
    "100000g x 1t x 10p": (100000, 1, 10),
}


def bench_memory(entries: int) -> dict:
    out = {}
    for label, (groups, topics, parts) in SHAPES.items():
        scale = entries / (groups * topics * parts)
        groups = int(groups * scale)
        gnames = [sys.intern(f"consumer-group-{g:07d}") for g in range(groups)]
        tnames = [sys.intern(f"topic-{t:03d}") for t in range(topics)]
        plist, olist = list(range(parts)), [1_000_000_000 + p for p in range(parts)]
        gc.collect()
        tracked0 = len(gc.get_objects())
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        table = ControlTable()
        for g in gnames:
            for t in tnames:
                table.set_many(g, t, plist, olist)
        used = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        gc.collect()
        tracked = len(gc.get_objects()) - tracked0
        n = len(table)
        del table
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        flat = {}
        for g in gnames:
            for t in tnames:
                for p, o in zip(plist, olist):
                    flat[(g, t, p)] = o
        flat_used = tracemalloc.get_traced_memory()[0] - base
        tracemalloc.stop()
        del flat
        gc.collect()
        arrays = {g: {t: array("q", olist) for t in tnames} for g in gnames}  # the array('q') design
        gc.collect()
        arrays_tracked = len(gc.get_objects()) - tracked0
        del arrays
        gc.collect()
        out[label] = {
            "entries": n,
            "bytes_per_entry": used / n,
            "dict_of_tuples_bytes_per_entry": flat_used / n,
            "gc_tracked_objects": tracked,
            "array_q_table_gc_tracked_objects": arrays_tracked,
        }
    return out


def bench_replay(base: Path, entries: int, batch: int) -> dict:
    out = {}
    path = fresh(base, "replay")
    store = StateStore(path)
    store.load()
    groups = entries // (10 * 100)
    for g in range(groups):
        name = f"consumer-group-{g:06d}"
        for t0 in range(0, 10, max(1, batch // 100)):
            req = {
                (f"topic-{t}", p): 1_000_000_000 + p for t in range(t0, min(10, t0 + batch // 100)) for p in range(100)
            }
            store.put_initial_offsets(name, req)
        store.sync()
    store.close()
    for label in ("batched log", "compacted segment"):
        seg = next(path.glob("segment-*.log"))
        data = seg.read_bytes()
        t0 = time.perf_counter()
        segment.scan(seg.read_bytes(), lambda off, p: None)
        raw = time.perf_counter() - t0
        gc.collect()
        store = StateStore(path)
        report = store.load()
        assert store.stats().control_variables == groups * 1000, store.stats()
        out[label] = {
            "entries": report.entries,
            "records": report.records,
            "bytes": len(data),
            "load_s": report.seconds,
            "read_and_crc_only_s": raw,
        }
        if label == "batched log":
            store.compact()
        store.close()
    # worst case for replay: every request carries one entry (server loop: 100
    # requests per sync, maybe_compact after each sync, as cr-coordinator does)
    path = fresh(base, "replay-single")
    store = StateStore(path)
    store.load()
    t0 = time.perf_counter()
    for i in range(entries):
        store.put_initial_offsets(f"consumer-group-{i // 1000:06d}", {(f"topic-{(i // 100) % 10}", i % 100): i})
        if i % 100 == 99:
            store.sync()
            store.maybe_compact()
    write_s = time.perf_counter() - t0
    compactions = store.stats().compactions
    store.close()
    seg = next(path.glob("segment-*.log"))
    size = seg.stat().st_size
    t0 = time.perf_counter()
    segment.scan(seg.read_bytes(), lambda off, p: None)
    raw = time.perf_counter() - t0
    store = StateStore(path)
    report = store.load()
    assert store.stats().control_variables == entries
    store.close()
    out["1-entry requests"] = {
        "entries": report.entries,
        "records": report.records,
        "bytes": size,
        "load_s": report.seconds,
        "read_and_crc_only_s": raw,
        "write_s": write_s,
        "compactions_while_writing": compactions,
    }
    return out


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def bench_compaction(base: Path, entries: int) -> dict:
    path = fresh(base, "compaction")
    store = StateStore(path, compact_min_bytes=0, compact_dead_ratio=0.3)
    store.load()
    groups = entries // 1000
    for g in range(groups):
        store.put_initial_offsets(
            f"consumer-group-{g:06d}", {(f"topic-{t}", p): p for t in range(10) for p in range(100)}
        )
    store.sync()
    writes = 0

    def write_and_sync() -> float:
        nonlocal writes
        store.put_initial_offsets(f"late-{writes}", {("t", p): p for p in range(100)})
        writes += 1
        t = time.perf_counter()
        store.sync()
        return time.perf_counter() - t

    baseline = [write_and_sync() for _ in range(200)]  # sync latency, no compaction
    for i in range(entries):  # dead entries: overwritten documents
        store.put_document("ns", f"k{i % 100}", {"i": i})
    store.sync()
    before = store.stats()
    t0 = time.perf_counter()
    assert store.maybe_compact()
    start_pause = time.perf_counter() - t0
    during, polls, n0 = [], [], writes
    while True:  # keep writing (100 entries + one sync per round) during the compaction
        during.append(write_and_sync())
        c0 = time.perf_counter()
        finished = store.maybe_compact()
        polls.append(time.perf_counter() - c0)
        if finished:
            break
    total = time.perf_counter() - t0
    after = store.stats()
    store.close()
    store = StateStore(path)
    store.load()
    assert store.stats().control_variables == groups * 1000 + writes * 100
    store.close()
    ms = 1e3
    return {
        "log_bytes_before": before.log_bytes,
        "log_bytes_after": after.log_bytes,
        "entries_before": before.live_entries + before.dead_entries,
        "live_entries": after.live_entries,
        "background_s": total,
        "writes_during": writes - n0,
        "start_pause_ms": start_pause * ms,
        "switch_pause_ms": polls[-1] * ms,
        "sync_ms_without": {
            "p50": _pct(baseline, 0.5) * ms,
            "p99": _pct(baseline, 0.99) * ms,
            "max": max(baseline) * ms,
        },
        "sync_ms_during": {"p50": _pct(during, 0.5) * ms, "p99": _pct(during, 0.99) * ms, "max": max(during) * ms},
        "store_reported_max_pause_ms": after.compaction_max_pause_ms,
    }


def bench_snapshot_many_groups(base: Path, groups: int) -> dict:
    """The compaction's start pause (the caller-side snapshot) with many small groups."""
    path = fresh(base, "many-groups")
    store = StateStore(path, compact_min_bytes=0, compact_dead_ratio=0.001)
    store.load()
    for g in range(groups):
        store.put_initial_offsets(f"consumer-group-{g:07d}", {("topic", p): p for p in range(10)})
    for i in range(groups // 10):
        store.put_document("ns", "k", {"i": i})
    store.sync()
    t0 = time.perf_counter()
    assert store.maybe_compact()
    start = time.perf_counter() - t0
    t0 = time.perf_counter()
    while not store.maybe_compact():
        store.put_initial_offsets(f"late-{time.perf_counter_ns()}", {("t", 0): 1})
        store.sync()
    total = time.perf_counter() - t0
    switch = store.stats().compaction_max_pause_ms
    t0 = time.perf_counter()
    store.expire()
    expire_s = time.perf_counter() - t0
    store.close()
    return {
        "groups": groups,
        "start_pause_ms": start * 1e3,
        "max_pause_ms": switch,
        "background_s": total,
        "expire_scan_ms": expire_s * 1e3,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=1_000_000, help="entries for memory/replay/compaction")
    ap.add_argument("--singles", type=int, default=2000, help="single-entry durable writes")
    ap.add_argument("--batches", type=int, default=200, help="batched durable writes")
    ap.add_argument("--batch", type=int, default=1000, help="entries per batched write")
    ap.add_argument("--dir", type=Path, default=None, help="state dirs go here (default: a temp dir)")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    args = ap.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="bench-store-"))
    base.mkdir(parents=True, exist_ok=True)
    result = {
        "writes": bench_writes(base, args.singles, args.batches, args.batch),
        "memory": bench_memory(args.entries),
        "replay": bench_replay(base, args.entries, args.batch),
        "compaction": bench_compaction(base, args.entries),
        "many_groups": bench_snapshot_many_groups(base, args.entries // 10),
    }
    if args.dir is None:
        shutil.rmtree(base, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    w = result["writes"]
    print("durable writes (entries/s)")
    print(
        f"  single : store {w['store_single_per_s']:10.0f}   raw write+fsync {w['raw_single_per_s']:10.0f}"
        f"   ratio {w['store_single_per_s'] / w['raw_single_per_s']:.2f}"
    )
    print(
        f"  batched: store {w['store_batched_entries_per_s']:10.0f}   raw write+fsync {w['raw_batched_entries_per_s']:10.0f}"
        f"   ratio {w['store_batched_entries_per_s'] / w['raw_batched_entries_per_s']:.2f}"
    )
    print(
        f"  group commit (10 requests x {args.batch // 10} entries per sync): {w['store_group_commit_entries_per_s']:.0f}"
    )
    print(f"  batched / single: {w['store_batched_entries_per_s'] / w['store_single_per_s']:.0f}x")
    print("memory per control variable (bytes, tracemalloc)")
    for label, m in result["memory"].items():
        print(
            f"  {label:22s} {m['entries']:8d} entries: {m['bytes_per_entry']:6.1f}"
            f"   dict of tuples {m['dict_of_tuples_bytes_per_entry']:6.1f};  GC-tracked objects"
            f" {m['gc_tracked_objects']} (array('q') table: {m['array_q_table_gc_tracked_objects']})"
        )
    print("replay")
    for label, r in result["replay"].items():
        print(
            f"  {label:18s} {r['entries']:8d} entries in {r['records']:6d} records, {r['bytes'] / 1e6:6.1f} MB:"
            f" {r['load_s']:.3f} s   (read + CRC only {r['read_and_crc_only_s']:.3f} s)"
        )
    c = result["compaction"]
    print(
        f"compaction: {c['entries_before']} entries, {c['log_bytes_before'] / 1e6:.1f} MB -> {c['live_entries']} "
        f"live, {c['log_bytes_after'] / 1e6:.1f} MB in {c['background_s']:.2f} s with {c['writes_during']} "
        f"writes+syncs meanwhile"
    )
    print(f"  caller pauses: start {c['start_pause_ms']:.1f} ms, switch {c['switch_pause_ms']:.1f} ms")
    w0, w1 = c["sync_ms_without"], c["sync_ms_during"]
    print(
        f"  sync latency ms without compaction p50 {w0['p50']:.2f} p99 {w0['p99']:.2f} max {w0['max']:.2f}; "
        f"during p50 {w1['p50']:.2f} p99 {w1['p99']:.2f} max {w1['max']:.2f}"
    )
    m = result["many_groups"]
    print(
        f"compaction with {m['groups']} groups x 10 partitions: start pause {m['start_pause_ms']:.1f} ms, "
        f"longest pause {m['max_pause_ms']:.1f} ms, background {m['background_s']:.2f} s; "
        f"expire() scan {m['expire_scan_ms']:.1f} ms"
    )


if __name__ == "__main__":
    main()
