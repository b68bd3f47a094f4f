"""Consumer-operator figures (issue 3), side by side in one run against the bare poll loop.

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
checkpoint every 100 ms during a separate consuming run.

    .venv/bin/python bench/bench_operator.py                      # 1M x 100 B, 4 partitions, 3 trials
    .venv/bin/python bench/bench_operator.py --messages 200000 --trials 3
"""

from __future__ import annotations

import argparse
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
from cr_consumer.region import RegionPermit  # noqa: E402

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
        self.seen += len(records)
        if self.seen >= self.n:
            self.last = time.perf_counter()
            self.done.set()

    def record(self, _record) -> None:
        if self.first is None:
            self.first = time.perf_counter()
        self.seen += 1
        if self.seen >= self.n:
            self.last = time.perf_counter()
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
            "drains": len(drains_ms), "drain_ms": drains_ms}


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else None


def main() -> None:
    from cr_consumer.broker import bootstrap_or_embedded
    from cr_consumer.kafka_util import create_topic, unique_name

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--modes", default="bare,operator,operator+cycles,operator/submit")
    ap.add_argument("--drain-samples-s", type=float, default=10.0, help="length of the drain-latency run")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    modes = args.modes.split(",")
    results: dict[str, list[dict]] = {m: [] for m in modes}
    with bootstrap_or_embedded(args.bootstrap) as bootstrap:
        topic = create_topic(bootstrap, unique_name("bench-op"), args.partitions)
        t0 = time.monotonic()
        produce_fixed(bootstrap, topic, args.messages)
        print(f"produced {args.messages} x 100 B to {args.partitions} partitions in {time.monotonic() - t0:.1f}s",
              flush=True)
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
                print(f"trial {trial} {mode:16s} {r['records_per_s']:10.0f} rec/s ({r['seconds']:.2f}s)", flush=True)
        drain = None
        if args.drain_samples_s > 0:
            # Drain latency: a drain + checkpoint every 100 ms while consuming.
            r = run_operator(bootstrap, topic, n, cycle_every_s=0.1)
            drain = {"samples": len(r["drain_ms"]), "p50_ms": pct(r["drain_ms"], 0.5),
                     "p99_ms": pct(r["drain_ms"], 0.99), "max_ms": max(r["drain_ms"]) if r["drain_ms"] else None}
    base = statistics.median(r["records_per_s"] for r in results["bare"]) if "bare" in results else None
    summary = {"messages": args.messages, "partitions": args.partitions, "trials": args.trials,
               "median_records_per_s": {}, "ratio_to_bare": {}, "drain_latency": drain}
    for mode, runs in results.items():
        med = statistics.median(r["records_per_s"] for r in runs)
        summary["median_records_per_s"][mode] = round(med)
        if base:
            summary["ratio_to_bare"][mode] = round(med / base, 3)
    print(json.dumps(summary, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "runs": results}, indent=2))


if __name__ == "__main__":
    main()
