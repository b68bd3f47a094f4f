"""The coordinator's durable log: one append-only segment file of framed records.

This module knows bytes, files and fsync; it does not know what a record means
(that is `coordinator.store.records`) nor how the table is built (`state_store`).
Records are framed by `coordinator.store.log.frame` (length, CRC32C, version
byte, payload). What happens when the log is opened (directory lock, leftover
files, replay, torn-tail detection, truncation, the `.corrupt-<offset>` file)
is `coordinator.store.log.recovery`, which also names the files in the state
directory.

Protocol of the writer (one owner thread):

1. `open(on_record)` locks the directory and recovers the newest segment
   (`coordinator.store.log.recovery`); appends then follow its last good record.
2. `append(payload)` frames the record into an in-memory buffer: no I/O. A
   payload over the frame limit raises `RecordTooLarge` and nothing is
   buffered: no writer can put a record on disk that recovery would reject.
3. `sync()` writes the whole buffer with one write() and makes it durable with
   one fsync (plus one fsync of the directory when a file was created or
   renamed since the last sync). That is the group commit: everything appended
   since the previous sync shares one fsync. A value is acknowledged only after
   the sync that covers it returned.
4. `flush()` writes the buffer without fsync (compaction uses it so that a
   reader thread can copy the bytes; they are durable after the next fsync).
5. Fail-stop: if a write() or fsync of the segment fails, the log refuses every
   later append and sync (`LogFailed`). After a failed fsync the kernel may
   have dropped the dirty pages, so a later fsync that succeeds proves nothing,
   and a failed write may have left half a record. The process must restart:
   recovery then replays what is really on disk (a half record is a torn tail).
6. `close()` syncs (unless the log failed), closes and releases the lock.

Compaction support (`begin_rewrite` / `SegmentRewrite` / `switch_to`): the new
segment is written as `segment-<generation+1>.log.tmp`, fsynced, renamed to its
final name (atomic), and the directory fsynced; then the writer switches to it
and the old segment is deleted. Each step calls `crash_point(name)` (a test
hook, see `set_crash_point`) so tests can crash the process there and check
that a restart loads everything acknowledged.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from coordinator.protocol.common.osutil import fsync_dir
from coordinator.store.log.frame import (  # noqa: F401
    FORMAT_VERSION,
    HEADER,
    HEADER_SIZE,
    MAX_PAYLOAD_BYTES,
    MAX_RECORD_BYTES,
    Damage,
    DamageKind,
    LogError,
    RecordTooLarge,
    ScanResult,
    UnsupportedFormat,
    encode_record,
    scan,
)

# Framing lives in log.frame, recovery and file names in log.recovery;
# re-exported here for callers of the log.
from coordinator.store.log.recovery import (  # noqa: F401
    LOCK_NAME,
    SEGMENT_RE,
    CorruptLog,
    Recovery,
    StateDirInUse,
    lock_state_dir,
    recover,
    segment_name,
)

log = logging.getLogger(__name__)

# `append` writes the buffer out (without fsync) past this many bytes, so a
# caller that never syncs cannot grow the process without bound.
FLUSH_THRESHOLD = 4 << 20
# A compaction writing its new segment flushes it to disk every this many bytes.
# On ext4 (data=ordered) the owner's fsync of the active segment also writes
# out other files' dirty data, so a large unflushed rewrite would add its whole
# size to the latency of the next acknowledged write.
REWRITE_SYNC_EVERY = 256 << 10


# Test hook: called with the name of each step of a compaction (CRASH_STEPS);
# tests install a function that raises or calls os._exit at one of them.
_crash_hook: Callable[[str], None] | None = None

#: The named steps of a compaction, in order (see coordinator/store/compaction.py).
CRASH_STEPS = (
    "rewrite-record",  # after each record of the snapshot was written to the .tmp file
    "rewrite-caught-up",  # the .tmp file holds the snapshot and the catch-up copy
    "rewrite-fsynced",  # the compaction thread fsynced the .tmp file
    "switch-copied",  # the owner copied the last records into the .tmp file
    "switch-sealed",  # the .tmp file is fsynced and closed, not yet renamed
    "switch-renamed",  # renamed into place, directory not yet fsynced
    "switch-dir-fsynced",  # the directory is fsynced: the new segment is the log
    "old-segment-deleted",  # the superseded segment was unlinked
)


def set_crash_point(hook: Callable[[str], None] | None) -> None:
    """Install (or remove, with None) the test hook called at every CRASH_STEPS step."""
    global _crash_hook
    _crash_hook = hook


def crash_point(step: str) -> None:
    if _crash_hook is not None:
        _crash_hook(step)


class LogFailed(LogError):
    """A write or fsync of the log failed earlier; restart to recover from disk."""


class SegmentLog:
    """The active segment: buffered appends, one fsync per sync(). One owner thread.

    `flushed_end` may be read from another thread (compaction): every byte
    before it has been written to the file by a completed write().
    """

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.generation = 0
        self.path = self.state_dir / segment_name(0)
        self._fd: int | None = None
        self._lock_fd: int | None = None
        self._buf = bytearray()
        self._file_end = 0  # bytes written to the file
        self.flushed_end = 0  # published copy of _file_end for reader threads
        self._dir_dirty = False
        self.fsyncs = 0
        self.failed: OSError | None = None  # set by the first write/fsync failure

    # ---- open ----------------------------------------------------------------------
    def open(self, on_record: Callable[[int, memoryview], None], *, truncate_corrupt: bool = False) -> Recovery:
        """Lock the directory, clean leftovers, replay the newest segment, repair a torn
        tail (`coordinator.store.log.recovery`); then appends follow the last good record.

        Damage that is not a torn tail raises `CorruptLog` (nothing changed) unless
        `truncate_corrupt` (the operator's explicit choice) cuts the log there."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = lock_state_dir(self.state_dir)
        try:
            self._fd, recovery = recover(self.state_dir, on_record, truncate_corrupt=truncate_corrupt)
            self.generation, self.path = recovery.generation, recovery.path
            self._file_end = self.flushed_end = recovery.bytes
            if recovery.dir_changed:
                self._dir_dirty = True
                self.sync()
        except BaseException:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self._unlock()
            raise
        return recovery

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing releases the flock
            self._lock_fd = None

    # ---- writing -----------------------------------------------------------------
    #: Largest payload `append` accepts (the frame limit).
    max_payload_bytes = MAX_PAYLOAD_BYTES

    @property
    def where(self) -> str:
        """The active segment's path, for messages."""
        return str(self.path)

    @property
    def size(self) -> int:
        """Logical size: bytes in the file plus bytes appended but not yet written."""
        return self._file_end + len(self._buf)

    def append(self, payload: bytes) -> int:
        """Frame `payload` into the buffer; returns its offset. Durable after the next sync().

        Raises RecordTooLarge (nothing buffered) for a payload over MAX_PAYLOAD_BYTES."""
        self._check_open()
        offset = self.size
        self._buf += encode_record(payload)
        if len(self._buf) >= FLUSH_THRESHOLD:
            self.flush()
        return offset

    def flush(self) -> None:
        """Write the buffer to the file (no fsync)."""
        if self._buf:
            fd = self._check_open()
            view = memoryview(self._buf)
            written = 0
            try:
                while written < len(view):
                    written += os.write(fd, view[written:])
            except OSError as exc:
                self._fail(exc, "write")
            finally:
                view.release()
            self._file_end += written
            self._buf.clear()
            self.flushed_end = self._file_end

    def sync(self) -> None:
        """Group commit: one write, one fsync of the file (and of the directory if it changed)."""
        fd = self._check_open()
        self.flush()
        try:
            os.fsync(fd)
            if self._dir_dirty:
                fsync_dir(self.state_dir)
        except OSError as exc:
            self._fail(exc, "fsync")
        self.fsyncs += 1
        self._dir_dirty = False

    def _fail(self, exc: OSError, what: str) -> None:
        self.failed = exc
        log.critical(
            "%s of %s failed (%s): the log accepts no more writes; restart the coordinator "
            "(recovery replays what is on disk)",
            what,
            self.path,
            exc,
        )
        raise LogFailed(f"{what} of {self.path} failed: {exc}; restart the coordinator") from exc

    def _check_open(self) -> int:
        """The open file descriptor; raises when the log is not open or has failed."""
        if self._fd is None:
            raise RuntimeError(f"segment log {self.path} is not open")
        if self.failed is not None:
            raise LogFailed(
                f"an earlier write/fsync of {self.path} failed ({self.failed}); restart the coordinator"
            ) from self.failed
        return self._fd

    def close(self) -> None:
        """Sync and close; releases the directory lock. After a failure, only closes."""
        if self._fd is not None:
            try:
                if self.failed is None:
                    self.sync()
            finally:
                os.close(self._fd)
                self._fd = None
                self._unlock()

    # ---- compaction support ----------------------------------------------------------
    def begin_rewrite(self) -> SegmentRewrite:
        return SegmentRewrite(self.state_dir, self.generation + 1)

    def read_range(self, start: int, end: int) -> Iterator[bytes]:
        """Bytes [start, end) of the active file, in chunks (safe from another thread
        for end <= flushed_end: those bytes are immutable)."""
        with open(self.path, "rb") as f:
            f.seek(start)
            remaining = end - start
            while remaining > 0:
                chunk = f.read(min(remaining, 1 << 20))
                if not chunk:
                    raise LogError(f"{self.path} ends before byte {end}")
                remaining -= len(chunk)
                yield chunk

    def switch_to(self, rewrite: SegmentRewrite, copied_upto: int) -> Path:
        """Finish a compaction (owner thread): copy what was appended since the rewrite
        caught up, make the new segment durable, rename it into place, switch to it.

        1. write the buffer to the old file (no fsync: the new file gets it durably);
        2. copy old bytes [copied_upto, end) into the new file, fsync it;
        3. rename new.tmp -> new (atomic), fsync the directory: the commit point;
        4. reopen for append. Returns the old segment's path: the caller deletes it
           (off its own thread: unlinking a large file takes tens of ms; if the
           process dies first, `open` deletes it).
        """
        self.flush()
        try:
            for chunk in self.read_range(copied_upto, self._file_end):
                rewrite.write(chunk)
            crash_point("switch-copied")
            rewrite.seal()
            crash_point("switch-sealed")
            os.rename(rewrite.tmp, rewrite.final)
        except BaseException:
            rewrite.abort()  # nothing switched: the old segment stays in use
            raise
        # Renamed: from here on the directory may name the new segment, so appends
        # must go there; a failure now is fatal (fail-stop, see the module docstring).
        # The rename is durable only with the directory's fsync: until that has
        # succeeded, every sync() fsyncs the directory too.
        self._dir_dirty = True
        old_path, old_fd = self.path, self._fd
        try:
            self._fd = os.open(rewrite.final, os.O_RDWR | os.O_APPEND)
        except OSError as exc:
            self._fail(exc, "reopen after compaction")
        if old_fd is not None:
            os.close(old_fd)
        self.path, self.generation = rewrite.final, rewrite.generation
        self._file_end = self.flushed_end = rewrite.size
        crash_point("switch-renamed")
        try:
            fsync_dir(self.state_dir)
        except OSError as exc:
            self._fail(exc, "directory fsync after compaction")
        self._dir_dirty = False
        crash_point("switch-dir-fsynced")
        return old_path


class SegmentRewrite:
    """A new segment being written as `<name>.tmp` (by the compaction thread)."""

    def __init__(self, state_dir: Path, generation: int) -> None:
        self.state_dir = state_dir
        self.generation = generation
        self.final = state_dir / segment_name(generation)
        self.tmp = state_dir / (segment_name(generation) + ".tmp")
        self._f = open(self.tmp, "wb")  # noqa: SIM115 (open until seal() or abort())
        self.size = 0
        self._synced = 0

    def append(self, payload: bytes) -> None:
        """Frame and write one record; RecordTooLarge (nothing written) over the limit."""
        self.write(encode_record(payload))

    def write(self, data: bytes) -> None:
        self._f.write(data)
        self.size += len(data)
        if self.size - self._synced >= REWRITE_SYNC_EVERY:
            self._f.flush()
            os.fdatasync(self._f.fileno())
            self._synced = self.size

    def fsync(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())

    def seal(self) -> None:
        """fsync and close: the file is complete and durable (not yet renamed)."""
        self.fsync()
        self._f.close()

    def abort(self) -> None:
        if not self._f.closed:
            self._f.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.tmp)
