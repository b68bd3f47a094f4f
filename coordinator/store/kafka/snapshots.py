"""Snapshots of the Kafka log: the tables as of a log offset, on the snapshot topic.

A snapshot replaces the file log's compaction (the log topic is never rewritten,
compacted or cut: replay simply starts later). Layout on ``T.snapshots``::

    BEGIN {"snapshot": "begin", "as_of": X}      X: the log offset the state stands at
    record, record, ...                          the tables (coordinator.store.snapshot)
    END   {"snapshot": "end", "as_of": X, "records": N}

Each is one Kafka record whose value is a framed record
(`coordinator.store.log.frame`: length, CRC32C, version, payload), like the log's.

Writing one (`KafkaSnapshot`, started by `KafkaLog.start_compaction`):

1. (owner) The log's buffer is synced first, so the tables hold exactly the records
   before log offset X; the tables are copied (`coordinator.store.snapshot`).
2. (snapshot thread) BEGIN is produced and acknowledged: its offset P is where the
   snapshot starts. The records of the tables follow, then END; all are
   acknowledged within ``call_timeout_s`` (a flush bound) or the snapshot fails.
3. (snapshot thread) P is committed as the snapshot pointer (group ``T.snapshot``,
   `coordinator.store.kafka.reader.commit_pointer`). This is the commit point: a
   crash or failure before it leaves the previous pointer in force, and the
   records written so far are never read (replay reads from a pointer to its END).
4. (owner, `finish`) The log counts its size from the snapshot on, which is what
   the store's compaction rule (`coordinator.store.maintenance`) weighs next time.

Replay (`replay_snapshot`): read ``T.snapshots`` from the pointer P. The record at P
must be a BEGIN; every record up to the END goes to the store's ``on_record``; the
END must name the same X and the count of records between. A missing END before the
high watermark, or any other mismatch, raises `LogError`: the pointer names only
snapshots whose END was acknowledged, so this is damage, not a crash.

A failure in steps 2-3 is logged and retried by the store's maintenance with a
backoff; the log itself is unaffected.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable

import attrs
from kafka import KafkaProducer
from kafka.producer.future import FutureRecordMetadata

from coordinator.store import records
from coordinator.store.compaction import JOIN_TIMEOUT_S, YIELD_EVERY_S, CompactionCancelled
from coordinator.store.durable_log import OnRecord
from coordinator.store.kafka.producer import log_producer
from coordinator.store.kafka.reader import commit_pointer, read_partition
from coordinator.store.kafka.settings import KafkaLogSettings
from coordinator.store.log.frame import FORMAT_VERSION, LogError, encode_record, unframe
from coordinator.store.log.segment import crash_point
from coordinator.store.snapshot import StoreSnapshot, write_snapshot

log = logging.getLogger(__name__)

_MARK_PREFIX = b'{"snapshot":'
BEGIN = "begin"
END = "end"


@attrs.frozen
class Mark:
    kind: str
    as_of: int
    records: int


def encode_mark(kind: str, as_of: int, count: int = 0) -> bytes:
    body: dict[str, object] = {"snapshot": kind, "as_of": as_of}
    if kind == END:
        body["records"] = count
    return json.dumps(body, separators=(",", ":")).encode()


def decode_mark(payload: memoryview) -> Mark | None:
    """The mark a payload holds, None for a record of the tables; ValueError if malformed."""
    if bytes(payload[: len(_MARK_PREFIX)]) != _MARK_PREFIX:
        return None
    try:
        body = json.loads(bytes(payload))
    except ValueError as exc:
        raise ValueError(f"snapshot mark is not JSON: {exc}") from exc
    kind, as_of, count = body.get("snapshot"), body.get("as_of"), body.get("records", 0)
    if (
        kind not in (BEGIN, END)
        or type(as_of) is not int
        or as_of < 0
        or type(count) is not int
        or count < 0
        or (kind == END) != ("records" in body)
    ):
        raise ValueError(f"malformed snapshot mark {bytes(payload)[:120]!r}")
    return Mark(kind, as_of, count)


def check_value(where: str, offset: int, value: bytes) -> memoryview:
    """The payload of one Kafka record of the log or snapshot topic; LogError naming
    the place when it is not one framed record of this format version."""
    try:
        version, payload = unframe(value)
    except ValueError as exc:
        raise LogError(f"{where} offset {offset}: not a log record ({exc}); nothing was applied from it") from exc
    if version > FORMAT_VERSION:
        raise LogError(
            f"{where} offset {offset}: format version {version}, this coordinator reads version "
            f"{FORMAT_VERSION}; upgrade the coordinator"
        )
    if version != FORMAT_VERSION:
        raise LogError(
            f"{where} offset {offset}: format version {version} (this coordinator reads version "
            f"{FORMAT_VERSION}); nothing was applied from it"
        )
    return payload


@attrs.define
class SnapshotReplay:
    as_of: int
    records: int
    bytes: int


def replay_snapshot(settings: KafkaLogSettings, pointer: int, on_record: OnRecord) -> SnapshotReplay:
    """Replay the snapshot that begins at `pointer` (see the module docstring)."""
    where = f"kafka://{settings.bootstrap}/{settings.snapshot_topic}"
    begin: Mark | None = None
    end: Mark | None = None
    count = size = 0

    def on_value(offset: int, value: bytes) -> bool:
        nonlocal begin, end, count, size
        payload = check_value(where, offset, value)
        try:
            mark = decode_mark(payload)
        except ValueError as exc:
            raise LogError(f"{where} offset {offset}: {exc}") from exc
        size += len(value)
        if begin is None:
            if mark is None or mark.kind != BEGIN:
                raise LogError(f"{where} offset {offset}: the snapshot pointer does not name a snapshot's start")
            begin = mark
            return False
        if mark is None:
            try:
                on_record(offset, payload)
            except ValueError as exc:
                raise LogError(f"{where} offset {offset}: undecodable snapshot record ({exc})") from exc
            count += 1
            return False
        if mark.kind != END or mark.as_of != begin.as_of or mark.records != count:
            raise LogError(f"{where} offset {offset}: {mark} does not close the snapshot begun at {pointer}")
        end = mark
        return True

    read_partition(settings, settings.snapshot_topic, pointer, on_value)
    if begin is None or end is None:
        raise LogError(
            f"{where}: the snapshot at offset {pointer} ends before its END mark; the pointer names only "
            "complete snapshots, so records are missing"
        )
    return SnapshotReplay(begin.as_of, count, size)


class KafkaSnapshot:
    """One snapshot (steps 2-3 on its own thread, step 4 in `finish`); a `CompactionJob`."""

    def __init__(
        self,
        settings: KafkaLogSettings,
        snap: StoreSnapshot,
        as_of: int,
        batch_entries: int,
        on_finish: Callable[[int], None],
    ) -> None:
        self._settings = settings
        self._snap: StoreSnapshot | None = snap
        self.as_of = as_of
        self._batch_entries = batch_entries
        self._on_finish = on_finish
        self.entries_written = 0
        self.records_written = 0
        self.largest_record = 0
        self.bytes_written = 0
        self.pointer: int | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self._cancel = threading.Event()
        self.started = time.perf_counter()
        self._last_yield = self.started
        self._thread = threading.Thread(target=self._run, name="state-snapshot", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        producer: KafkaProducer | None = None
        try:
            snap = self._snap
            assert snap is not None
            settings = self._settings
            producer = log_producer(settings, timeout_s=settings.call_timeout_s)
            futures: list[FutureRecordMetadata] = []

            def send(payload: bytes) -> None:
                value = encode_record(payload)
                futures.append(producer.send(settings.snapshot_topic, value=value, partition=0))
                self.bytes_written += len(value)

            send(encode_mark(BEGIN, self.as_of))
            producer.flush(timeout=settings.call_timeout_s)
            pointer = futures[0].get(timeout=0).offset

            def emit(payload: bytes, _entries: list[records.Entry], count: int) -> None:
                send(payload)
                self.entries_written += count
                self.records_written += 1
                self._between()

            self.largest_record = write_snapshot(snap, self._batch_entries, emit, self._between)
            send(encode_mark(END, self.as_of, self.records_written))
            producer.flush(timeout=settings.call_timeout_s)
            for future in futures:
                future.get(timeout=0)  # raises the delivery's error
            crash_point("snapshot-written")
            commit_pointer(settings, pointer)
            self.pointer = pointer
            crash_point("snapshot-committed")
        except BaseException as exc:  # reported to the owner through self.error
            self.error = exc
            if not isinstance(exc, CompactionCancelled):
                log.exception("snapshot of the state as of log offset %d failed", self.as_of)
        finally:
            self._snap = None  # free the snapshot
            if producer is not None:
                producer.close(timeout=JOIN_TIMEOUT_S)
            self.done.set()

    def _between(self) -> None:
        """Between records: stop if cancelled; yield the GIL to the owner thread at most
        every YIELD_EVERY_S (the same reason as the file log's compaction)."""
        if self._cancel.is_set():
            raise CompactionCancelled()
        now = time.perf_counter()
        if now - self._last_yield >= YIELD_EVERY_S:
            time.sleep(0)
            self._last_yield = time.perf_counter()

    def finish(self) -> None:
        """Step 4 (owner thread, after `done` with `error` None)."""
        assert self.done.is_set()
        assert self.error is None
        assert self.pointer is not None
        self._on_finish(self.bytes_written)

    def cancel(self) -> None:
        self._cancel.set()
        self._thread.join(JOIN_TIMEOUT_S)
        if self._thread.is_alive():
            log.error("snapshot thread did not stop within %.0f s; leaving it (daemon)", JOIN_TIMEOUT_S)
