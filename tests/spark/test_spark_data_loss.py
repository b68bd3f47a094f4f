"""failOnDataLoss in a live query: a partition's end below its start is data loss, as in
Spark's Kafka source ("offset was changed from X to Y"). tansu deletes no records, so
the test makes the loss with ``startingOffsets`` past a partition's end (what a topic
deleted and created again looks like to the query): true fails the query naming the
partition and the option; false goes on from the end, delivering the rest exactly once."""

from __future__ import annotations

import collections
import json
import threading
import time
import urllib.request

import pytest
from pyspark.errors import StreamingQueryException

from coordinator.protocol.common.osutil import free_port
from cr_consumer.testing.kafka_util import create_topic, produce

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark"), pytest.mark.timeout(300)]

#: The start given for partition 0, past its end (20 records).
PAST_THE_END = 500


def _query(
    spark,
    bootstrap,
    coordinator,
    topic,
    group,
    checkpoint,
    sink,
    fail_on_data_loss: bool,
    metrics_port: int | None = None,
):
    reader = (
        spark.readStream.format("crkafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.group.id", group)
        .option("subscribe", topic)
        .option("coordinator", coordinator)
        .option("startingOffsets", json.dumps({topic: {"0": PAST_THE_END, "1": -2}}))
        .option("failOnDataLoss", str(fail_on_data_loss).lower())
        .option("kafka.session.timeout.ms", 6000)
        .option("kafka.heartbeat.interval.ms", 1000)
    )
    if metrics_port is not None:
        reader = reader.option("metricsPort", metrics_port)
    return (
        reader.load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="100 milliseconds")
        .start()
    )


def _wait(predicate, timeout_s: float, what: str, query) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise AssertionError(f"query failed while waiting for {what}: {query.exception()}")
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def _counter(port: int, name: str) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


def test_fail_on_data_loss_true_fails_the_query_naming_partition_and_option(
    spark, bootstrap, coordinator, names, tmp_path
):
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    produce(bootstrap, topic, [b"v%d" % i for i in range(40)])  # 20 per partition
    query = _query(
        spark,
        bootstrap,
        coordinator,
        topic,
        names.group(),
        tmp_path / "ckpt",
        lambda df, batch_id: df.count(),
        fail_on_data_loss=True,
    )
    try:
        try:
            ended = query.awaitTermination(120)
        except StreamingQueryException:  # the failure, read from query.exception() below
            ended = True
    finally:
        query.stop()
    assert ended, "the query did not fail on data loss"
    error = str(query.exception())
    assert f"{topic}:0" in error, error
    assert "failOnDataLoss" in error, error
    assert f"from {PAST_THE_END} back to 20" in error, error


def test_fail_on_data_loss_false_skips_to_the_end_and_delivers_the_rest_exactly_once(
    spark, bootstrap, coordinator, names, tmp_path
):
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    produce(bootstrap, topic, [b"v%d" % i for i in range(40)])  # 20 per partition
    seen: collections.Counter = collections.Counter()
    lock = threading.Lock()

    def sink(df, batch_id):
        rows = df.select("partition", "offset").collect()
        with lock:
            seen.update((r["partition"], r["offset"]) for r in rows)

    port = free_port()
    query = _query(
        spark,
        bootstrap,
        coordinator,
        topic,
        names.group(),
        tmp_path / "ckpt",
        sink,
        fail_on_data_loss=False,
        metrics_port=port,
    )
    try:
        # partition 1 starts at earliest; partition 0's start is past its end: skipped to 20
        _wait(lambda: sum(seen.values()) >= 20, 120, "partition 1's 20 records", query)
        _wait(lambda: _counter(port, "crkafka_spark_data_loss_skips_total") == 1.0, 30, "the skip's counter", query)
        produce(bootstrap, topic, [b"late%d" % i for i in range(30)], partition=0)  # offsets 20..49
        produce(bootstrap, topic, [b"late%d" % i for i in range(10)], partition=1)  # offsets 20..29
        _wait(lambda: sum(seen.values()) >= 60, 120, "the 40 records produced after the skip", query)
        time.sleep(1)  # a few more triggers: nothing more may arrive
    finally:
        query.stop()
    assert query.exception() is None
    assert max(seen.values()) == 1, "a record was delivered twice"
    assert set(seen) == {(0, o) for o in range(20, 50)} | {(1, o) for o in range(30)}
