"""The changelog writer, topic and restore against the real broker (``cr_consumer/state``).

Three checkpoints' changes go to two partitions (deletes included), the second one failed and
its seq aborted, then a zombie writes that seq again; the flushes' end offsets are compared with
the partition's stored batches, and each partition is restored at each checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from coordinator.kafka.raw_batches import PartitionReader
from coordinator.kafka.raw_requests import RawClient
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.kafka.kafka_python.changelog import ChangelogWriter, ensure_changelog
from cr_consumer.state.changelog import (
    ChangelogFormatError,
    ChangelogRecord,
    JsonKey,
    JsonValue,
    changelog_topic,
)
from cr_consumer.state.restore import RestoreError, read_changelog, restore_partition
from cr_consumer.testing.kafka_util import create_topic, producer, unique_name

pytestmark = pytest.mark.timeout(120)

DEADLINE_S = 30.0
FLUSH_TIMEOUT_S = 30.0


@pytest.fixture
def settings(bootstrap: str) -> dict[str, object]:
    return admin_settings(bootstrap, {}, request_timeout_ms=10_000, client_id="test-changelog")


@pytest.fixture
def topic(bootstrap: str) -> str:
    name = changelog_topic(unique_name("g"), "agg", "input")
    made = ensure_changelog(bootstrap, name, 2)
    assert made.created
    assert made.partitions == 2
    assert made.replication_factor is not None
    assert 1 <= made.replication_factor <= 3
    assert made.min_insync_replicas == min(2, made.replication_factor)
    return name


@pytest.fixture
def writer(bootstrap: str, topic: str) -> Iterator[ChangelogWriter]:
    w = ChangelogWriter(bootstrap, topic, {"linger_ms": 2})
    yield w
    w.close(10.0)


def high_watermark(settings: dict[str, object], topic: str, partition: int) -> int:
    """Where the stored batches end (a fetch's high watermark, never ListOffsets)."""
    with RawClient(settings, time.monotonic() + DEADLINE_S) as client:
        reader = PartitionReader(client, topic, partition)
        last = max((b.last_offset for b in reader.batches(0, None)), default=-1)
        assert reader.stop == last + 1
        return last + 1


def test_three_checkpoints_restore_exactly(
    bootstrap: str, settings: dict[str, object], topic: str, writer: ChangelogWriter
) -> None:
    # seq 1 completes: partition 0 read offsets 0..1, partition 1 offsets 0..5
    writer.write(1, 0, {"a": 1, "b": 2}, {"a": 0, "b": 1})
    writer.write(1, 1, {("k", 1): "x"}, {("k", 1): 5})
    assert writer.flush(FLUSH_TIMEOUT_S) == {0: 2, 1: 1}
    # seq 2 fails after its flush (no ack); the region aborts it and replays from offset 2
    writer.write(2, 0, {"a": 100, "c": 3}, {"a": 2, "c": 3})
    assert writer.flush(FLUSH_TIMEOUT_S) == {0: 4}
    # seq 3 completes: partition 0 read offsets 2..3, partition 1 offsets 6..7
    writer.write(3, 0, {"a": 10, "b": None}, {"a": 2, "b": 3})
    writer.write(3, 1, {("k", 1): None, "z": [1, {"n": 2}]}, {("k", 1): 6, "z": 7})
    assert writer.pending == 4
    assert writer.flush(FLUSH_TIMEOUT_S) == {0: 6, 1: 3}
    assert writer.pending == 0
    # a zombie still holding seq 2 writes after seq 3
    writer.write(2, 0, {"b": 999}, {"b": 1000})
    assert writer.flush(FLUSH_TIMEOUT_S) == {0: 7}
    assert writer.flush(FLUSH_TIMEOUT_S) == {}

    assert high_watermark(settings, topic, 0) == 7
    assert high_watermark(settings, topic, 1) == 3
    assert list(read_changelog(settings, topic, 1, 0, 3, DEADLINE_S)) == [
        (0, ChangelogRecord(("k", 1), "x", 1, 5)),
        (1, ChangelogRecord(("k", 1), None, 3, 6)),
        (2, ChangelogRecord("z", [1, {"n": 2}], 3, 7)),
    ]
    assert [o for o, _ in read_changelog(settings, topic, 0, 3, 6, DEADLINE_S)] == [3, 4, 5]

    def restore(partition: int, end: int, upto: int, aborted: set[int], source: int) -> dict[JsonKey, JsonValue]:
        return restore_partition(settings, topic, partition, 0, end, upto, aborted, source, DEADLINE_S)

    assert restore(0, 0, 0, set(), 0) == {}
    assert restore(0, 2, 1, set(), 2) == {"a": 1, "b": 2}
    assert restore(0, 7, 1, {2}, 2) == {"a": 1, "b": 2}  # read past the checkpoint's end
    assert restore(0, 6, 3, {2}, 4) == {"a": 10}
    assert restore(0, 7, 3, {2}, 4) == {"a": 10}  # the zombie's write changes nothing
    assert restore(1, 1, 1, set(), 6) == {("k", 1): "x"}
    assert restore(1, 3, 3, {2}, 8) == {"z": [1, {"n": 2}]}
    # the aborted seq forgotten: the zombie's source offset gives the bug away
    with pytest.raises(RestoreError, match=rf"{topic} partition 0 offset 6: key 'b' of seq 2 .* offset 1000"):
        restore(0, 7, 3, set(), 4)
    # a checkpoint end past what is stored: the read fails instead of returning a short table
    with pytest.raises(RuntimeError, match="returned no batch below 9"):
        restore(1, 9, 3, {2}, 8)


def test_a_malformed_record_fails_the_restore_naming_it(
    bootstrap: str, settings: dict[str, object], topic: str, writer: ChangelogWriter
) -> None:
    writer.write(1, 1, {"a": 1}, {"a": 0})
    assert writer.flush(FLUSH_TIMEOUT_S) == {1: 1}
    p = producer(bootstrap)
    try:
        future = p.send(
            topic, key=b'"a"', value=b"2", partition=1, headers=[("cr.v", b"1"), ("cr.seq", b"x"), ("cr.src", b"1")]
        )
        offset = future.get(timeout=FLUSH_TIMEOUT_S).offset
    finally:
        p.close(timeout=10)
    assert offset == 1
    with pytest.raises(ChangelogFormatError, match=rf"{topic} partition 1 offset 1: header cr.seq is b'x'"):
        restore_partition(settings, topic, 1, 0, 2, 1, (), 5, DEADLINE_S)
    assert restore_partition(settings, topic, 1, 0, 1, 1, (), 5, DEADLINE_S) == {"a": 1}


def test_ensure_changelog_keeps_an_existing_topic_and_refuses_another_partition_count(bootstrap: str) -> None:
    name = create_topic(bootstrap, changelog_topic(unique_name("g"), "agg", "input"), partitions=3)
    found = ensure_changelog(bootstrap, name, 3)
    assert (found.created, found.partitions, found.replication_factor) == (False, 3, None)
    with pytest.raises(ValueError, match=rf"changelog {name} has 3 partitions, but its input has 2"):
        ensure_changelog(bootstrap, name, 2)
