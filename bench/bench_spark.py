"""Benchmark of the ``crkafka`` Spark source.

Figures, all in one run on one freshly produced topic (default 1,000,000 x
100-byte records, 4 partitions, embedded broker, coordinator process):

1. baselines: a bare kafka-python poll loop (no group, assign + seek to the
   beginning, max_poll_records 2000, records counted and dropped) and a bare
   confluent-kafka loop (assign at the beginning, consume 10,000 at a time,
   messages counted and dropped) over the whole topic, each right before and
   right after each query (mean): rows/s;
2. the Spark query ``readStream.format("crkafka") -> writeStream.format("noop")``
   (local[2]; executors on kafka-python with 1 member, on librdkafka with 1 and
   2 members): rows/s from Spark's own progress reports, over the batches after
   the first non-empty one (so the group join and the first batch's planning
   are excluded), as a ratio of each baseline of (1);
3. the driver side alone (``QueryPlanner``, the code the source runner runs):
   the commit of a batch's end once the sink committed it (``sink_notice``,
   what the listener's notice runs: a synchronous commit through the paused
   group members), p50/p99/max over many batches, the planning (``latestOffset``)
   latency, the first plan after start (group join included), rows through
   the driver (0: executors read the ranges) and the records the watermark
   probe fetched, and the driver's CPU seconds per 1M planned rows; with the
   members' steady poll as shipped (``membership.POLL_MS``) and at 10 ms (the
   join's poll, the earlier steady one), alternately;
4. with ``--standalone``: the librdkafka query of (2) with 1 member on
   ``local[2]``, then the same on a Spark standalone cluster of two workers of
   one core each (``tests/support/spark_cluster.py``: each executor its own JVM),
   each with its baselines, in the same run (no commit figures);
5. with ``--sink``: the ``crkafka`` sink (``writeStream.format("crkafka")``, key and value of
   the topic's records to a fresh 4-partition topic) against the noop sink, both reading with
   the librdkafka query of (2) with 1 member, and a plain confluent-kafka producer loop of the
   same rows (default settings, flush at the end) right before and after each query: rows/s
   (no commit figures).

    .venv/bin/python bench/bench_spark.py [--records 1000000] [--quick]
    .venv/bin/python bench/bench_spark.py --commit-only --commit-runs 3   # (3) alone
    .venv/bin/python bench/bench_spark.py --standalone                    # (4) alone
    .venv/bin/python bench/bench_spark.py --sink --records 200000         # (5) alone
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
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # tests/ for support.spark_cluster

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

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        max_poll_records=2000,
        auto_offset_reset="earliest",
    )
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


def bare_confluent_loop(bootstrap: str, topic: str, n: int) -> float:
    """rows/s of a plain confluent-kafka (librdkafka) consumer reading the whole topic
    (assign at the beginning, consume 10,000 at a time, messages counted and dropped)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer
    from confluent_kafka import TopicPartition as CkTopicPartition

    from cr_consumer.kafka.librdkafka.ranges import FETCH_QUEUE_BACKOFF_MS

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_name("bench-bare"),
            "enable.auto.commit": False,
            "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
        }
    )
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([CkTopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(parts)])
        got = 0
        t0 = time.perf_counter()
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while got < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"bare confluent-kafka loop read {got}/{n} records")
            got += sum(1 for m in consumer.consume(10_000, 0.5) if m.error() is None)
        return got / (time.perf_counter() - t0)
    finally:
        consumer.close()


def spark_rate(
    spark,
    bootstrap: str,
    coordinator: str,
    topic: str,
    n: int,
    members: int,
    max_batch: int,
    workdir: Path,
    client: str,
    out_topic: str | None = None,
) -> dict:
    """Rows/s of ``format("crkafka")`` -> the noop sink, or -> the crkafka sink writing key and
    value to ``out_topic``."""
    group = unique_name("bench-spark")
    df = (
        spark.readStream.format("crkafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.group.id", group)
        .option("subscribe", topic)
        .option("coordinator", coordinator)
        .option("members", members)
        .option("kafka.client", client)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", max_batch)
        .option("kafka.session.timeout.ms", 6000)
        .option("kafka.heartbeat.interval.ms", 1000)
        .load()
    )
    if out_topic is None:
        writer = df.writeStream.format("noop")
    else:
        writer = (
            df.select("key", "value")
            .writeStream.format("crkafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", out_topic)
        )
    query = (
        writer.option("checkpointLocation", str(workdir / f"ckpt-{group}")).trigger(processingTime="0 seconds").start()
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
        "sink": "noop" if out_topic is None else "crkafka",
        "client": client,
        "members": members,
        "max_offsets_per_trigger": max_batch,
        "batches": len(progress),
        "rows_per_s": rows / span if span > 0 else float("nan"),
        "mean_batch_rows": rows / max(1, len(progress) - 1),
        "read_ms_p50": statistics.median(read_ms) if read_ms else None,
    }


