"""The partitioned aggregate on the real broker, driven as the member runtime drives it: tables
per input partition, the changed keys written to the changelog at the checkpoint and committed
at its completion, a prepared checkpoint that never completed aborted by the reset, and the
tables restored by another member from the changelog alone."""

from __future__ import annotations

import time

import pytest

from coordinator.kafka.group_offsets import commit_offsets
from coordinator.kafka.raw_batches import read_committed
from coordinator.protocol.common.waiting import wait_until
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.runtime.pipeline.partitioned_aggregate import PartitionedAggregate
from cr_consumer.runtime.pipeline.records import Record
from cr_consumer.state.changelog import ChangelogFormatError
from cr_consumer.testing.kafka_util import create_topic, producer

pytestmark = pytest.mark.timeout(120)


def _aggregate(bootstrap: str, topic: str, group: str, member: str, **options: int) -> PartitionedAggregate:
    return PartitionedAggregate(
        lambda r: r.key,
        lambda s, r: s + r.value,
        0,
        topic=topic,
        bootstrap=bootstrap,
        group=group,
        member=member,
        **options,
    )


def _orders(topic: str, partition: int, first: int, keys: list[str]) -> list[Record]:
    return [Record(topic, partition, first + i, key=k, value=1) for i, k in enumerate(keys)]


def _committed(bootstrap: str, topic: str, partition: int) -> int:
    settings = admin_settings(bootstrap, {}, request_timeout_ms=10_000, client_id="test-partitioned")
    return len(read_committed(settings, topic, partition).records)


