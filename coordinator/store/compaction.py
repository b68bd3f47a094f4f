"""Background compaction of the durable log (Kafka's log cleaner for a compacted topic).

Dead entries are entries still in the log that no longer decide the state:
overwritten values, tombstones, and the entries tombstones deleted. When they
exceed a ratio of the log the store rewrites only the live entries into a new
segment. The store's owner thread is blocked only for steps 1 and 5:

1. (owner) snapshot the state with C-level dict copies only: the group level of
   the control table (topic dicts shared copy-on-write, offset buffers shared,
   see `control_table`), the registry, the documents, the activity times; and
   note the log offset `start` where the snapshot stands. ~1 ms at 1,000
   groups, ~8 ms at 100,000 groups.
2. (compaction thread) write the snapshot as batched records into
   `segment-<g+1>.log.tmp`: `records.Batcher` bounds each record by bytes
   (`records.BATCH_BYTES`) and by keyed entries (`batch_entries`), so no
   record comes near the frame limit however long the names are. The
   registry is written per member (a group's "r" entry, then one "m" entry
   per member).
3. (compaction thread) catch up: copy the bytes the owner appended to the old
   segment since `start` (raw records, up to the owner's last write), repeating
   while more than CATCH_UP_SLACK bytes remain, then fsync the new file.
4. (compaction thread) signal done.
5. (owner, from `maybe_compact`) copy the last few records, fsync, rename the
   new segment into place, fsync the directory, switch appends to it and
   delete the old segment (`SegmentLog.switch_to`).

Replaying the new segment gives the same state as the old one: the snapshot is
the state at `start` (or newer for entries the owner wrote during step 2, which
the copied records then set again), followed by every record written since.

Failure: if steps 2-3 fail (disk full, ...) the error is logged with its
traceback, the `.tmp` file is deleted, the failure is counted in the store's
stats, and the old segment stays in use: nothing is lost. A crash at any step
leaves either the old segment (the `.tmp` is deleted on open) or, after the
rename, the complete new one (the old segment is deleted on open). Every step
calls `coordinator.store.log.segment.crash_point` (a test hook; the names are
`CRASH_STEPS` there), and tests/coordinator/store/test_store_crash_points.py
crashes a process at each of them.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from coordinator.store import records
from coordinator.store.log.segment import SegmentLog, SegmentRewrite, crash_point
from coordinator.store.snapshot import StoreSnapshot, write_snapshot

log = logging.getLogger(__name__)

# Step 3 stops catching up once fewer bytes than this remain: the owner copies
# the rest while it is blocked, so this bounds the switch pause (a few ms).
CATCH_UP_SLACK = 256 << 10
# Catch-up rounds at most: under writes as fast as the copy, the tail would
# never shrink below the slack; the owner copies what is left at the switch.
CATCH_UP_ROUNDS = 20
# The compaction thread yields the GIL at most this often (see Compaction._yield).
YIELD_EVERY_S = 0.001
# close() waits this long for a cancelled compaction thread; it prevents a
# shutdown from hanging on a stuck disk (the thread is a daemon).
JOIN_TIMEOUT_S = 30.0


class CompactionCancelled(Exception):
    pass


class Compaction:
    """One compaction run. Created and finished by the store's owner thread."""

    def __init__(self, seglog: SegmentLog, snap: StoreSnapshot, start: int, batch_entries: int) -> None:
        self._seglog = seglog
        self._snap = snap
        self.copied_upto = start
        self.batch_entries = batch_entries
        self.entries_written = 0  # keyed entries in the snapshot part
        self.records_written = 0  # records in the snapshot part
        self.largest_record = 0  # payload bytes of the largest record written
        self.error: BaseException | None = None
        self.done = threading.Event()
        self._cancel = threading.Event()
        self._rewrite: SegmentRewrite | None = None
        self.started = time.perf_counter()
        self._last_yield = self.started
        self.thread = threading.Thread(target=self._run, name="state-compaction", daemon=True)

    def start(self) -> None:
        self.thread.start()

    # ---- compaction thread ---------------------------------------------------------
    def _run(self) -> None:
        try:
            self._rewrite = self._seglog.begin_rewrite()
            self._write_snapshot(self._rewrite)
            self._catch_up(self._rewrite)
            crash_point("rewrite-caught-up")
            self._rewrite.fsync()
            crash_point("rewrite-fsynced")
        except BaseException as exc:  # reported to the owner through self.error
            self.error = exc
            if not isinstance(exc, CompactionCancelled):
                log.exception("compaction into generation %d failed", self._seglog.generation + 1)
            if self._rewrite is not None:
                self._rewrite.abort()
        finally:
            self._snap = None  # type: ignore[assignment]  # free the snapshot
            self.done.set()

    def _check_cancel(self) -> None:
        """Between records: stop if cancelled, and yield the GIL (see _yield)."""
        if self._cancel.is_set():
            raise CompactionCancelled()
        self._yield()

    def _yield(self) -> None:
        """Give the GIL away after YIELD_EVERY_S of work, so that the owner thread
        (back from an fsync, wanting the GIL) does not wait a whole switch interval
        (5 ms) behind this thread. Not more often: each yield to a busy owner can
        cost this thread up to a switch interval."""
        now = time.perf_counter()
        if now - self._last_yield >= YIELD_EVERY_S:
            time.sleep(0)
            self._last_yield = time.perf_counter()

    def _write_snapshot(self, out: SegmentRewrite) -> None:
        def emit(payload: bytes, _entries: list[records.Entry], count: int) -> None:
            out.append(payload)
            self.entries_written += count
            self.records_written += 1
            crash_point("rewrite-record")
            self._check_cancel()

        self.largest_record = write_snapshot(self._snap, self.batch_entries, emit, self._yield)

    def _catch_up(self, out: SegmentRewrite) -> None:
        for _ in range(CATCH_UP_ROUNDS):
            end = self._seglog.flushed_end
            if end - self.copied_upto < CATCH_UP_SLACK:
                return
            for chunk in self._seglog.read_range(self.copied_upto, end):
                out.write(chunk)
            self.copied_upto = end
            self._check_cancel()

    # ---- owner thread ----------------------------------------------------------------
    def finish(self) -> threading.Thread:
        """Step 5; call only after `done` is set and `error` is None. Returns the thread
        that deletes the old segment off the owner thread (`delete_segment`)."""
        assert self.done.is_set()
        assert self.error is None
        assert self._rewrite is not None
        return delete_segment(self._seglog.switch_to(self._rewrite, self.copied_upto))

    def cancel(self) -> None:
        self._cancel.set()
        self.thread.join(JOIN_TIMEOUT_S)
        if self.thread.is_alive():
            log.error("compaction thread did not stop within %.0f s; leaving it (daemon)", JOIN_TIMEOUT_S)
        elif self._rewrite is not None and self.error is None:
            self._rewrite.abort()


def delete_segment(path: Path) -> threading.Thread:
    """Unlink a superseded segment in a thread (owned and joined by the store).

    A failure is logged; the file is deleted again by the next `SegmentLog.open`.
    """

    def run() -> None:
        try:
            os.unlink(path)
            crash_point("old-segment-deleted")
        except Exception:
            log.exception("could not delete superseded segment %s (it is removed on next start)", path)

    thread = threading.Thread(target=run, name="state-segment-delete", daemon=True)
    thread.start()
    return thread
