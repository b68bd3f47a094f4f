"""The partitioned reader without Spark: the driver plans ranges from the group's
assignment and reads no record; executors read exactly each range; commits follow."""

from __future__ import annotations

import collections
import json

import pytest

from cr_consumer.spark.executor import read_range
from cr_consumer.spark.offsets import SourceOffset
from cr_consumer.spark.options import parse_options
from cr_consumer.spark.planner import QueryPlanner
from cr_consumer.spark.ranges import batch_ranges
from cr_consumer.testing.kafka_util import committed_offsets, create_topic, produce


def _options(bootstrap, topic, group, coordinator, **extra):
    return parse_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "kafka.group.id": group,
            "subscribe": topic,
            "coordinator": coordinator,
            "members": "2",
            "startingOffsets": "earliest",
            "kafka.session.timeout.ms": "6000",
            "kafka.heartbeat.interval.ms": "1000",
            **extra,
        }
    )


@pytest.mark.parametrize("client", ["librdkafka", "kafka-python"])
def test_planned_ranges_read_exactly_once_and_commits_follow(bootstrap, coordinator, names, client):
    topic = create_topic(bootstrap, names.topic(), partitions=3)
    group = names.group()
    produce(bootstrap, topic, [b"v%d" % i for i in range(3000)])  # 1000 per partition
    options = _options(bootstrap, topic, group, coordinator, **{"kafka.client": client})
    planner = QueryPlanner(options)
    seen: collections.Counter = collections.Counter()
    start = SourceOffset.initial()
    try:
        for _ in range(4):
            end = planner.latest_offset(start, 700)  # maxOffsetsPerTrigger
            assert end.epoch == start.epoch + 1
            for rng in batch_ranges(start, end, 5):
                rows = [r for b in read_range(options, rng, batch_rows=100) for r in b.to_pylist()]
                assert [r["offset"] for r in rows] == list(range(rng.start, rng.until)), rng
                seen.update((r["partition"], r["offset"]) for r in rows)
            assert sum(end.positions.values()) - sum(start.positions.values()) <= 700 + 3
            planner.commit(start)  # Spark commits the previous end after planning the next
            start = end
        end = planner.latest_offset(start, None)  # the rest
        # the sink committed the batch that ends at ``start``: planning the next committed it
        assert committed_offsets(bootstrap, group, topic) == {p: o for (_, p), o in start.positions.items()}
        for rng in batch_ranges(start, end, None):
            seen.update((r["partition"], r["offset"]) for b in read_range(options, rng) for r in b.to_pylist())
        planner.commit(start)  # Spark's late commit: nothing left to do
        start = end
        # idle: nothing new, no batch; the last batch's end is committed all the same
        assert planner.latest_offset(start, None) == start
        assert committed_offsets(bootstrap, group, topic) == {p: 1000 for p in range(3)}
        assert planner.probe.records_dropped <= 3 * 1000 * 10  # the probe reads at most the last batch per trigger
    finally:
        planner.close()
    assert sum(seen.values()) == 3000
    assert set(seen) == {(p, o) for p in range(3) for o in range(1000)}


def test_starting_timestamp_starts_at_the_first_record_at_or_after_it(bootstrap, coordinator, names):
    import time

    topic = create_topic(bootstrap, names.topic(), partitions=2)
    produce(bootstrap, topic, [b"old%d" % i for i in range(20)])
    time.sleep(1.1)  # tansu answers offsets_for_times per record batch by its append time
    since_ms = int(time.time() * 1000)
    time.sleep(0.1)
    produce(bootstrap, topic, [b"new%d" % i for i in range(10)])
    options = parse_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "kafka.group.id": names.group(),
            "subscribe": topic,
            "coordinator": coordinator,
            "startingTimestamp": str(since_ms),
            "kafka.session.timeout.ms": "6000",
            "kafka.heartbeat.interval.ms": "1000",
        }
    )
    planner = QueryPlanner(options)
    try:
        start = SourceOffset.initial()
        end = planner.latest_offset(start, None)
        values = [
            r["value"]
            for rng in batch_ranges(start, end, None)
            for b in read_range(options, rng)
            for r in b.to_pylist()
        ]
    finally:
        planner.close()
    assert sorted(values) == sorted(b"new%d" % i for i in range(10))
    assert end.first == {(topic, 0): 10, (topic, 1): 10}


