"""Consumer-operator figures, side by side in one run against the bare poll loop.

Modes, alternated trial by trial on the same topic (each trial its own group):

* ``bare``: bench/baseline.py's bare kafka-python poll loop;
* ``operator``: one ConsumerOperator (event thread -> queue -> process thread
  -> offset manager -> no-op ``submit_batch``), no region cycles;
* ``operator+cycles``: the same with a drain + checkpoint every second
  (permit blocked, drain, checkpoint, unblock: what the region runtime does);
* ``operator/submit``: per-record ``submit(record)`` no-op instead of the batch form.

Throughput is records/s from the first submitted record to the last; the
ratio is against the median of the bare loop in the same run. Drain latency
(stop polling -> commit acknowledged, 4 partitions) is sampled by a drain +
checkpoint every ``--drain-samples-s`` (100 ms) during a separate consuming run.
Also the CPU of one operator on an idle topic (``--idle-s``).

Reset latency after a member joins (a real coordinator process): two members
consume a topic, a third joins; the region (as the runtime would) resets all
three to a merged checkpoint when asked. Reported: from the first revocation
to every member's first tuple after its reset, minus the broker's own
rebalance time (first revocation -> last assignment).

    .venv/bin/python bench/bench_operator.py                      # 1M x 100 B, 4 partitions, 3 trials
    .venv/bin/python bench/bench_operator.py --messages 200000 --trials 3
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from baseline import bare_poll_loop, produce_fixed  # noqa: E402

from cr_consumer import ConsumerOperator, OperatorConfig, StartPosition  # noqa: E402
from cr_consumer.operator.region import RegionPermit  # noqa: E402

#: Bound on one operator run, so a stall fails the benchmark instead of hanging it.
RUN_TIMEOUT_S = 300.0


class Counter:
    def __init__(self, n: int) -> None:
        self.n = n
        self.seen = 0
        self.first = None
        self.last = None
        self.done = threading.Event()

    def batch(self, records) -> None:
        if self.first is None:
            self.first = time.perf_counter()
            self.cpu_first = time.process_time()
        self.seen += len(records)
        if self.seen >= self.n:
            self.last = time.perf_counter()
            self.cpu_last = time.process_time()
            self.done.set()

    def record(self, _record) -> None:
        if self.first is None:
            self.first = time.perf_counter()
            self.cpu_first = time.process_time()
        self.seen += 1
        if self.seen >= self.n:
            self.last = time.perf_counter()
            self.cpu_last = time.process_time()
            self.done.set()


def _config(bootstrap, topic, **kw) -> OperatorConfig:
    return OperatorConfig(
        bootstrap_servers=bootstrap, group_id=f"bench-op-{uuid.uuid4().hex[:8]}", operator_name="m0",
        topics=[topic], start_position=StartPosition.BEGINNING, drain_timeout_s=30, reset_timeout_s=30,
        consumer_properties={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}, **kw)


def run_operator(bootstrap, topic, n, *, cycle_every_s=None, per_record=False) -> dict:
    counter = Counter(n)
    permit = RegionPermit()
    if per_record:
        op = ConsumerOperator(_config(bootstrap, topic), counter.record, permit=permit)
    else:
        op = ConsumerOperator(_config(bootstrap, topic), submit_batch=counter.batch, permit=permit)
    drains_ms: list[float] = []
    stop = threading.Event()

    def cycles():
        seq = 0
        while not stop.wait(cycle_every_s):
            if counter.first is None:
                continue
            seq += 1
            permit.block(30)
            t0 = time.perf_counter()
            op.drain()
            drains_ms.append((time.perf_counter() - t0) * 1000)
            op.checkpoint(seq)
            permit.unblock()

    op.start()
    driver = None
    try:
        if cycle_every_s:
            driver = threading.Thread(target=cycles, daemon=True)
            driver.start()
        if not counter.done.wait(RUN_TIMEOUT_S):
            raise TimeoutError(f"operator saw {counter.seen} of {n} records")
    finally:
        stop.set()
        if driver is not None:
            driver.join(30)
        op.close()
    seconds = counter.last - counter.first
    return {"records": counter.seen, "seconds": seconds, "records_per_s": counter.seen / seconds,
            "cpu_s": counter.cpu_last - counter.cpu_first, "drains": len(drains_ms), "drain_ms": drains_ms}


class _Timed:
    """A submit_batch that remembers when each batch arrived."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.count = 0

    def __call__(self, records) -> None:
        self.times.append(time.monotonic())
        self.count += len(records)

    def first_after(self, t: float) -> float | None:
        for x in self.times:
            if x >= t:
                return x
        return None


