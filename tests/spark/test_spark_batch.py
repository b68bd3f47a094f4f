"""A batch read (spark.read.format("crkafka")) reads exactly startingOffsets..endingOffsets,
split by minPartitions, with the headers column, and commits nothing."""

from __future__ import annotations

import json

import pytest

from cr_consumer.testing.kafka_util import committed_offsets, create_topic, produce, producer

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark"), pytest.mark.timeout(300)]


def test_batch_read_of_offset_ranges(spark, bootstrap, coordinator, names):
    topic = create_topic(bootstrap, names.topic(), partitions=3)
    group = names.group()
    p = producer(bootstrap)
    try:
        for i in range(300):
            p.send(topic, value=b"v%d" % i, key=b"k%d" % i, partition=i % 3, headers=[("n", str(i).encode())])
        p.flush()
    finally:
        p.close()
    df = (
        spark.read.format("crkafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("coordinator", coordinator)
        .option("kafka.group.id", group)
        .option("startingOffsets", json.dumps({topic: {"0": 10, "1": -2, "2": -2}}))
        .option("endingOffsets", json.dumps({topic: {"0": 50, "1": -1, "2": 20}}))
        .option("minPartitions", 6)
        .option("includeHeaders", "true")
        .load()
    )
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    assert df.rdd.getNumPartitions() >= 6
    rows = df.collect()
    got = sorted((r["partition"], r["offset"]) for r in rows)
    assert got == sorted([(0, o) for o in range(10, 50)] + [(1, o) for o in range(100)] + [(2, o) for o in range(20)])
    for r in rows:
        i = 3 * r["offset"] + r["partition"]
        assert (r["key"], r["value"], r["topic"]) == (b"k%d" % i, b"v%d" % i, topic)
        assert [(h["key"], h["value"]) for h in r["headers"]] == [("n", str(i).encode())]
        assert r["timestampType"] == 0
    assert committed_offsets(bootstrap, group, topic) == {}  # a batch read commits nothing
    everything = (
        spark.read.format("crkafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("coordinator", coordinator)
        .load()
    )
    assert everything.count() == 300  # default: earliest to latest


def test_batch_read_commits_each_partitions_end_when_asked(spark, bootstrap, coordinator, names):
    """commitOnBatchRead=true: after the read the group holds each partition's end, and a
    second read from startingOffsets=committed returns only what came after."""
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    group = names.group()
    produce(bootstrap, topic, [b"a%d" % i for i in range(40)])  # 20 per partition

    def read():
        return (
            spark.read.format("crkafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("coordinator", coordinator)
            .option("kafka.group.id", group)
            .option("startingOffsets", "committed")
            .option("commitOnBatchRead", "true")
            .load()
            .select("partition", "offset")
            .collect()
        )

    first = sorted((r["partition"], r["offset"]) for r in read())
    assert first == [(p, o) for p in range(2) for o in range(20)]
    assert committed_offsets(bootstrap, group, topic) == {0: 20, 1: 20}
    produce(bootstrap, topic, [b"b%d" % i for i in range(20)])  # 10 more per partition
    second = sorted((r["partition"], r["offset"]) for r in read())
    assert second == [(p, o) for p in range(2) for o in range(20, 30)]
    assert committed_offsets(bootstrap, group, topic) == {0: 30, 1: 30}


def test_batch_read_needs_no_coordinator(spark, bootstrap, names):
    """Without the coordinator option a batch read takes what Spark's Kafka batch read takes:
    the subscription (each of the three kinds) and the offsets, and returns exactly that range."""
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    produce(bootstrap, topic, [b"v%d" % i for i in range(60)])  # 30 per partition
    starting = json.dumps({topic: {"0": 5, "1": -2}})
    ending = json.dumps({topic: {"0": 25, "1": 10}})
    expected = sorted([(0, o) for o in range(5, 25)] + [(1, o) for o in range(10)])
    for kind, value in [
        ("subscribe", topic),
        ("subscribePattern", f"{topic}.*"),
        ("assign", json.dumps({topic: [0, 1]})),
    ]:
        rows = (
            spark.read.format("crkafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option(kind, value)
            .option("startingOffsets", starting)
            .option("endingOffsets", ending)
            .load()
            .select("partition", "offset")
            .collect()
        )
        assert sorted((r["partition"], r["offset"]) for r in rows) == expected, kind
