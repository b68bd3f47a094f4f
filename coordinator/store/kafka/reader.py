"""Reading the snapshot topic's partition, and the snapshot pointer (the log topic is
read by ``tail``, which honours its transactions).

`read_partition(settings, topic, start, on_value)`:

1. A consumer without a group is assigned the topic's partition 0 and seeks to
   `start`; ``auto_offset_reset`` is "none", so an offset the broker no longer has
   (records deleted under the log) raises instead of silently skipping them.
2. It polls; every record goes to ``on_value(offset, value)`` in order. Offsets
   must follow each other (``start``, ``start + 1``, ...): a gap means records are
   missing (compaction or deletion by someone else), and raises `LogError`.
   ``on_value`` returns True to stop early (a snapshot's end mark).
3. It stops when its position reaches the high watermark of the latest fetch
   response (``consumer.highwater``), not the answer of ListOffsets: a broker may
   answer ListOffsets with the base offset of the last batch (see
   docs/durable-state.md). A snapshot's records are all written before its
   pointer is committed, so the watermark is past its END.
4. A poll loop that neither gets a record nor reaches the watermark for
   ``call_timeout_s`` raises `LogError` (an unreachable broker fails start-up).

The pointer (`read_pointer`, `commit_pointer`) is the committed offset of the
group ``T.snapshot`` on the snapshot topic's partition; both calls are bounded by
``call_timeout_s``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from coordinator.store.kafka.settings import MAX_RECORD_VALUE_BYTES, KafkaLogSettings
from coordinator.store.log.frame import LogError

#: One poll's wait when nothing arrives: the loop re-checks the watermark and the
#: stall bound this often.
POLL_MS = 50
#: Fetch bytes per partition: a few records of the largest size per fetch, so a
#: replay is not one round trip per record.
FETCH_PARTITION_BYTES = 4 * MAX_RECORD_VALUE_BYTES

#: ``on_value(offset, value)``: handle one record; True stops the read after it.
OnValue = Callable[[int, bytes], bool]


def _consumer(settings: KafkaLogSettings, group: str | None) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=settings.bootstrap.split(","),
        client_id="cr-coordinator-log",
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="none",
        fetch_max_wait_ms=10,
        max_partition_fetch_bytes=FETCH_PARTITION_BYTES,
        fetch_max_bytes=FETCH_PARTITION_BYTES,
        request_timeout_ms=settings.call_timeout_ms,
        bootstrap_timeout_ms=settings.call_timeout_ms,
        check_crcs=True,
    )


def read_partition(settings: KafkaLogSettings, topic: str, start: int, on_value: OnValue) -> int:
    """Steps 1-4; returns the offset after the last record handed to `on_value`."""
    consumer = _consumer(settings, None)
    tp = TopicPartition(topic, 0)
    where = f"kafka://{settings.bootstrap}/{topic}"
    try:
        consumer.assign([tp])
        consumer.seek(tp, start)
        expected = start
        last_progress = time.monotonic()
        while True:
            batches = consumer.poll(timeout_ms=POLL_MS)
            for record in batches.get(tp, ()):
                if record.offset != expected:
                    raise LogError(
                        f"{where}: records {expected}..{record.offset - 1} are missing (deleted or compacted "
                        "under the log?); the state cannot be replayed exactly, nothing was applied past them"
                    )
                expected = int(record.offset) + 1
                last_progress = time.monotonic()
                if on_value(record.offset, record.value or b""):
                    return expected
            highwater = consumer.highwater(tp)
            if highwater is not None and expected >= highwater:
                return expected
            if time.monotonic() - last_progress > settings.call_timeout_s:
                raise LogError(
                    f"{where}: replay made no progress for {settings.call_timeout_s:g} s at offset {expected} "
                    f"(high watermark {highwater}); is the cluster reachable?"
                )
    finally:
        consumer.close(autocommit=False)


def read_pointer(settings: KafkaLogSettings) -> int | None:
    """The snapshot pointer, or None when no snapshot was completed (or it expired)."""
    consumer = _consumer(settings, settings.pointer_group)
    try:
        tp = TopicPartition(settings.snapshot_topic, 0)
        consumer.assign([tp])
        offset: int | None = consumer.committed(tp, timeout_ms=settings.call_timeout_ms)
        return offset
    finally:
        consumer.close(autocommit=False)


def commit_pointer(settings: KafkaLogSettings, offset: int) -> None:
    """Make `offset` the snapshot pointer (the commit point of a snapshot)."""
    consumer = _consumer(settings, settings.pointer_group)
    try:
        tp = TopicPartition(settings.snapshot_topic, 0)
        consumer.assign([tp])
        consumer.commit({tp: OffsetAndMetadata(offset, "", -1)}, timeout_ms=settings.call_timeout_ms)
    finally:
        consumer.close(autocommit=False)