class _BenchRegion:
    """What the region runtime does on a reset request: block every member's
    permit, reset each (concurrently) to the merged offsets given as a
    one-member checkpoint, unblock."""

    def __init__(self, merged) -> None:
        self.members = []
        self.merged = merged
        self.requests = 0
        self.done_at: dict[str, float] = {}
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._running = False

    def request_reset(self, *, force: bool, reason: str) -> None:
        with self._lock:
            self.requests += 1
            if self._running:
                return
            self._running = True
        threading.Thread(target=self._cycle, daemon=True).start()

    def _cycle(self) -> None:
        from cr_consumer.operator.checkpoint import OperatorCheckpoint

        ops = list(self.members)
        try:
            for op in ops:
                op.permit.block(30)
            threads = []
            for op in ops:
                data = OperatorCheckpoint(op.name, (op.name,), self.merged).encode()
                t = threading.Thread(target=self._reset_one, args=(op, data))
                t.start()
                threads.append(t)
            for t in threads:
                t.join(60)
        finally:
            for op in ops:
                op.permit.unblock()
            with self._lock:
                self._running = False

    def _reset_one(self, op, data) -> None:
        try:
            op.reset(1, data, 0)
            self.done_at[op.name] = time.monotonic()
        except BaseException as exc:  # noqa: BLE001 - reported by the bench
            self.errors.append(exc)


