"""`KafkaLog`: the coordinator's durable log on a one-partition Kafka topic, a
`coordinator.store.durable_log.DurableLog`.

One Kafka record per record of the store, so one request's entries stay one
record, replayed all or nothing. Its value is the framed record of the file log
(`coordinator.store.log.frame`: length, CRC-32C, version byte, JSON payload), so
a record is checked end to end by our CRC as well as by Kafka's batch CRC, and a
foreign or damaged record is recognised.

Protocol (one owner thread, the server loop; docs/durable-state.md has the crash
analysis and the takeover):

1. `open(on_record)`: create or check the topics (`topics.ensure_topics`); read the
   snapshot pointer (`reader.read_pointer`); if there is one, replay that snapshot
   (`snapshots.replay_snapshot`) and, unless a standby, commit the pointer again (a
   real cluster expires the committed offsets of an idle group). A standby
   (``standby=True``) then follows the log topic from the snapshot's offset X (or
   0), applying each committed record as it comes, until the leader has not written
   for the lease (`tail.LogTail.follow`); meanwhile `leader()` is the leader its
   lease records name (`lease.decode_lease`). Then the writer fences the log's
   transactional id (`producer.LogWriter.fence`: a deposed leader can commit nothing
   more, its open transaction is aborted; the new producer epoch is this process's
   leader epoch, and `leader()` this process), and only then is the log topic read to
   its end (`tail.LogTail.read_to_end`): committed transactions only, so the records
   of a fenced leader's aborted or open transaction are never applied. Last, one
   transaction with a lease record naming this process's advertised endpoint and
   epoch (`lease`, step 1), before anything is served. Every record
   must be one framed record of this format version; anything else raises
   `LogError` naming the topic and offset, and the coordinator does not start (a
   record is in Kafka whole or not at all, so a bad one is damage or a foreign
   writer).
2. `append(payload)`: frame it into the buffer (no I/O); over `max_payload_bytes`
   it raises `RecordTooLarge` with nothing buffered.
3. `sync()` (the group commit): one transaction holds every buffered record
   (`producer.LogWriter.write`: begin, send, flush, commit, within
   ``write_timeout_s``), and the offsets must follow the log's end as this log knows
   it (a gap means a writer outside the transactional id). Only after it returns
   does the server answer the requests behind those records. Any failure (fenced by
   a newer leader, timeout, error, gap) makes the log fail-stop (`LogFailed` now and
   for every later call): the server answers no more requests and the process exits.
   A record whose outcome is unknown may or may not be committed; a restart or a
   standby replays what the topic committed. A record committed but not answered is
   replayed like any other: every request is idempotent under the client's re-send
   with the same request id (put-if-absent, idempotent registration, whole
   documents).
4. `keepalive()` (every loop iteration): after ``lease_s / 3`` without a write, one
   transaction with a lease record (`tail.LEASE_KEY`: the process's pid, host,
   advertised endpoint and epoch), so standbys see the leader alive, and a deposed
   leader learns within that time that it is fenced (the write fails: fail-stop as
   in step 3). A group commit adds a lease record to its transaction when none was
   written for ``lease_s / 3``, so a busy leader names itself as often.
5. `start_compaction`: sync, then one `snapshots.KafkaSnapshot` from the tables
   as of the log's end.
6. `close()`: sync (unless failed) and close the writer (bounded).

The state directory still holds the coordinator's lock; the log itself lives
only in Kafka (a coordinator on an empty directory restores everything).
"""

from __future__ import annotations

import logging
import threading
import time

import attrs

from coordinator.protocol.wire.status import LeaderInfo
from coordinator.store.durable_log import OnRecord
from coordinator.store.kafka.lease import decode_lease, encode_lease
from coordinator.store.kafka.producer import LogWriter, Record
from coordinator.store.kafka.reader import commit_pointer, read_pointer
from coordinator.store.kafka.settings import MAX_PAYLOAD_BYTES, KafkaLogSettings
from coordinator.store.kafka.snapshots import KafkaSnapshot, check_value, replay_snapshot
from coordinator.store.kafka.tail import LEASE_KEY, LogTail
from coordinator.store.kafka.topics import ensure_topics
from coordinator.store.log.frame import LogError, RecordTooLarge, encode_record
from coordinator.store.log.segment import LogFailed, crash_point
from coordinator.store.snapshot import StoreSnapshot

log = logging.getLogger(__name__)

