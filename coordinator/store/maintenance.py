"""Retention and compaction scheduling: the maintenance half of `StateStore`.

`Maintenance` is owned by `coordinator.store.state_store.StateStore` and built
with the store's log, tables (`coordinator.store.tables`) and segment counters;
it runs on the store's owner thread and keeps what spans episodes (the backoffs,
the running compaction, the counters in `stats()`). Its episodes of work are
objects of their own: one `coordinator.store.retention.Expiry` per retention
pass (built by the store with its append function), one
`coordinator.store.compaction.Compaction` per compaction.

Retention (`expire`): one pass when the owner asks, unless a failed one is
backing off; what a pass tombstones is `coordinator.store.retention`'s.

Compaction (`maybe_compact`, run by the owner periodically): when dead entries
exceed `compact_dead_ratio` of the entries in the log (and the log is at least
`compact_min_bytes`), when too many small records accumulated (see
REBATCH_RECORDS), or when load found records over the frame limit, start the
log's background job (`DurableLog.start_compaction`: the file log's segment
rewrite, `coordinator.store.compaction.Compaction`, or the Kafka log's snapshot,
`coordinator.store.kafka.snapshots.KafkaSnapshot`); a later call finishes it
(`CompactionJob.finish`: the switch to the new segment, or the Kafka log's new
size) once the background part is done. The owner is paused only for
the snapshot (dict copies) and the switch; both are measured and reported in
`stats().compaction_max_pause_ms`.

Failures: a failed compaction or expiry is logged with its traceback, counted
(`compaction_failures`, `expire_failures`) and retried after a backoff
(`coordinator.protocol.common.backoff.Backoff`: 1 s doubling up to 5 min); `expire()` and `maybe_compact()` never
raise for it, so maintenance never stops the server loop. The one exception
is `LogFailed`: the log is fail-stop (see `coordinator.store.log.segment`), and the server must
stop and restart from what is on disk.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import attrs

from coordinator.protocol.common.backoff import Backoff
from coordinator.store import records
from coordinator.store.compaction import JOIN_TIMEOUT_S
from coordinator.store.durable_log import CompactionJob, DurableLog
from coordinator.store.log.segment import LogFailed
from coordinator.store.snapshot import take_snapshot
from coordinator.store.tables import LogCounters, StoreTables

log = logging.getLogger(__name__)

# Keyed entries per record written by compaction (records.Batcher also bounds
# each record by bytes).
BATCH_ENTRIES = records.BATCH_ENTRIES
# Compact also when more than max(REBATCH_RECORDS, live entries / 10) records
# were appended since the last compaction, even if few are dead: replay costs
# ~8 us per record however small, so a log of 1,000,000 one-entry records
# would take ~8 s to load; rewritten into batched records it loads in ~0.3 s.
# This keeps the replay of 1,000,000 live entries near 1 s whatever the request
# sizes, and (the live/10 part) keeps a sustained stream of tiny requests from
# compacting back to back.
REBATCH_RECORDS = 50_000
# Retry schedule of a failed maintenance task: the first retry after this many
# seconds, doubling, at most MAINTENANCE_BACKOFF_MAX_S. It keeps a persistent
# failure (a full disk) from rewriting a large segment every second, while a
# transient one is retried soon.
MAINTENANCE_BACKOFF_FIRST_S = 1.0
MAINTENANCE_BACKOFF_MAX_S = 300.0


@attrs.frozen
class MaintenancePolicy:
    """When to expire and when to compact (validated by `StateStore`)."""

    retention_s: float
    compact_dead_ratio: float
    compact_min_bytes: int


@attrs.frozen
class MaintenanceStats:
    """Maintenance's counters, part of ``StateStore.stats`` (``StoreStats``)."""

    compactions: int
    compaction_running: bool
    compaction_failures: int
    expire_failures: int
    largest_compaction_record_bytes: int
    compaction_max_pause_ms: float