def reset_latency_trial(bootstrap, coordinator, topic, partitions, n) -> dict:
    """Two members consume; a third joins. Latency = from the first revocation
    to every member's first tuple after its reset, minus the broker's
    rebalance time (first revocation -> last assignment)."""
    from kafka import TopicPartition

    group = f"bench-reset-{uuid.uuid4().hex[:8]}"
    merged = {TopicPartition(topic, p): 0 for p in range(partitions)}
    region = _BenchRegion(merged)
    revoked: list[float] = []
    assigned: dict[str, float] = {}
    sinks: dict[str, _Timed] = {}

    def member(name):
        sink = _Timed()
        sinks[name] = sink
        cfg = OperatorConfig(
            bootstrap_servers=bootstrap, group_id=group, operator_name=name, topics=[topic],
            coordinator=coordinator, start_position=StartPosition.BEGINNING, drain_timeout_s=10, reset_timeout_s=20,
            consumer_properties={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000})
        op = ConsumerOperator(cfg, submit_batch=sink, permit=RegionPermit(), region=region)
        orig_revoked, orig_assigned = op.rebalancer.on_revoked, op.rebalancer.on_assigned

        def on_revoked(tps, *, lost):
            if tps:
                revoked.append(time.monotonic())
            orig_revoked(tps, lost=lost)

        def on_assigned(tps):
            assigned[name] = time.monotonic()
            orig_assigned(tps)

        op.rebalancer.on_revoked = on_revoked
        op.rebalancer.on_assigned = on_assigned
        region.members.append(op)
        return op.start()

    ops = [member("m0"), member("m1")]
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while sum(s.count for s in sinks.values()) < n or not all(
                op.metrics()["nAssignedPartitions"] == partitions // 2 for op in ops):
            if time.monotonic() > deadline:
                raise TimeoutError("two members did not consume the topic")
            time.sleep(0.05)
        ops.append(member("m2"))
        while True:
            if time.monotonic() > deadline or region.errors:
                raise TimeoutError(f"reset did not complete: {region.errors}")
            if len(region.done_at) == 3:
                snap_assigned = dict(assigned)
                firsts = {name: sinks[name].first_after(max(region.done_at[name], snap_assigned.get(name, 0)))
                          for name in sinks}
                if all(firsts.values()):
                    break
            time.sleep(0.01)
    finally:
        for op in ops:
            op.close()
    t_rev = min(revoked)
    t_asg = max(snap_assigned.values())
    total = max(firsts.values()) - t_rev
    broker = t_asg - t_rev
    detail = {name: {"assigned_ms": round((snap_assigned[name] - t_rev) * 1000),
                     "reset_done_ms": round((region.done_at[name] - t_rev) * 1000),
                     "first_tuple_ms": round((firsts[name] - t_rev) * 1000)} for name in sorted(sinks)}
    return {"total_ms": total * 1000, "broker_rebalance_ms": broker * 1000, "reset_ms": (total - broker) * 1000,
            "reset_requests": region.requests, "members": detail}


def idle_cpu(bootstrap, topic, seconds: float) -> float:
    """Percent of a core this process spends on one assigned operator with nothing to consume."""
    op = ConsumerOperator(_config(bootstrap, topic), submit_batch=lambda _records: None, permit=RegionPermit())
    op.start()
    try:
        deadline = time.monotonic() + 60
        while op.metrics()["nAssignedPartitions"] == 0:
            if time.monotonic() > deadline:
                raise TimeoutError("the idle operator was not assigned partitions within 60 s")
            time.sleep(0.05)  # polling a metric another thread sets, bounded by the deadline
        cpu0, t0 = time.process_time(), time.monotonic()
        time.sleep(seconds)  # the measurement window itself
        return (time.process_time() - cpu0) / (time.monotonic() - t0) * 100
    finally:
        op.close()


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else None


def main() -> None:
    from cr_consumer.testing.broker import bootstrap_or_embedded
    from cr_consumer.testing.kafka_util import create_topic, unique_name

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--modes", default="bare,operator,operator+cycles,operator/submit")
    ap.add_argument("--drain-samples-s", type=float, default=0.1,
                    help="> 0: run the drain-latency measurement, a drain every this many seconds while consuming")
    ap.add_argument("--idle-s", type=float, default=5.0,
                    help="> 0: CPU of one operator on an idle topic, sampled over this many seconds (0: skip)")
    ap.add_argument("--reset-trials", type=int, default=3, help="member-join reset-latency trials (0: skip)")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--no-gc-freeze", action="store_true",
                    help="do not gc.freeze() the start-up heap before the trials (the member runtime freezes it)")
    args = ap.parse_args()
    modes = args.modes.split(",")
    results: dict[str, list[dict]] = {m: [] for m in modes}
    with bootstrap_or_embedded(args.bootstrap) as bootstrap:
        topic = create_topic(bootstrap, unique_name("bench-op"), args.partitions)
        t0 = time.monotonic()
        if args.trials > 0:
            produce_fixed(bootstrap, topic, args.messages)
        print(f"produced {args.messages} x 100 B to {args.partitions} partitions in {time.monotonic() - t0:.1f}s",
              flush=True)
        if not args.no_gc_freeze:
            # As the member runtime does once running (cr_consumer/runtime/member/process.py):
            # the ~40k start-up objects (modules, clients) out of the cyclic GC's
            # full collections, which otherwise re-scan them for ~20 ms about once
            # a second, stalling whichever drain they hit (bare loop and operator alike).
            gc.collect()
            gc.freeze()
        n = args.messages
        for trial in range(args.trials):
            for mode in modes:
                if mode == "bare":
                    r = bare_poll_loop(bootstrap, topic, n)
                elif mode == "operator":
                    r = run_operator(bootstrap, topic, n)
                elif mode == "operator+cycles":
                    r = run_operator(bootstrap, topic, n, cycle_every_s=1.0)
                elif mode == "operator/submit":
                    r = run_operator(bootstrap, topic, n, per_record=True)
                else:
                    raise SystemExit(f"unknown mode {mode!r}")
                results[mode].append(r)
                print(f"trial {trial} {mode:16s} {r['records_per_s']:10.0f} rec/s ({r['seconds']:.2f}s, "
                      f"cpu {r['cpu_s'] / r['records'] * 1e6:.2f} us/rec)", flush=True)
        drain = None
        if args.drain_samples_s > 0 and args.trials > 0:
            # Drain latency: a drain + checkpoint every --drain-samples-s while consuming.
            r = run_operator(bootstrap, topic, n, cycle_every_s=args.drain_samples_s)
            drain = {"samples": len(r["drain_ms"]), "p50_ms": pct(r["drain_ms"], 0.5),
                     "p90_ms": pct(r["drain_ms"], 0.9), "p99_ms": pct(r["drain_ms"], 0.99),
                     "max_ms": max(r["drain_ms"]) if r["drain_ms"] else None}
            print("drain latency: " + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                                                for k, v in drain.items()), flush=True)
        idle = None
        if args.idle_s > 0:
            idle = idle_cpu(bootstrap, create_topic(bootstrap, unique_name("bench-idle"), args.partitions), args.idle_s)
            print(f"idle operator: {idle:.1f} % of a core", flush=True)
        resets = []
        if args.reset_trials > 0:
            import tempfile

            from coordinator.launcher import CoordinatorProcess

            small = create_topic(bootstrap, unique_name("bench-reset"), args.partitions)
            produce_fixed(bootstrap, small, 20_000)
            with tempfile.TemporaryDirectory() as state, CoordinatorProcess(Path(state)) as coord:
                for trial in range(args.reset_trials):
                    r = reset_latency_trial(bootstrap, coord.endpoint, small, args.partitions, 20_000)
                    resets.append(r)
                    print(f"reset trial {trial}: {json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in r.items()})}", flush=True)
    base = statistics.median(r["records_per_s"] for r in results["bare"]) if results.get("bare") else None
    pair = {}  # per trial: mode / bare of the same trial (robust to load drifting between trials)
    cpu = {}  # CPU seconds of this process per record, bare / mode (robust to other processes' load)
    if results.get("bare"):
        for mode, runs in results.items():
            if mode == "bare" or not runs:
                continue
            pair[mode] = round(statistics.median(
                r["records_per_s"] / b["records_per_s"] for r, b in zip(runs, results["bare"])), 3)
            cpu[mode] = round(statistics.median(
                (b["cpu_s"] / b["records"]) / (r["cpu_s"] / r["records"]) for r, b in zip(runs, results["bare"])), 3)
    summary = {"messages": args.messages, "partitions": args.partitions, "trials": args.trials,
               "median_records_per_s": {}, "ratio_to_bare": {}, "median_pair_ratio": pair,
               "cpu_efficiency_vs_bare": cpu, "drain_latency": drain, "idle_cpu_percent": idle,
               "reset_after_join_ms": {
                   "trials": len(resets),
                   "median_reset_ms": statistics.median(r["reset_ms"] for r in resets) if resets else None,
                   "max_reset_ms": max(r["reset_ms"] for r in resets) if resets else None,
                   "median_broker_rebalance_ms": statistics.median(r["broker_rebalance_ms"] for r in resets) if resets else None,
               }}
    for mode, runs in results.items():
        if not runs:
            continue
        med = statistics.median(r["records_per_s"] for r in runs)
        summary["median_records_per_s"][mode] = round(med)
        if base:
            summary["ratio_to_bare"][mode] = round(med / base, 3)
    print(json.dumps(summary, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "runs": results}, indent=2))


if __name__ == "__main__":
    main()
