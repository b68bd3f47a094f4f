"""`KafkaLog`: the coordinator's durable log on a one-partition Kafka topic, a
`coordinator.store.durable_log.DurableLog`.

One Kafka record per record of the store, so one request's entries stay one
record, replayed all or nothing. Its value is the framed record of the file log
(`coordinator.store.log.frame`: length, CRC-32C, version byte, JSON payload), so
a record is checked end to end by our CRC as well as by Kafka's batch CRC, and a
foreign or damaged record is recognised.

Protocol (one owner thread, the server loop; docs/durable-state.md has the crash
analysis):

1. `open(on_record)`: create or check the topics (`topics.ensure_topics`); read the
   snapshot pointer (`reader.read_pointer`); if there is one, replay that snapshot
   (`snapshots.replay_snapshot`) and commit the pointer again (a real cluster
   expires the committed offsets of an idle group); then replay the log topic from
   the snapshot's offset X (or from 0) to the high watermark of a fetch response
   (`reader.read_partition`). Every record must be one framed record of this
   format version; anything else raises `LogError` naming the topic and offset,
   and the coordinator does not start (there is no torn tail on Kafka: a record
   is there whole or not at all, so any bad record is damage or a foreign
   writer). The producer is created last.
2. `append(payload)`: frame it into the buffer (no I/O); over `max_payload_bytes`
   it raises `RecordTooLarge` with nothing buffered.
3. `sync()` (the group commit): send every buffered record, flush within
   ``write_timeout_s``, and check each acknowledgement: acks=all, and the offsets
   must follow the last one this log wrote or read (a gap means another writer
   on the topic). Only after it returns does the server answer the requests
   behind those records. Any failure (timeout, error, gap) makes the log
   fail-stop (`LogFailed` now and for every later call): a record whose
   outcome is unknown may or may not be in the log, so the process exits and a
   restart replays what the topic holds. A record that was acknowledged but not
   answered is replayed like any other: every request is idempotent under the
   client's re-send with the same request id (put-if-absent, idempotent
   registration, whole documents).
4. `start_compaction`: sync, then one `snapshots.KafkaSnapshot` from the tables
   as of the log's end.
5. `close()`: sync (unless failed) and close the producer (bounded).

The state directory still holds the coordinator's lock; the log itself lives
only in Kafka (a coordinator on an empty directory restores everything).
"""

from __future__ import annotations

import logging

import attrs
from kafka import KafkaProducer
from kafka.producer.future import FutureRecordMetadata

from coordinator.store.durable_log import OnRecord
from coordinator.store.kafka.producer import log_producer
from coordinator.store.kafka.reader import commit_pointer, read_partition, read_pointer
from coordinator.store.kafka.settings import MAX_PAYLOAD_BYTES, KafkaLogSettings
from coordinator.store.kafka.snapshots import KafkaSnapshot, check_value, replay_snapshot
from coordinator.store.kafka.topics import ensure_topics
from coordinator.store.log.frame import LogError, RecordTooLarge, encode_record
from coordinator.store.log.segment import LogFailed, crash_point
from coordinator.store.snapshot import StoreSnapshot

log = logging.getLogger(__name__)

#: Test hooks of the write path (`crash_point`), in order.
KAFKA_CRASH_STEPS = (
    "kafka-acked",  # a group commit's records are acknowledged; no reply sent yet
    "snapshot-written",  # a snapshot's records are acknowledged; the pointer not yet committed
    "snapshot-committed",  # the pointer names the new snapshot
)


@attrs.frozen
class KafkaOpened:
    """What `KafkaLog.open` replayed (an `OpenedLog`)."""

    records: int
    bytes: int
    truncated_bytes: int
    snapshot_pointer: int | None  # offset of the snapshot's BEGIN on T.snapshots
    as_of: int  # log offset replay of the log topic started at
    end: int  # log offset after the last record replayed