def confluent_produce_loop(bootstrap: str, source: str, n: int) -> float:
    """rows/s of a plain confluent-kafka producer (default settings) sending the ``n`` records of
    ``source`` (key and value, read first, not timed) to a fresh topic, flushed at the end."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
    from confluent_kafka import TopicPartition as CkTopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": unique_name("bench-src"), "enable.auto.commit": False}
    )
    rows: list[tuple[bytes | None, bytes | None]] = []
    try:
        parts = consumer.list_topics(source, timeout=10).topics[source].partitions
        consumer.assign([CkTopicPartition(source, p, OFFSET_BEGINNING) for p in sorted(parts)])
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while len(rows) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {len(rows)}/{n} records of {source}")
            rows.extend((m.key(), m.value()) for m in consumer.consume(10_000, 0.5) if m.error() is None)
    finally:
        consumer.close()
    out = create_topic(bootstrap, unique_name("bench-produce"), partitions=4)
    producer = Producer({"bootstrap.servers": bootstrap})
    t0 = time.perf_counter()
    for key, value in rows[:n]:
        while True:
            try:
                producer.produce(out, value, key)
                break
            except BufferError:
                producer.poll(0.01)  # the local queue is full: let deliveries drain it
        producer.poll(0)
    if producer.flush(RUN_TIMEOUT_S):
        raise TimeoutError("the producer loop's records were not all delivered")
    return n / (time.perf_counter() - t0)


def cluster_session(master: str):
    """A session on the standalone cluster at ``master`` (executors of 1 core, 1 GiB)."""
    from cr_consumer.spark.session import cluster_session as session

    return session(master, "bench-spark-standalone", str(ROOT), conf={"spark.ui.enabled": "false"})


def commit_latency(
    bootstrap: str, coordinator: str, topic: str, n: int, batches: int, members: int, poll_ms: int | None = None
) -> dict:
    """Drive the driver-side planner directly: plan a batch, then commit its end as the
    sink-commit notice does once Spark committed the batch, timing both; the ranges are not read (the executors' work). Also counts
    the records the driver fetched (only the watermark probe's last batch per partition)."""
    import resource

    from cr_consumer.spark import membership
    from cr_consumer.spark.offsets import SourceOffset
    from cr_consumer.spark.options import parse_options
    from cr_consumer.spark.planner import QueryPlanner
    from cr_consumer.spark.sink_notices import SinkNotice

    default_poll_ms = membership.POLL_MS
    membership.POLL_MS = poll_ms if poll_ms is not None else default_poll_ms  # the members' steady poll

    options = parse_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "kafka.group.id": unique_name("bench-commit"),
            "subscribe": topic,
            "coordinator": coordinator,
            "members": str(members),
            "startingOffsets": "earliest",
        }
    )
    planner = QueryPlanner(options)
    commits, plans = [], []
    start = SourceOffset.initial()
    step = max(1, n // batches)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    try:
        t_first = time.perf_counter()
        first_plan_ms = None
        planned = 0
        while len(commits) < batches and planned < n:
            t0 = time.perf_counter()
            end = planner.latest_offset(start, step)
            plans.append((time.perf_counter() - t0) * 1000)
            if first_plan_ms is None:
                first_plan_ms = (time.perf_counter() - t_first) * 1000
            if end.positions == start.positions:
                break
            planned += sum(end.positions.values()) - sum(start.positions.values())
            t2 = time.perf_counter()
            planner.sink_notice(SinkNotice(end))  # the sink committed the batch: its end is committed now
            commits.append((time.perf_counter() - t2) * 1000)
            start = end
        failures = planner.stats["commit_failures"]
        probe_rows = planner.probe.records_dropped
    finally:
        planner.close()
        membership.POLL_MS = default_poll_ms
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu_s = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)

    def pct(xs, q):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(q * len(xs)))]

    return {
        "members": members,
        "member_poll_ms": poll_ms if poll_ms is not None else default_poll_ms,
        "commits": len(commits),
        "planned_rows": planned,
        "rows_through_driver": 0,  # by construction: the members are paused, ranges are read by executors
        "probe_rows_fetched": probe_rows,
        "driver_cpu_s_per_1m_rows": cpu_s * 1_000_000 / max(1, planned),
        "first_plan_ms": first_plan_ms,
        "commit_ms_p50": pct(commits, 0.5),
        "commit_ms_p99": pct(commits, 0.99),
        "commit_ms_max": max(commits),
        "plan_ms_p50": pct(plans, 0.5),
        "plan_ms_p99": pct(plans, 0.99),
        "commit_failures": failures,
    }


def source_variants(args: argparse.Namespace) -> list[tuple[str, int]]:
    """The (executors' client, members) of the source queries of (2) and (4)."""
    if args.commit_only or args.sink:
        return []
    if args.standalone:
        return [("librdkafka", 1)]
    if args.quick:
        return [("kafka-python", 1), ("librdkafka", 1)]
    return [("kafka-python", 1), ("librdkafka", 1), ("librdkafka", 2)]


