"""The seam between the state store and its durable log: `DurableLog`.

Two logs implement it: the file log (`coordinator.store.file_log.FileLog`, a segment
file in the state directory, the default) and the Kafka log
(`coordinator.store.kafka.kafka_log.KafkaLog`, a one-partition topic). The store
(`coordinator.store.state_store.StateStore`) and its parts (`replay`, `writer`,
`maintenance`) see only this Protocol. Every record is one payload of
`coordinator.store.records`; the log frames, stores and replays it.

Protocol (one owner thread calls every method; the compaction job's own thread
touches only what the job owns):

1. `open(on_record, truncate_corrupt=...)` once: hands every record of the log, in
   order, to ``on_record(position, payload)`` (a snapshot's records first, when the
   log has one), and returns what it replayed (`OpenedLog`). A log it cannot
   replay exactly raises a `coordinator.store.log.frame.LogError` naming the place,
   and changes nothing.
2. `append(payload)` buffers one record: no I/O. Over `max_payload_bytes` it raises
   `RecordTooLarge` (a ValueError) and buffers nothing.
3. `sync()` makes every buffered record durable (the group commit); the server
   answers the requests behind them only after it returned. A failure raises
   `coordinator.store.log.segment.LogFailed`, and so does every later call: the log
   is fail-stop, and the process must restart from what the log holds.
4. `start_compaction(snapshot, batch_entries)` starts a `CompactionJob` that writes
   the snapshot of the tables (`coordinator.store.snapshot`) so that replay needs
   only it and the records after it; the owner polls `job.done` and then calls
   `job.finish()`, which makes the new start of replay the log's start.
5. `close()` syncs (unless the log failed) and releases what the log holds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from coordinator.store.snapshot import StoreSnapshot

#: ``on_record(position, payload)``: apply one record's payload; `position` names it in
#: errors (a byte offset in the file, a Kafka offset). Raises ValueError for a payload
#: that does not decode.
OnRecord = Callable[[int, memoryview], None]


class OpenedLog(Protocol):
    """What `DurableLog.open` replayed."""

    @property
    def records(self) -> int:
        """Records handed to `on_record` (snapshot records included)."""
        ...

    @property
    def bytes(self) -> int:
        """Framed bytes of those records."""
        ...

    @property
    def truncated_bytes(self) -> int:
        """Bytes of a torn tail cut off (always 0 for a log that cannot tear)."""
        ...


class CompactionJob(Protocol):
    """A compaction or snapshot running on its own thread (see step 4)."""

    #: Set by the job's thread when it ended, with `error` None or the failure.
    done: threading.Event
    error: BaseException | None
    #: Keyed entries, records and largest record (payload bytes) the job wrote.
    entries_written: int
    records_written: int
    largest_record: int
    #: `time.perf_counter()` when the job was created.
    started: float

    def finish(self) -> threading.Thread | None:
        """Owner thread, after `done` and with `error` None: switch replay's start to the
        job's output. Returns a cleanup thread for the owner to join later, or None.
        Raises OSError (nothing switched) or LogFailed (fatal)."""
        ...

    def cancel(self) -> None:
        """Stop the job's thread (bounded join) and drop what it wrote so far."""
        ...


class DurableLog(Protocol):
    """An append-only log of records (see the module docstring); one owner thread."""

    @property
    def where(self) -> str:
        """The log's place, for messages: a path, or kafka://bootstrap/topic."""
        ...

    @property
    def size(self) -> int:
        """Framed bytes replay would read now (appended records included)."""
        ...

    @property
    def fsyncs(self) -> int:
        """Completed `sync()` calls that made records durable."""
        ...

    @property
    def max_payload_bytes(self) -> int:
        """Largest payload `append` accepts."""
        ...

    def open(self, on_record: OnRecord, *, truncate_corrupt: bool = False) -> OpenedLog: ...

    def append(self, payload: bytes) -> int: ...

    def sync(self) -> None: ...

    def keepalive(self) -> None:
        """Called by the owner every loop iteration: a log whose standbys watch for
        the writer's liveness writes when idle (the Kafka log's lease record);
        raises LogFailed like `sync`."""
        ...

    def start_compaction(self, snapshot: StoreSnapshot, batch_entries: int) -> CompactionJob: ...

    def close(self) -> None: ...