#: Test hooks of the write path (`crash_point`), in order.
KAFKA_CRASH_STEPS = (
    "kafka-sent",  # a group commit's records are acknowledged; its transaction not committed yet
    "kafka-acked",  # a group commit's transaction is committed; no reply sent yet
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

    def __init__(self, settings: KafkaLogSettings, *, standby: bool = False) -> None:
        self.settings = settings
        self.standby = standby
        #: Set (any thread) to stop a standby that has not taken over (`tail.StandbyStopped`).
        self.stop_standby = threading.Event()
        self._producer: LogWriter | None = None
        self._last_write = 0.0  # monotonic time of the last committed write (step 4)
        self._last_lease = 0.0  # monotonic time of the last committed lease record (step 4)
        # Leadership (`coordinator.server.api.Leadership`): written by the owner (load) thread,
        # read by any; each a single reference, replaced whole.
        self._advertised: str | None = None
        self._epoch: int | None = None  # this process's epoch once fenced
        self._own: LeaderInfo | None = None  # this process as the leader, once fenced
        self._following = False
        self._followed: LeaderInfo | None = None  # the leader the standby's lease records name
        self._unusable_lease: bytes | None = None  # the last lease record that named no leader (logged once)
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

    # ---- leadership ----------------------------------------------------------------
    def advertise(self, endpoint: str) -> None:
        """The endpoint this process's lease records name (the server's, before `open`)."""
        self._advertised = endpoint

    def leader(self) -> LeaderInfo | None:
        """This process once fenced; while a standby follows, the leader its lease records
        name (None before the first)."""
        own = self._own
        if own is not None:
            return own
        return self._followed if self._following else None

    def following(self) -> bool:
        return self._following

    def _on_lease(self, value: bytes) -> None:
        if not self._following:
            return
        info = decode_lease(value)
        if info is None:
            if value != self._unusable_lease:  # once per leader: its records repeat every lease/3
                log.warning("%s: a lease record names no usable leader: %r", self.where, value[:200])
            self._unusable_lease = value
        elif info != self._followed:
            log.info("%s: the leader is %s (epoch %d)", self.where, info.endpoint, info.epoch)
            self._followed = info

    def _lease_record(self) -> Record:
        epoch = self._epoch if self._epoch is not None else 0
        return (LEASE_KEY, encode_lease(self._advertised, epoch, self.settings.topic))

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
            if not self.standby:
                commit_pointer(settings, pointer)
            as_of, records, base = snapshot.as_of, snapshot.records, snapshot.bytes
        where = self.where
        written = 0

        def on_value(offset: int, value: bytes) -> None:
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

        tail = LogTail(settings, as_of, on_value, self._on_lease)
        if self.standby:
            log.info("standby: following %s from offset %d", where, as_of)
            self._following = True
            try:
                tail.follow(settings.lease_s, self.stop_standby)
            finally:
                self._following = False
                self._followed = None
        writer = LogWriter(settings)
        try:
            writer.fence()
            self._epoch = writer.epoch
            self._own = LeaderInfo(self._advertised, self._epoch)
            end = tail.read_to_end()
        except BaseException:
            writer.close(settings.call_timeout_s)
            raise
        log.info("%s: fenced earlier writers (epoch %d); replayed to offset %d", where, self._epoch, end)
        self._next_offset, self._base_bytes, self._written_bytes = end, base, written
        self._producer = writer
        self._write(writer, [self._lease_record()])  # step 1: the first write names the new leader
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
        records: list[Record] = [(None, v) for v in values]
        if time.monotonic() - self._last_lease >= self.settings.lease_interval_s:
            records.append(self._lease_record())  # step 4: a busy leader names itself too
        self._write(producer, records, group_commit=True)
        self._written_bytes += size
        self._syncs += 1
        crash_point("kafka-acked")

    def keepalive(self) -> None:
        """Step 4."""
        producer = self._check_open()
        if time.monotonic() - self._last_write < self.settings.lease_interval_s:
            return
        self._write(producer, [self._lease_record()])

    def _write(self, producer: LogWriter, records: list[Record], *, group_commit: bool = False) -> None:
        """One transaction (step 3's write and check); fail-stop on any failure. Only a
        group commit's transaction passes the ``kafka-sent`` crash point, not a lone lease
        record's (step 4, and the first write of step 1)."""
        try:
            if group_commit:
                offsets = producer.write(records, self.settings.write_timeout_s, on_sent=self._sent)
            else:
                offsets = producer.write(records, self.settings.write_timeout_s)
            expected = list(range(self._next_offset, self._next_offset + len(records)))
            if offsets != expected:
                raise LogError(
                    f"records committed at offsets {offsets[0]}..{offsets[-1]}, expected {expected[0]}..: "
                    f"another writer appends to {self.where}"
                )
        except Exception as exc:  # noqa: BLE001 - every failure of a group commit is fatal (fail-stop)
            self._fail(exc)
        self._next_offset = offsets[-1] + 2  # the transaction's COMMIT marker takes the next offset
        self._last_write = time.monotonic()
        if records[-1][0] == LEASE_KEY:
            self._last_lease = self._last_write

    @staticmethod
    def _sent() -> None:
        crash_point("kafka-sent")

    def _fail(self, exc: BaseException) -> None:
        self.failed = exc
        log.critical(
            "writing to %s failed (%s): the log accepts no more writes; restart the coordinator "
            "(replay reads what the topic holds)",
            self.where,
            exc,
        )
        raise LogFailed(f"writing to {self.where} failed: {exc}; restart the coordinator") from exc

    def _check_open(self) -> LogWriter:
        if self._producer is None:
            raise RuntimeError(f"{self.where} is not open")
        if self.failed is not None:
            raise LogFailed(f"an earlier write to {self.where} failed ({self.failed}); restart the coordinator")
        return self._producer

    # ---- snapshots -----------------------------------------------------------------
    def start_compaction(self, snapshot: StoreSnapshot, batch_entries: int) -> KafkaSnapshot:
        """Step 5."""
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
        """Step 6."""
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
            producer.close(self.settings.write_timeout_s)
