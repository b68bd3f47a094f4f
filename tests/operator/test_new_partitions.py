"""Partitions that appear after a job's first start are read from their earliest offset.

The configured start position (here END) applies to the partitions that exist
when the group first starts; a topic that a subscription pattern matches later
starts at its log start offset, so records written into it before the group is
assigned it are read, exactly once.
"""

from __future__ import annotations

import pytest
from kafka import TopicPartition

from coordinator.protocol.common.waiting import wait_until
from cr_consumer import StartKind
from cr_consumer.operator.control_plane import LocalControl
from cr_consumer.operator.region import RegionPermit
from cr_consumer.operator.seek_targets import plan_start
from cr_consumer.testing.kafka_util import create_topic, produce

from support.operator import Sink, make


def _by_topic(sink: Sink, topic: str) -> dict[int, list[int]]:
    return {p: sorted(v) for (t, p), v in sink.offsets().items() if t == topic}


@pytest.mark.usefixtures("kafka_client")  # runs with both Kafka clients
def test_new_topic_written_before_assignment_is_read_from_earliest(bootstrap, names):
    prefix = names.topic("np")
    old = create_topic(bootstrap, f"{prefix}-a", partitions=2)
    produce(bootstrap, old, (b"old%d" % i for i in range(6)), single_record_batches=True)
    sink = Sink()
    with make(
        bootstrap,
        names.group(),
        "m0",
        sink,
        pattern=f"{prefix}-.*",
        start_position=StartKind.LATEST,
        commit_period_s=0.2,
    ) as op:
        wait_until(
            lambda: (
                len(op.offsets.assigned()) == 2 and all(op.offsets.get(tp) is not None for tp in op.offsets.assigned())
            ),
            30,
            "the first assignment seeked",
        )
        assert sorted(op.offsets.snapshot().values()) == [3, 3]  # END: the old records are skipped
        new = create_topic(bootstrap, f"{prefix}-b", partitions=2)
        produce(bootstrap, new, (b"b%d" % i for i in range(40)))
        # the records above were written before the group was assigned the new topic
        assert {tp.topic for tp in op.offsets.assigned()} == {old}
        wait_until(lambda: sum(len(v) for v in _by_topic(sink, new).values()) >= 40, 30, "the new topic's records")
        produce(bootstrap, new, (b"c%d" % i for i in range(10)))
        wait_until(lambda: sum(len(v) for v in _by_topic(sink, new).values()) >= 50, 30, "later records")
    assert _by_topic(sink, new) == {0: list(range(25)), 1: list(range(25))}
    assert _by_topic(sink, old) == {}


def test_restart_keeps_the_first_start_and_reads_topics_created_meanwhile_from_earliest(bootstrap, names):
    """Control variables remember the first start: after a restart the old topic
    starts where the first start put it (END then), a topic created while the
    job was down starts at its earliest offset."""
    prefix = names.topic("nr")
    group = names.group()
    control = LocalControl()  # the group's control variables, shared by both runs
    old = create_topic(bootstrap, f"{prefix}-a")
    produce(bootstrap, old, (b"old%d" % i for i in range(5)), single_record_batches=True)
    first = Sink()
    with make(
        bootstrap,
        group,
        "m0",
        first,
        pattern=f"{prefix}-.*",
        start_position=StartKind.LATEST,
        permit=RegionPermit(),
        control=control,
    ) as op:
        wait_until(lambda: op.offsets.get(TopicPartition(old, 0)) == 5, 30, "the old topic seeked to its end")
    produce(bootstrap, old, (b"later%d" % i for i in range(3)), single_record_batches=True)
    new = create_topic(bootstrap, f"{prefix}-b", partitions=2)
    produce(bootstrap, new, (b"b%d" % i for i in range(20)))
    second = Sink()
    with make(
        bootstrap,
        group,
        "m1",
        second,
        pattern=f"{prefix}-.*",
        start_position=StartKind.LATEST,
        permit=RegionPermit(),
        control=control,
    ):
        second.wait_count(23, 30)
    assert _by_topic(second, old) == {0: [5, 6, 7]}
    assert _by_topic(second, new) == {0: list(range(10)), 1: list(range(10))}
    assert len(second) == 23
    assert control.get_initial_offsets(group) == {(old, 0): 5, (new, 0): 0, (new, 1): 0}


def _tps(*pairs: tuple[str, int]) -> set[TopicPartition]:
    return {TopicPartition(t, p) for t, p in pairs}


def test_plan_first_start_covers_every_subscribed_partition():
    plan = plan_start(_tps(("a", 0)), group_started=False, subscribed=_tps(("a", 0), ("a", 1), ("b", 0)))
    assert plan.configured == _tps(("a", 0), ("a", 1), ("b", 0))
    assert plan.earliest == set()


def test_plan_after_the_first_start_new_partitions_start_at_earliest():
    plan = plan_start(_tps(("c", 0), ("a", 2)), group_started=True, subscribed=_tps(("a", 0), ("c", 0)))
    assert plan.configured == set()
    assert plan.earliest == _tps(("c", 0), ("a", 2))