def test_assign_plans_only_the_given_partitions_and_commits_them(bootstrap, coordinator, names):
    topic = create_topic(bootstrap, names.topic(), partitions=3)
    group = names.group()
    produce(bootstrap, topic, [b"v%d" % i for i in range(30)])  # 10 per partition
    options = parse_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "kafka.group.id": group,
            "members": "2",
            "assign": json.dumps({topic: [1]}),
            "coordinator": coordinator,
            "startingOffsets": "earliest",
        }
    )
    planner = QueryPlanner(options)
    try:
        start = SourceOffset.initial()
        end = planner.latest_offset(start, None)
        assert end.positions == {(topic, 1): 10}
        assert end.first == {(topic, 1): 0}
        idle = planner.latest_offset(end, None)
        planner.commit(end)
        assert idle.positions == end.positions
    finally:
        planner.close()
    assert committed_offsets(bootstrap, group, topic) == {1: 10}


def test_topic_matched_after_the_first_start_is_read_from_earliest(bootstrap, coordinator, names):
    """startingOffsets=latest applies to the partitions of the query's first start; a
    topic the pattern matches later enters the end offset with a ``from`` entry at its
    earliest offset, so records written into it before the members are assigned it
    are planned, each once."""
    import time

    prefix = names.topic("ne")
    old = create_topic(bootstrap, f"{prefix}-a", partitions=2)
    produce(bootstrap, old, [b"old%d" % i for i in range(6)])
    options = parse_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "kafka.group.id": names.group(),
            "subscribePattern": f"{prefix}-.*",
            "coordinator": coordinator,
            "members": "2",
            "startingOffsets": "latest",
            "kafka.metadata.max.age.ms": "1000",
            "kafka.session.timeout.ms": "6000",
            "kafka.heartbeat.interval.ms": "1000",
        }
    )
    planner = QueryPlanner(options)
    seen: collections.Counter = collections.Counter()
    try:
        start = SourceOffset.initial()
        end = planner.latest_offset(start, None)
        assert end.first == end.positions
        assert sum(end.positions.values()) == 6  # latest: the old records skipped
        planner.commit(start)
        start = end
        new = create_topic(bootstrap, f"{prefix}-b", partitions=2)
        produce(bootstrap, new, [b"b%d" % i for i in range(40)])  # before the members are assigned the topic
        firsts: dict = {}
        deadline = time.monotonic() + 60
        # until every record is read and both new partitions are planned (a keyless producer
        # may put all 40 records into one partition, planned before the other is assigned)
        while sum(seen.values()) < 40 or len(firsts) < 2:
            assert time.monotonic() < deadline, f"stuck at {dict(seen)}, firsts {firsts}, stats {planner.stats}"
            end = planner.latest_offset(start, None)
            firsts.update({tp: off for tp, off in end.first.items() if tp[0] == new})
            for rng in batch_ranges(start, end, None):
                seen.update(
                    (rng.topic, r["partition"], r["offset"]) for b in read_range(options, rng) for r in b.to_pylist()
                )
            planner.commit(start)
            start = end
            time.sleep(0.1)
    finally:
        planner.close()
    assert firsts == {(new, 0): 0, (new, 1): 0}
    assert not [k for k, c in seen.items() if c > 1], "duplicates"
    assert {(p, o) for t, p, o in seen if t == new} == {(p, o) for p in range(2) for o in range(20)}
    assert not [k for k in seen if k[0] == old]


def test_both_executor_clients_read_the_same_rows(bootstrap, coordinator, names):
    """The librdkafka reader builds the same Arrow rows (keys, values, headers, timestamps,
    timestampType) as the kafka-python one, for a range inside the log and one cut at its end."""
    from cr_consumer.spark.ranges import OffsetRange
    from cr_consumer.testing.kafka_util import producer

    topic = create_topic(bootstrap, names.topic(), partitions=1)
    p = producer(bootstrap)
    try:
        for i in range(300):
            p.send(
                topic,
                value=b"v%d" % i,
                key=None if i % 7 == 0 else b"k%d" % i,
                partition=0,
                headers=[("n", str(i).encode()), ("empty", b"")] if i % 2 else [],
            )
        p.flush()
    finally:
        p.close()
    rows = {}
    for client in ("kafka-python", "librdkafka"):
        options = _options(
            bootstrap, topic, names.group(), coordinator, **{"kafka.client": client, "includeHeaders": "true"}
        )
        rows[client] = [
            [r for b in read_range(options, rng, batch_rows=64) for r in b.to_pylist()]
            for rng in (OffsetRange(topic, 0, 17, 250), OffsetRange(topic, 0, 250, 300))
        ]
    assert rows["librdkafka"] == rows["kafka-python"]
    inside, tail = rows["librdkafka"]
    assert [r["offset"] for r in inside + tail] == list(range(17, 300))
    assert inside[0]["key"] == b"k17"
    assert inside[0]["headers"] == [{"key": "n", "value": b"17"}, {"key": "empty", "value": b""}]
    assert all(r["timestamp"] is not None and r["timestampType"] == 0 for r in inside + tail)
