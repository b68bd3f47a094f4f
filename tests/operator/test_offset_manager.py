"""The offset manager: assigned partitions only, consistent snapshots."""

from __future__ import annotations

import threading

from kafka import TopicPartition

from cr_consumer.operator.offset_manager import Interval, OffsetManager

A, B, C = (TopicPartition("t", p) for p in range(3))


def test_only_assigned_partitions_are_kept():
    om = OffsetManager()
    om.set_assignment([A, B])
    om.update(A, 10)
    om.update(C, 99)  # not assigned (revoked meanwhile): ignored
    assert om.snapshot() == {A: 10}  # B has no offset yet
    om.set_assignment([A, C])
    om.set(C, 5)
    assert om.snapshot() == {A: 10, C: 5}
    assert sorted(om.assigned()) == [A, C]


def test_snapshot_is_a_copy_and_consistent_under_concurrent_updates():
    om = OffsetManager()
    om.set_assignment([A, B])
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            i += 1
            om.update(A, i)
            om.update(B, i)

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(200):
            snap = om.snapshot()
            snap[A] = -1  # a copy: does not touch the manager
            assert om.get(A) != -1
    finally:
        stop.set()
        t.join(5)


def test_a_seek_starts_an_interval_and_a_checkpoint_answer_ends_it():
    om = OffsetManager()
    om.set_assignment([A, B])
    om.set_many({A: 10, B: 20})
    om.update(A, 15)
    ended = om.intervals()
    assert ended == {A: Interval(10, 15), B: Interval(20, 20)}
    om.rebase(ended)
    om.update(B, 22)
    assert om.intervals() == {A: Interval(15, 15), B: Interval(20, 22)}


def test_a_partition_seeked_or_revoked_since_the_answer_is_not_rebased():
    om = OffsetManager()
    om.set_assignment([A, B, C])
    om.set_many({A: 10, B: 20, C: 30})
    om.update(A, 15)
    om.update(B, 25)
    ended = om.intervals()
    om.set(A, 10)  # a reset seeked A back: its interval starts at the seek
    om.set_assignment([A, C])  # B revoked
    om.rebase(ended)
    assert om.intervals() == {A: Interval(10, 10), C: Interval(30, 30)}
    om.set_assignment([A, B, C])  # B assigned again: no start until seeked
    om.update(B, 27)
    assert om.intervals()[B] == Interval(None, 27)
