"""Start positions, control variables, seek priorities, pattern subscription."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from coordinator.protocol.common.waiting import wait_until
from cr_consumer import StartKind, StartPosition
from cr_consumer.operator.checkpoint import OperatorCheckpoint
from cr_consumer.operator.region import RegionPermit
from cr_consumer.testing.kafka_util import create_topic, produce

from support.operator import Members, Sink, make


def _seeked(op, tps, timeout=30):
    wait_until(lambda: all(op.offsets.get(tp) is not None for tp in tps), timeout, f"{op.name} seeked {tps}")


def _offsets(sink, topic):
    return {p: sorted(v) for (t, p), v in sink.offsets().items() if t == topic}


@pytest.mark.usefixtures("kafka_client")  # runs with both Kafka clients
def test_start_end_skips_existing_records(bootstrap, names):
    topic = create_topic(bootstrap, names.topic())
    produce(bootstrap, topic, (b"old%d" % i for i in range(5)), single_record_batches=True)
    sink = Sink()
    with make(bootstrap, names.group(), "m0", sink, topics=[topic], start_position=StartKind.LATEST) as op:
        _seeked(op, [TopicPartition(topic, 0)])
        assert op.offsets.get(TopicPartition(topic, 0)) == 5
        produce(bootstrap, topic, (b"new%d" % i for i in range(3)))
        sink.wait_count(3, 20)
        assert _offsets(sink, topic) == {0: [5, 6, 7]}


@pytest.mark.usefixtures("kafka_client")  # runs with both Kafka clients
def test_start_time_uses_offsets_for_times(bootstrap, names):
    topic = create_topic(bootstrap, names.topic())
    produce(bootstrap, topic, (b"early%d" % i for i in range(5)), single_record_batches=True)
    time.sleep(0.05)  # a timestamp gap between the two halves (not synchronisation)
    start_ms = int(time.time() * 1000)
    time.sleep(0.01)
    produce(bootstrap, topic, (b"late%d" % i for i in range(5)), single_record_batches=True)
    sink = Sink()
    with make(bootstrap, names.group(), "m0", sink, topics=[topic], start_position=StartPosition.at_time(start_ms)):
        sink.wait_count(5, 20)
        assert _offsets(sink, topic) == {0: [5, 6, 7, 8, 9]}


@pytest.mark.usefixtures("kafka_client")  # runs with both Kafka clients
def test_start_default_committed_else_auto_offset_reset(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    produce(bootstrap, topic, (b"v%d" % i for i in range(20)))
    group = names.group()
    plain = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    plain.assign([TopicPartition(topic, 0)])
    plain.commit({TopicPartition(topic, 0): OffsetAndMetadata(3, "", -1)})
    plain.close()
    sink = Sink()
    with make(bootstrap, group, "m0", sink, topics=[topic], consumer_properties={"auto.offset.reset": "earliest"}):
        sink.wait_count(17, 20)
        assert _offsets(sink, topic) == {0: list(range(3, 10)), 1: list(range(10))}


def test_control_variable_wins_over_start_position(bootstrap, names, coordinator):
    """The start position applies once per partition and job: a later member
    with another start position starts where the control variable says."""
    topic = create_topic(bootstrap, names.topic())
    produce(bootstrap, topic, (b"v%d" % i for i in range(10)), single_record_batches=True)
    group = names.group()
    first = Sink()
    with make(
        bootstrap,
        group,
        "m0",
        first,
        topics=[topic],
        coordinator=coordinator.endpoint,
        start_position=StartKind.EARLIEST,
        permit=RegionPermit(),
    ):
        first.wait_count(10, 20)
    second = Sink()
    with make(
        bootstrap,
        group,
        "m1",
        second,
        topics=[topic],
        coordinator=coordinator.endpoint,
        start_position=StartKind.LATEST,
        permit=RegionPermit(),
    ):
        second.wait_count(10, 20)
        assert _offsets(second, topic) == {0: list(range(10))}


def test_reset_seeks_a_partition_missing_from_the_checkpoint_to_its_control_variable(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    for p in range(2):
        produce(bootstrap, topic, (b"old" for _ in range(5)), partition=p, single_record_batches=True)
    sink = Sink()
    members = Members()
    op = members.add(
        make(
            bootstrap, names.group(), "m0", sink, topics=[topic], start_position=StartKind.LATEST, permit=RegionPermit()
        )
    )
    try:
        op.start()
        _seeked(op, [TopicPartition(topic, p) for p in range(2)])
        for p in range(2):  # control variables are now 5 (END when first seen)
            produce(bootstrap, topic, (b"new" for _ in range(10)), partition=p, single_record_batches=True)
        sink.wait_count(20, 20)
        assert _offsets(sink, topic) == {0: list(range(5, 15)), 1: list(range(5, 15))}
        # A checkpoint that knows only partition 0 (partition 1 was not assigned then).
        data = OperatorCheckpoint("m0", ("m0",), {TopicPartition(topic, 0): 10}).encode()
        sink.clear()
        members.reset(7, {"m0": data})
        sink.wait_count(15, 20)
        # Partition 1 restarts at its control variable (5), not at the start position END (15).
        assert _offsets(sink, topic) == {0: list(range(10, 15)), 1: list(range(5, 15))}
    finally:
        members.close()


def test_pattern_subscription_picks_up_a_new_topic(bootstrap, names):
    prefix = names.topic("pat")
    first = create_topic(bootstrap, f"{prefix}-a")
    produce(bootstrap, first, (b"a%d" % i for i in range(10)))
    sink = Sink()
    with make(
        bootstrap,
        names.group(),
        "m0",
        sink,
        pattern=f"{prefix}-.*",
        start_position=StartKind.EARLIEST,
        commit_period_s=0.2,
    ) as op:
        sink.wait_count(10, 20)
        wait_until(lambda: op.metrics()["nDrains"] >= 1, 10, "a commit")
        second = create_topic(bootstrap, f"{prefix}-b")
        produce(bootstrap, second, (b"b%d" % i for i in range(10)))
        wait_until(lambda: _offsets(sink, second) == {0: list(range(10))}, 30, "records of the new topic")
        assert op.metrics()["nConsumedTopics"] == 2
        assert sorted(set(_offsets(sink, first)[0])) == list(range(10))