class KafkaLog:
    """The Kafka log (see the module docstring); one owner thread."""

    max_payload_bytes = MAX_PAYLOAD_BYTES

    def __init__(self, settings: KafkaLogSettings) -> None:
        self.settings = settings
        self._producer: KafkaProducer | None = None
        self._buf: list[bytes] = []
        self._buf_bytes = 0
        self._next_offset = 0  # the offset the next record of this log gets
        self._base_bytes = 0  # framed bytes of the snapshot replay starts from
        self._written_bytes = 0  # framed bytes of the log topic from the snapshot's offset on
        self._snapshot_base = 0  # _written_bytes when the running snapshot started
        self._syncs = 0
        self.failed: BaseException | None = None

    @property
    def where(self) -> str:
        return self.settings.where

    @property
    def size(self) -> int:
        return self._base_bytes + self._written_bytes + self._buf_bytes

    @property
    def fsyncs(self) -> int:
        return self._syncs

    # ---- open ----------------------------------------------------------------------
    def open(self, on_record: OnRecord, *, truncate_corrupt: bool = False) -> KafkaOpened:
        """Step 1."""
        if truncate_corrupt:
            raise LogError("--truncate-corrupt cuts a damaged segment file; it does not apply to the Kafka log")
        if self._producer is not None:
            raise RuntimeError(f"{self.where} is already open")
        settings = self.settings
        ensure_topics(settings)
        pointer = read_pointer(settings)
        as_of = records = base = 0
        if pointer is not None:
            snapshot = replay_snapshot(settings, pointer, on_record)
            commit_pointer(settings, pointer)
            as_of, records, base = snapshot.as_of, snapshot.records, snapshot.bytes
        where = self.where
        written = 0

        def on_value(offset: int, value: bytes) -> bool:
            nonlocal records, written
            payload = check_value(where, offset, value)
            try:
                on_record(offset, payload)
            except ValueError as exc:
                raise LogError(
                    f"{where} offset {offset}: undecodable record ({exc}); nothing was applied from it"
                ) from exc
            records += 1
            written += len(value)
            return False

        end = read_partition(settings, settings.topic, as_of, on_value)
        self._next_offset, self._base_bytes, self._written_bytes = end, base, written
        self._producer = log_producer(settings, timeout_s=settings.write_timeout_s)
        return KafkaOpened(records, base + written, 0, pointer, as_of, end)

    # ---- writing -------------------------------------------------------------------
    def append(self, payload: bytes) -> int:
        """Step 2; returns the record's index in the buffer."""
        self._check_open()
        if len(payload) > MAX_PAYLOAD_BYTES:
            raise RecordTooLarge(
                f"log record of {len(payload)} payload bytes exceeds the Kafka log's {MAX_PAYLOAD_BYTES}-byte "
                "limit; nothing was written"
            )
        value = encode_record(payload)
        self._buf.append(value)
        self._buf_bytes += len(value)
        return len(self._buf) - 1

    def sync(self) -> None:
        """Step 3: the group commit."""
        producer = self._check_open()
        if not self._buf:
            return
        values, self._buf = self._buf, []
        size, self._buf_bytes = self._buf_bytes, 0
        topic = self.settings.topic
        try:
            futures: list[FutureRecordMetadata] = [producer.send(topic, value=v, partition=0) for v in values]
            producer.flush(timeout=self.settings.write_timeout_s)
            for i, future in enumerate(futures):
                offset = future.get(timeout=0).offset
                if offset != self._next_offset + i:
                    raise LogError(
                        f"record acknowledged at offset {offset}, expected {self._next_offset + i}: another "
                        f"writer appends to {self.where}"
                    )
        except Exception as exc:  # noqa: BLE001 - every failure of a group commit is fatal (fail-stop)
            self._fail(exc)
        self._next_offset += len(values)
        self._written_bytes += size
        self._syncs += 1
        crash_point("kafka-acked")

    def _fail(self, exc: BaseException) -> None:
        self.failed = exc
        log.critical(
            "writing to %s failed (%s): the log accepts no more writes; restart the coordinator "
            "(replay reads what the topic holds)",
            self.where,
            exc,
        )
        raise LogFailed(f"writing to {self.where} failed: {exc}; restart the coordinator") from exc

    def _check_open(self) -> KafkaProducer:
        if self._producer is None:
            raise RuntimeError(f"{self.where} is not open")
        if self.failed is not None:
            raise LogFailed(f"an earlier write to {self.where} failed ({self.failed}); restart the coordinator")
        return self._producer

    # ---- snapshots -----------------------------------------------------------------
    def start_compaction(self, snapshot: StoreSnapshot, batch_entries: int) -> KafkaSnapshot:
        """Step 4."""
        self.sync()
        self._snapshot_base = self._written_bytes
        job = KafkaSnapshot(self.settings, snapshot, self._next_offset, batch_entries, self._snapshot_done)
        job.start()
        return job

    def _snapshot_done(self, snapshot_bytes: int) -> None:
        """Replay now starts at the snapshot: count the log's size from there."""
        self._base_bytes = snapshot_bytes
        self._written_bytes -= self._snapshot_base

    # ---- close ---------------------------------------------------------------------
    def close(self) -> None:
        """Step 5."""
        producer, self._producer = self._producer, None
        if producer is None:
            return
        try:
            if self.failed is None:
                self._producer = producer
                try:
                    self.sync()
                finally:
                    self._producer = None
        finally:
            producer.close(timeout=self.settings.write_timeout_s)
