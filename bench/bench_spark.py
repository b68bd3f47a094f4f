"""Benchmark of the ``crkafka`` Spark source.

Figures, all in one run on one freshly produced topic (default 1,000,000 x
100-byte records, 4 partitions, embedded broker, coordinator process):

1. baseline: a bare kafka-python poll loop (no group, assign + seek to the
   beginning, max_poll_records 2000, records counted and dropped) over the
   whole topic, right before and right after each query (mean): rows/s;
2. the Spark query ``readStream.format("crkafka") -> writeStream.format("noop")``
   (local[2], 1 and 2 members): rows/s from Spark's own progress reports, over
   the batches after the first non-empty one (so the group join and the first
   batch's planning are excluded), as a ratio of (1);
3. batch commit latency: ``commit(end)`` of the source group (synchronous
   commit through the members to Kafka), p50/p99/max over many batches, the
   same code the runner runs on ``commit``, driven directly (Spark does not
   report it separately); with the cut (``read``) latency alongside.

    .venv/bin/python bench/bench_spark.py [--records 1000000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cr_consumer.testing.kafka_util import create_topic, producer, unique_name

#: Bound on any one consumption run, so a stuck query fails the bench.
RUN_TIMEOUT_S = 600.0


def produce_fixed(bootstrap: str, topic: str, n: int, size: int) -> float:
    t0 = time.perf_counter()
    p = producer(bootstrap, linger_ms=20, batch_size=512 * 1024)
    value = b"x" * size
    parts = sorted(p.partitions_for(topic))
    try:
        for i in range(n):
            p.send(topic, value=value, partition=parts[i % len(parts)])
        p.flush()
    finally:
        p.close()
    return time.perf_counter() - t0


def bare_poll_loop(bootstrap: str, topic: str, n: int) -> float:
    """rows/s of a plain KafkaConsumer reading the whole topic."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             max_poll_records=2000, auto_offset_reset="earliest")
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got = 0
        t0 = time.perf_counter()
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while got < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"bare loop read {got}/{n} records")
            for records in consumer.poll(timeout_ms=500).values():
                got += len(records)
        return got / (time.perf_counter() - t0)
    finally:
        consumer.close()


def spark_rate(spark, bootstrap: str, coordinator: str, topic: str, n: int, members: int, max_batch: int, workdir: Path) -> dict:
    group = unique_name("bench-spark")
    query = (
        spark.readStream.format("crkafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("group.id", group)
        .option("subscribe", topic)
        .option("coordinator", coordinator)
        .option("members", members)
        .option("startPosition", "beginning")
        .option("maxRecordsPerBatch", max_batch)
        .option("kafka.session.timeout.ms", 6000)
        .option("kafka.heartbeat.interval.ms", 1000)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(workdir / f"ckpt-{group}"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while True:
            if query.exception() is not None:
                raise RuntimeError(f"query failed: {query.exception()}")
            done = sum(p["numInputRows"] for p in query.recentProgress)
            if done >= n:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"query read {done}/{n} records")
            time.sleep(0.2)
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        query.stop()
    # rows after the first non-empty batch, over the time from its end to the last batch's end
    from datetime import datetime

    def ts(p):
        return datetime.strptime(p["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()

    first, last = progress[0], progress[-1]
    span = ts(last) + last["batchDuration"] / 1000 - (ts(first) + first["batchDuration"] / 1000)
    rows = sum(p["numInputRows"] for p in progress[1:])
    read_ms = [p["durationMs"].get("latestOffset", 0) for p in progress[1:]]
    return {
        "members": members,
        "max_records_per_batch": max_batch,
        "batches": len(progress),
        "rows_per_s": rows / span if span > 0 else float("nan"),
        "mean_batch_rows": rows / max(1, len(progress) - 1),
        "read_ms_p50": statistics.median(read_ms) if read_ms else None,
    }


def commit_latency(bootstrap: str, coordinator: str, topic: str, n: int, batches: int, members: int) -> dict:
    """Drive the source group directly: cut batches and commit them, timing both."""
    from cr_consumer.spark.group import SourceGroup
    from cr_consumer.spark.offsets import SourceOffset
    from cr_consumer.spark.options import parse_options

    options = parse_options({
        "kafka.bootstrap.servers": bootstrap, "group.id": unique_name("bench-commit"), "subscribe": topic,
        "coordinator": coordinator, "members": str(members), "startPosition": "beginning",
        "maxRecordsPerBatch": "1000", "kafka.max.poll.records": "500", "kafka.session.timeout.ms": "6000", "kafka.heartbeat.interval.ms": "1000",
    })
    group = SourceGroup(options)
    commits, cuts = [], []
    start = SourceOffset.initial()
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        rows = 0
        while len(commits) < batches and rows < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"commit bench: {len(commits)} commits, {rows}/{n} rows")
            t0 = time.perf_counter()
            out, end = group.next_batch(start)
            t1 = time.perf_counter()
            rows += sum(b.num_rows for b in out)
            if end == start:
                time.sleep(0.01)
                continue
            cuts.append((t1 - t0) * 1000)
            t2 = time.perf_counter()
            group.commit(end)
            commits.append((time.perf_counter() - t2) * 1000)
            start = end
            time.sleep(0.02)  # Spark would be running the batch now
        failures = group.stats["commit_failures"]
    finally:
        group.close()

    def pct(xs, q):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(q * len(xs)))]

    return {
        "members": members,
        "commits": len(commits),
        "commit_ms_p50": pct(commits, 0.5), "commit_ms_p99": pct(commits, 0.99), "commit_ms_max": max(commits),
        "cut_ms_p50": pct(cuts, 0.5), "cut_ms_p99": pct(cuts, 0.99),
        "commit_failures": failures,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="200k records, fewer variants")
    args = parser.parse_args()
    if args.quick:
        args.records = 200_000
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    from coordinator.launcher import CoordinatorProcess
    from cr_consumer.testing.broker import EmbeddedBroker

    workdir = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    results: dict = {"records": args.records, "size": args.size, "partitions": args.partitions}
    with EmbeddedBroker(log_path=workdir / "broker.log") as broker, CoordinatorProcess(state_dir=workdir / "coord") as coord:
        topic = create_topic(broker.bootstrap, unique_name("bench-spark"), partitions=args.partitions)
        results["produce_s"] = produce_fixed(broker.bootstrap, topic, args.records, args.size)
        print(f"produced {args.records} x {args.size} B in {results['produce_s']:.1f}s", flush=True)

        from cr_consumer.spark.session import local_session

        spark = local_session("bench-spark")
        variants = [(1, 200_000), (2, 200_000)] if not args.quick else [(2, 100_000)]
        runs = []
        try:
            for members, max_batch in variants:
                # the baseline runs right before and right after the query; their mean is the reference
                before = bare_poll_loop(broker.bootstrap, topic, args.records)
                rate = spark_rate(spark, broker.bootstrap, coord.endpoint, topic, args.records, members, max_batch, workdir)
                after = bare_poll_loop(broker.bootstrap, topic, args.records)
                base = (before + after) / 2
                rate["baseline_rows_per_s"] = base
                rate["baseline_before_after"] = [round(before), round(after)]
                rate["load_avg_1m"] = os.getloadavg()[0]
                rate["ratio"] = rate["rows_per_s"] / base
                runs.append(rate)
                print(json.dumps(rate), flush=True)
        finally:
            spark.stop()
        results["spark"] = runs
        results["commit"] = commit_latency(broker.bootstrap, coord.endpoint, topic, args.records, 200 if not args.quick else 50, 2)
        print(json.dumps(results["commit"]), flush=True)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