def test_tables_follow_their_partition_through_the_changelog(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    group = names.group()
    first = _aggregate(bootstrap, topic, group, "m0")
    first.reset_to_initial_state()
    out = first.process_batch(_orders(topic, 0, 0, ["a", "b", "a"]) + _orders(topic, 1, 0, ["c"]))
    assert [(r.key, r.value) for r in out] == [("a", 1), ("b", 1), ("a", 2), ("c", 1)]
    first.drain()
    first.checkpoint(1)
    assert len(first.transactions().prepared) == 1
    first.notify_checkpoint_complete(1)
    assert (_committed(bootstrap, first.store.changelog, 0), _committed(bootstrap, first.store.changelog, 1)) == (1, 1)

    # Only the keys changed since the last checkpoint are written (one change set).
    first.process_batch(_orders(topic, 0, 3, ["b"]))
    first.checkpoint(2)
    first.notify_checkpoint_complete(2)
    assert _committed(bootstrap, first.store.changelog, 0) == 2

    # Checkpoint 3 is prepared but never completes: the reset to 2 aborts it.
    first.process_batch(_orders(topic, 0, 4, ["a", "a"]))
    first.checkpoint(3)
    first.reset(2, b"")
    assert _committed(bootstrap, first.store.changelog, 0) == 2

    # Another member (another host, no local state) restores partition 0 at its first record.
    second = _aggregate(bootstrap, topic, group, "m1")
    second.reset(2, b"")
    out = second.process_batch(_orders(topic, 0, 4, ["a"]))
    assert [(r.key, r.value) for r in out] == [("a", 3)]
    assert second.store.tables == {0: {"a": 3, "b": 2}}
    assert (second.store.restored_records, second.store.restored_changes) == (2, 3)
    first.close()
    second.close()


def test_a_malformed_changelog_record_fails_the_restore_naming_it(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=1)
    op = _aggregate(bootstrap, topic, names.group(), "m0")
    try:
        op.reset_to_initial_state()
        op.process_batch(_orders(topic, 0, 0, ["a"]))
        op.checkpoint(1)
        op.notify_checkpoint_complete(1)
        p = producer(bootstrap)
        p.send(
            op.store.changelog,
            value=b'[["b",1,1]]',
            headers=[("cr.v", b"2"), ("cr.seq", b"x"), ("cr.n", b"1")],
            partition=0,
        )
        p.flush(10)
        p.close(10)
        op.reset(1, b"")
        with pytest.raises(ChangelogFormatError, match=rf"{op.store.changelog} partition 0 offset 2: header cr.seq"):
            op.process_batch(_orders(topic, 0, 1, ["a"]))
        # The same read in the background: the restore ends (the source resumes the partition)
        # and its first batch fails, so the region resets; a reset reads it again.
        op.reset(1, b"")
        op.store.restore_async([0])
        _restored(op)
        with pytest.raises(ChangelogFormatError, match=rf"{op.store.changelog} partition 0 offset 2: header cr.seq"):
            op.process_batch(_orders(topic, 0, 1, ["a"]))
        assert op.store.tables == {}
    finally:
        op.close()


def test_a_record_without_the_input_s_provenance_fails_naming_the_operator(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=1)
    op = _aggregate(bootstrap, topic, names.group(), "m0")
    try:
        with pytest.raises(ValueError, match=r"operator 'partitioned_aggregate'.*provenance"):
            op.process_batch([Record("another-topic", 0, 0, key="a", value=1)])
        with pytest.raises(ValueError, match="provenance"):
            op.process_batch([{"key": "a", "value": 1}])
    finally:
        op.close()


def test_a_state_of_none_deletes_the_key_in_memory_as_after_a_restore(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=1)
    group = names.group()

    def capped(state, record):  # the count starts again after 2
        return None if state + record.value > 2 else state + record.value

    first = PartitionedAggregate(lambda r: r.key, capped, 0, topic=topic, bootstrap=bootstrap, group=group, member="m0")
    first.reset_to_initial_state()
    out = first.process_batch(_orders(topic, 0, 0, ["a", "a", "a", "a"]))
    assert [r.value for r in out] == [1, 2, None, 1]
    first.checkpoint(1)
    first.notify_checkpoint_complete(1)
    first.process_batch(_orders(topic, 0, 4, ["a", "a"]))
    first.checkpoint(2)
    first.notify_checkpoint_complete(2)
    assert first.store.tables == {0: {}}
    second = PartitionedAggregate(
        lambda r: r.key, capped, 0, topic=topic, bootstrap=bootstrap, group=group, member="m1"
    )
    second.reset(2, b"")
    assert second.store.table(0) == first.store.tables[0]
    first.close()
    second.close()


def test_a_base_bounds_the_restore_and_its_pointer_is_where_the_next_restore_starts(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=1)
    group = names.group()
    first = _aggregate(bootstrap, topic, group, "m0", materialize_after=3)
    first.reset_to_initial_state()
    for seq, keys in enumerate([["a", "b"], ["a", "b"]], start=1):  # 4 changes > 3 > 2 keys: due
        first.process_batch(_orders(topic, 0, 2 * seq - 2, keys))
        first.checkpoint(seq)
        first.notify_checkpoint_complete(seq)
    assert first.store.bases_written == 0  # written at the partition's next record, not in the stop
    first.process_batch(_orders(topic, 0, 4, ["c"]))
    assert first.store.bases_written == 1
    first.checkpoint(3)
    first.notify_checkpoint_complete(3)

    second = _aggregate(bootstrap, topic, group, "m1", materialize_after=3)
    second.reset(3, b"")
    assert second.store.table(0) == {"a": 2, "b": 2, "c": 1}
    # from the pointer: the base (2 keys) and checkpoint 3's change, not the 4 changes before
    assert (second.store.restored_records, second.store.restored_changes) == (2, 3)

    # A base whose interval is never checkpointed is aborted and leaves the pointer alone.
    second.process_batch(_orders(topic, 0, 5, ["a", "b", "c", "d"]))  # 5 changes since the base > 4 keys
    second.checkpoint(4)
    second.notify_checkpoint_complete(4)
    second.process_batch(_orders(topic, 0, 9, ["a"]))
    assert second.store.bases_written == 1
    second.reset(4, b"")  # interval 5, its base with it, aborted
    third = _aggregate(bootstrap, topic, group, "m2")
    third.reset(4, b"")
    assert third.store.table(0) == {"a": 3, "b": 3, "c": 2, "d": 1}
    assert third.store.restored_changes == 2 + 1 + 4
    first.close()
    second.close()
    third.close()


def test_materialize_after_is_checked():
    with pytest.raises(ValueError, match="materialize_after must be an int >= 1, not 0"):
        _aggregate("127.0.0.1:9", "t", "g", "m0", materialize_after=0)


def test_a_pointer_that_names_no_base_makes_the_restore_read_from_the_start(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=1)
    group = names.group()
    first = _aggregate(bootstrap, topic, group, "m0")
    first.reset_to_initial_state()
    first.process_batch(_orders(topic, 0, 0, ["a", "b"]))
    first.checkpoint(1)
    first.notify_checkpoint_complete(1)
    first.process_batch(_orders(topic, 0, 2, ["a"]))
    first.checkpoint(2)
    first.notify_checkpoint_complete(2)
    settings = admin_settings(bootstrap, {}, request_timeout_ms=10_000, client_id="test-partitioned")
    commit_offsets(settings, first.store.changelog, first.store.changelog, {0: 2}, timeout_ms=10_000)  # checkpoint 2's
    second = _aggregate(bootstrap, topic, group, "m1")
    second.reset(2, b"")
    assert second.store.table(0) == {"a": 2, "b": 1}
    assert second.store.restored_changes == 3
    first.close()
    second.close()


def _restored(op: PartitionedAggregate) -> None:
    wait_until(lambda: not op.store.restoring(), 30, "the restores to finish")


def test_a_partition_handed_over_is_restored_in_the_background_before_its_first_record(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    group = names.group()
    first = _aggregate(bootstrap, topic, group, "m0")
    first.reset_to_initial_state()
    first.process_batch(_orders(topic, 0, 0, ["a", "b", "a"]) + _orders(topic, 1, 0, ["c"]))
    first.checkpoint(1)
    first.notify_checkpoint_complete(1)

    second = _aggregate(bootstrap, topic, group, "m1")
    second.reset(1, b"")
    second.store.restore_async([0, 1])
    _restored(second)
    assert second.store.tables == {}  # taken by each partition's first record, on the process thread
    assert (second.store.restored_records, second.store.restored_changes) == (0, 0)
    out = second.process_batch(_orders(topic, 0, 3, ["a"]) + _orders(topic, 1, 1, ["c"]))
    assert [(r.key, r.value) for r in out] == [("a", 3), ("c", 2)]
    assert (second.store.restored_records, second.store.restored_changes) == (2, 3)  # each read once
    second.store.restore_async([0])  # a partition in memory is not restored again
    assert not second.store.restoring()
    first.close()
    second.close()


def test_a_reset_and_a_revocation_drop_the_restores_started_before_them(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=1)
    group = names.group()
    first = _aggregate(bootstrap, topic, group, "m0")
    first.reset_to_initial_state()
    first.process_batch(_orders(topic, 0, 0, ["a"]))
    first.checkpoint(1)
    first.notify_checkpoint_complete(1)

    second = _aggregate(bootstrap, topic, group, "m1")
    second.reset(1, b"")
    second.store.restore_async([0])
    _restored(second)  # restored {"a": 1}, not taken yet
    second.reset(1, b"")  # drops it
    first.process_batch(_orders(topic, 0, 1, ["a"]))  # the partition's owner moves on meanwhile
    first.checkpoint(2)
    first.notify_checkpoint_complete(2)
    assert second.process_batch(_orders(topic, 0, 2, ["a"]))[0].value == 3  # read again: {"a": 2}

    third = _aggregate(bootstrap, topic, group, "m2")
    third.reset(2, b"")
    third.store.restore_async([0])
    _restored(third)
    third.store.forget([0])  # revoked before its first record
    first.process_batch(_orders(topic, 0, 2, ["a"]))
    first.checkpoint(3)
    first.notify_checkpoint_complete(3)
    assert third.process_batch(_orders(topic, 0, 3, ["a"]))[0].value == 4  # read again: {"a": 3}
    for op in (first, second, third):
        op.close()


def test_a_restore_held_by_an_open_transaction_ends_at_once_when_the_operator_closes(bootstrap, names):
    """A member stopped for good while one of its restores waits for a transaction to be decided
    (step 3 of table_restore.py, up to a minute): the close does not wait it out."""
    topic = create_topic(bootstrap, names.topic(), partitions=1)
    group = names.group()
    op = _aggregate(bootstrap, topic, group, "m0")
    op.reset_to_initial_state()
    op.process_batch(_orders(topic, 0, 0, ["a"]))
    op.checkpoint(1)  # prepared, never committed: the changelog's transaction stays open
    reader = _aggregate(bootstrap, topic, group, "m1")
    reader.store.restore_async([0])
    # A sleep, not a poll: nothing outside shows the restore's step. Its first read takes a few
    # milliseconds; after it the restore waits for the open transaction (up to a minute).
    time.sleep(0.5)
    assert reader.store.restoring() == {0}
    started = time.monotonic()
    reader.close()
    assert time.monotonic() - started < 5
    op.close()