def sink_rates(bootstrap: str, coordinator: str, topic: str, args: argparse.Namespace, workdir: Path) -> list[dict]:
    """(5): the noop sink, then the crkafka sink, each with the producer loop before and after."""
    from cr_consumer.spark.session import local_session

    runs = []
    spark = local_session("bench-spark-sink")
    try:
        for out in (None, "crkafka"):
            before = confluent_produce_loop(bootstrap, topic, args.records)
            out_topic = None if out is None else create_topic(bootstrap, unique_name("bench-sink"), 4)
            rate = spark_rate(
                spark, bootstrap, coordinator, topic, args.records, 1, args.max_batch, workdir, "librdkafka", out_topic
            )
            after = confluent_produce_loop(bootstrap, topic, args.records)
            rate["producer_loop_rows_per_s"] = (before + after) / 2
            rate["producer_loop_before_after"] = [round(before), round(after)]
            rate["ratio_to_producer_loop"] = rate["rows_per_s"] / rate["producer_loop_rows_per_s"]
            rate["load_avg_1m"] = os.getloadavg()[0]
            print(json.dumps(rate), flush=True)
            runs.append(rate)
    finally:
        spark.stop()
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--max-batch", type=int, default=250_000, help="maxOffsetsPerTrigger of the queries")
    parser.add_argument("--commit-only", action="store_true", help="only the driver-side commit figures")
    parser.add_argument("--commit-runs", type=int, default=1, help="runs of the driver-side commit figures")
    parser.add_argument("--quick", action="store_true", help="200k records, fewer variants")
    parser.add_argument("--sink", action="store_true", help="(5): the crkafka sink against noop and a producer loop")
    parser.add_argument(
        "--standalone", action="store_true", help="librdkafka, 1 member: local[2], then a two-worker standalone cluster"
    )
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
    with (
        EmbeddedBroker(log_path=workdir / "broker.log") as broker,
        CoordinatorProcess(state_dir=workdir / "coord") as coord,
    ):
        topic = create_topic(broker.bootstrap, unique_name("bench-spark"), partitions=args.partitions)
        results["produce_s"] = produce_fixed(broker.bootstrap, topic, args.records, args.size)
        print(f"produced {args.records} x {args.size} B in {results['produce_s']:.1f}s", flush=True)

        variants = source_variants(args)
        runs = []

        def measured(spark, client: str, members: int) -> dict:
            # the baselines run right before and right after the query; their means are the references
            before = bare_poll_loop(broker.bootstrap, topic, args.records)
            before_ck = bare_confluent_loop(broker.bootstrap, topic, args.records)
            rate = spark_rate(
                spark, broker.bootstrap, coord.endpoint, topic, args.records, members, args.max_batch, workdir, client
            )
            after = bare_poll_loop(broker.bootstrap, topic, args.records)
            after_ck = bare_confluent_loop(broker.bootstrap, topic, args.records)
            base = (before + after) / 2
            base_ck = (before_ck + after_ck) / 2
            rate["master"] = spark.sparkContext.master
            rate["baseline_rows_per_s"] = base
            rate["baseline_before_after"] = [round(before), round(after)]
            rate["confluent_rows_per_s"] = base_ck
            rate["confluent_before_after"] = [round(before_ck), round(after_ck)]
            rate["load_avg_1m"] = os.getloadavg()[0]
            rate["ratio"] = rate["rows_per_s"] / base
            rate["ratio_to_confluent"] = rate["rows_per_s"] / base_ck
            print(json.dumps(rate), flush=True)
            return rate

        spark = None
        if variants:
            from cr_consumer.spark.session import local_session

            spark = local_session("bench-spark")
        try:
            for client, members in variants:
                runs.append(measured(spark, client, members))
        finally:
            if spark is not None:
                spark.stop()
        if args.standalone:
            from support.spark_cluster import StandaloneCluster

            with StandaloneCluster(workdir / "cluster", workers=2, cores=1, memory="1g") as cluster:
                spark = cluster_session(cluster.master_url)
                try:
                    runs.append(measured(spark, "librdkafka", 1))
                finally:
                    spark.stop()
        if args.sink:
            runs.extend(sink_rates(broker.bootstrap, coord.endpoint, topic, args, workdir))
        results["spark"] = runs
        # the members' steady poll as shipped, and the earlier 10 ms (the same poll as the join), alternately
        results["commit"] = [
            commit_latency(
                broker.bootstrap, coord.endpoint, topic, args.records, 200 if not args.quick else 50, 2, poll_ms
            )
            for _ in range(0 if args.standalone or args.sink else args.commit_runs)
            for poll_ms in (None, 10)
        ]
        for figures in results["commit"]:
            print(json.dumps(figures), flush=True)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