class Maintenance:
    """Retention passes and compaction scheduling of one store (see the module docstring).

    Every method runs on the store's owner thread; the store calls them only
    once it is loaded (except `close` and `stats`)."""

    #: The running compaction (None: none): written here only; the store reads it
    #: (tests wait for it). Its own thread writes only the job's fields.
    compaction: CompactionJob | None

    def __init__(
        self,
        log: DurableLog,
        tables: StoreTables,
        counters: LogCounters,
        policy: MaintenancePolicy,
        *,
        clock: Callable[[], float],
    ) -> None:
        self._log = log
        self._tables = tables
        self._counters = counters
        self._policy = policy
        self._clock = clock
        self.compaction = None
        self._compaction_base = 0  # counters.appended_entries when the running compaction started
        self._compaction_base_records = 0
        self._deleter: threading.Thread | None = None  # a finished job's cleanup (unlinks a superseded segment)
        self._compactions = 0
        self._compaction_failures = 0
        self._expire_failures = 0
        self._compact_backoff = Backoff(MAINTENANCE_BACKOFF_FIRST_S, MAINTENANCE_BACKOFF_MAX_S)
        self._expire_backoff = Backoff(MAINTENANCE_BACKOFF_FIRST_S, MAINTENANCE_BACKOFF_MAX_S)
        self._largest_compaction_record = 0
        self._max_pause_s = 0.0
        self._last_compaction_error: BaseException | None = None

    # ---- retention -------------------------------------------------------------------
    def expire(self, run_pass: Callable[[float], int], now: float | None = None) -> int:
        """Run one retention pass, ``run_pass(now)`` (an `Expiry`), unless a failed one
        is still backing off.

        Returns the number of control variables tombstoned. A failure is logged
        and retried after a backoff (0 is returned meanwhile); only LogFailed
        is raised.
        """
        wall = self._clock()
        if not self._expire_backoff.ready(wall):
            return 0
        try:
            expired = run_pass(wall if now is None else now)
        except LogFailed:
            raise
        except Exception:
            self._expire_failures += 1
            delay = self._expire_backoff.failed(wall)
            log.exception(
                "retention expiry failed (%d in a row); retrying in %.0f s", self._expire_backoff.failures, delay
            )
            return 0
        self._expire_backoff.succeeded()
        return expired

    # ---- compaction ------------------------------------------------------------------
    def _should_compact(self) -> bool:
        counters = self._counters
        if self._log.size < self._policy.compact_min_bytes or counters.entries == 0:
            return False
        unbatched = counters.records - counters.records_at_compaction
        if unbatched > max(REBATCH_RECORDS, len(self._tables.control) // 10):
            return True
        dead = counters.entries - self._tables.live_entries()
        return dead / counters.entries > self._policy.compact_dead_ratio

    def maybe_compact(self) -> bool:
        """Start a compaction if one is due, or finish one that is done.

        Returns True when this call started or finished a compaction. A failure
        is logged and the next start waits for a backoff; only LogFailed is raised.
        """
        now = self._clock()
        try:
            if self.compaction is not None:
                if not self.compaction.done.is_set():
                    return False
                return self._finish_compaction()
            if not self._compact_backoff.ready(now) or not self._should_compact():
                return False
            self._start_compaction()
            return True
        except LogFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - logged, retried after a backoff; only LogFailed is fatal
            self._note_compaction_failure(exc, "compaction failed")
            return False

    def compact(self, timeout: float = 60.0) -> None:
        """Compact now and wait for it (tests, benchmarks, operator tools)."""
        if self.compaction is None:
            self._start_compaction()
        assert self.compaction is not None
        if not self.compaction.done.wait(timeout):
            raise TimeoutError(f"compaction did not finish within {timeout} s")
        if not self._finish_compaction():
            raise RuntimeError("compaction failed (see the log)") from self._last_compaction_error

    def _start_compaction(self) -> None:
        t0 = time.perf_counter()
        tables = self._tables
        snap = take_snapshot(tables, self._clock())
        try:
            self._compaction_base = self._counters.appended_entries
            self._compaction_base_records = self._counters.appended_records
            self.compaction = self._log.start_compaction(snap, BATCH_ENTRIES)
        except BaseException:
            self.compaction = None
            tables.control.release_snapshot()
            raise
        self._note_pause(time.perf_counter() - t0)
        log.info(
            "compaction started: %d bytes, %d entries (%d live)",
            self._log.size,
            self._counters.entries,
            tables.live_entries(),
        )

    def _note_compaction_failure(self, exc: BaseException, what: str) -> None:
        self._compaction_failures += 1
        self._last_compaction_error = exc
        delay = self._compact_backoff.failed(self._clock())
        log.error(
            "%s (%d in a row; the old segment stays in use): %s; next attempt in %.0f s or later",
            what,
            self._compact_backoff.failures,
            exc,
            delay,
            exc_info=exc,
        )

    def _finish_compaction(self) -> bool:
        job, self.compaction = self.compaction, None
        assert job is not None
        self._tables.control.release_snapshot()
        if job.error is not None:
            self._note_compaction_failure(job.error, "compaction into a new segment failed")
            return False
        t0 = time.perf_counter()
        before = self._log.size
        try:
            cleanup = job.finish()
        except LogFailed:
            raise  # fatal: the log refuses writes from now on
        except OSError as exc:  # nothing switched: the old start of replay stays in use
            self._note_compaction_failure(exc, "switching to the compacted log failed")
            return False
        self.join_deleter()
        self._deleter = cleanup
        counters = self._counters
        counters.entries = job.entries_written + (counters.appended_entries - self._compaction_base)
        counters.records = job.records_written + (counters.appended_records - self._compaction_base_records)
        counters.records_at_compaction = job.records_written
        self._largest_compaction_record = max(self._largest_compaction_record, job.largest_record)
        self._compactions += 1
        self._compact_backoff.succeeded()
        pause = time.perf_counter() - t0
        self._note_pause(pause)
        log.info(
            "compaction done in %.3f s: %d -> %d bytes, %d entries in records of at most %d bytes; "
            "switch paused the caller %.1f ms",
            time.perf_counter() - job.started,
            before,
            self._log.size,
            counters.entries,
            job.largest_record,
            pause * 1e3,
        )
        return True

    def join_deleter(self) -> None:
        """Wait (bounded by JOIN_TIMEOUT_S) for a finished job's cleanup (the deletion of a
        superseded segment)."""
        if self._deleter is not None:
            self._deleter.join(JOIN_TIMEOUT_S)
            if self._deleter.is_alive():
                log.error("deleting the superseded segment takes over %.0f s", JOIN_TIMEOUT_S)
            self._deleter = None

    def _note_pause(self, seconds: float) -> None:
        self._max_pause_s = max(self._max_pause_s, seconds)

    def close(self) -> None:
        """Cancel a running compaction and wait for a pending segment deletion."""
        if self.compaction is not None:
            self.compaction.cancel()
            self.compaction = None
            self._tables.control.release_snapshot()
        self.join_deleter()

    def stats(self) -> MaintenanceStats:
        return MaintenanceStats(
            compactions=self._compactions,
            compaction_running=self.compaction is not None,
            compaction_failures=self._compaction_failures,
            expire_failures=self._expire_failures,
            largest_compaction_record_bytes=self._largest_compaction_record,
            compaction_max_pause_ms=self._max_pause_s * 1e3,
        )
