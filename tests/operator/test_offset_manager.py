"""The offset manager: assigned partitions only, consistent snapshots."""

from __future__ import annotations

import threading

from kafka import TopicPartition

from cr_consumer.operator.offset_manager import OffsetManager

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
