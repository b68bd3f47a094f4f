"""The librdkafka adapter's partition bookkeeping (PartitionStates), without a broker:
who paused what, where deferred seeks go, and what positions say."""

from __future__ import annotations

from cr_consumer.kafka.client import TopicPartition
from cr_consumer.kafka.librdkafka.partitions import PartitionStates

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))


def _assigned(*tps: TopicPartition, starts: dict[TopicPartition, int] | None = None) -> PartitionStates:
    parts = PartitionStates()
    parts.begin_assign(frozenset(tps))
    parts.end_assign()
    parts.assigned_at(frozenset(tps), starts or {tp: 0 for tp in tps}, set(), incremental=False)
    return parts


def test_seeks_and_pauses_during_an_assignment_are_collected_for_it():
    parts = PartitionStates()
    parts.begin_assign(frozenset({T0, T1}))
    assert parts.assigning
    assert parts.seek(T0, 7) is False  # the assignment starts T0 at 7
    assert parts.pause([T1, T2]) == {T2}  # T2 is not being assigned: paused in librdkafka now
    seeks, pauses = parts.end_assign()
    assert (seeks, pauses, parts.assigning) == ({T0: 7}, {T1}, False)
    parts.assigned_at(frozenset({T0, T1}), {T0: 7, T1: 3}, pauses, incremental=False)
    assert parts.paused == {T1, T2}
    assert parts.positions == {T0: 7, T1: 3}


def test_a_seek_of_a_paused_partition_waits_for_its_resume():
    parts = _assigned(T0, T1, starts={T0: 10, T1: 20})
    parts.pause([T0, T1])
    assert parts.seek(T0, 5) is False
    assert parts.seek(T1, 6) is False
    assert parts.positions == {T0: 5, T1: 6}  # what position() reports meanwhile
    assert parts.take_seeks(parts.resume([T1])) == {T1: 6}
    assert parts.resume([T2]) == set()  # only what is paused is resumed
    assert parts.take_seeks(parts.resume([T0])) == {T0: 5}
    assert parts.seek(T0, 8) is True  # not paused: librdkafka seeks now
    parts.sought(T0, 8)
    assert parts.positions[T0] == 8
    assert parts.seek_on_resume == {}


def test_records_withheld_go_back_to_the_lowest_position():
    parts = _assigned(T0, T1)
    parts.handed_out(T0, 100)
    parts.pause([T0])
    parts.withheld_from(T0, 100)  # librdkafka still returned records from 100: fetched again after the resume
    parts.withheld_from(T0, 140)  # later ones: the lower position stays
    assert parts.positions[T0] == 100
    assert parts.take_seeks(parts.resume([T0])) == {T0: 100}


def test_giving_partitions_up_forgets_them():
    parts = _assigned(T0, T1)
    parts.pause([T0, T1])
    parts.seek(T1, 4)
    parts.gave_up(frozenset({T1}), incremental=True)
    assert parts.assigned == {T0}
    assert parts.paused == {T0}
    assert parts.seek_on_resume == {}
    parts.gave_up(frozenset({T0}), incremental=False)
    assert (parts.assigned, parts.paused, parts.positions) == (frozenset(), set(), {})
