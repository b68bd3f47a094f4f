"""Retention and compaction scheduling: the maintenance half of `StateStore`.

`StoreMaintenance` is a mixin of `coordinator.state_store.StateStore`; the
tables and the log it works on are the store's (same owner thread).

Retention (`expire`): a group whose last activity (a write, a registration, a
`touch`) is older than `retention_s` gets every control variable tombstoned,
and its registry entry too if no member is registered. Tombstones are batched
into records of about BATCH_ENTRIES keyed entries.

Compaction (`maybe_compact`, run by the owner periodically): when dead entries
exceed `compact_dead_ratio` of the entries in the log (and the log is at least
`compact_min_bytes`), or when too many small records accumulated (see
REBATCH_RECORDS), start a background `coordinator.compaction.Compaction`; a
later call switches to the new segment once the background part is done. The
owner is paused only for the snapshot (dict copies) and the switch; both are
measured and reported in `stats()["compaction_max_pause_ms"]`. A failed
compaction is logged, counted (`compaction_failures`), and the old segment
stays in use.
"""

from __future__ import annotations

import logging
import time

from coordinator import records
from coordinator.compaction import JOIN_TIMEOUT_S, Compaction, StoreSnapshot, delete_segment
from coordinator.durable_log import LogFailed

log = logging.getLogger(__name__)

# Keyed entries per record written by compaction and expiry (seed: batched
# records make a 1,000,000-entry replay take well under 2 s).
BATCH_ENTRIES = 10_000
# Compact also when more than max(REBATCH_RECORDS, live entries / 10) records
# were appended since the last compaction, even if few are dead: replay costs
# ~8 us per record however small, so a log of 1,000,000 one-entry records
# would take ~8 s to load; rewritten into batched records it loads in ~0.3 s.
# This keeps the replay of 1,000,000 live entries near 1 s whatever the request
# sizes, and (the live/10 part) keeps a sustained stream of tiny requests from
# compacting back to back.
REBATCH_RECORDS = 50_000


class StoreMaintenance:
    """Mixin: needs the attributes StateStore.__init__ sets."""

    def expire(self, now: float | None = None) -> int:
        """Tombstone the control variables of groups idle longer than retention_s.

        A group's registry entry is tombstoned too when it has no members left.
        Returns the number of control variables tombstoned.
        """
        self._ready()
        now = self._clock() if now is None else now
        cutoff = now - self.retention_s
        expired = 0
        entries: list[list] = []
        count = 0
        groups = 0
        # _activity has exactly the groups that hold state (StateStore keeps it so).
        for group, last in [(g, t) for g, t in self._activity.items() if t < cutoff]:
            removed = self._control.drop_group(group)
            registry = self._groups.get(group)
            drop_registry = registry is not None and not registry.members
            if not removed and not drop_registry:
                continue  # a registered group whose control variables are gone already
            groups += 1
            for topic, partitions in removed:
                entries.append(records.control_entry(group, topic, partitions, [None] * len(partitions)))
                count += len(partitions)
                expired += len(partitions)
                if count >= BATCH_ENTRIES:
                    # Memory already changed: the records must follow (a group may span
                    # records; a crash in between leaves it idle, and the next expire
                    # finishes it).
                    self._append_encoded(*self._encode(entries))
                    entries, count = [], 0
            if drop_registry:
                del self._groups[group]
                entries.append(records.group_tombstone(group))
                count += 1
            if group not in self._groups:
                del self._activity[group]
                self._dirty_activity.discard(group)
            log.debug("retention: group %r idle since %.0f: tombstoned %d control variables%s",
                      group, last, sum(len(p) for _, p in removed), " and its registry entry" if drop_registry else "")
        if entries:
            self._append_encoded(*self._encode(entries))
        if groups:
            log.info("retention: %d groups idle for more than %.0f s: tombstoned %d control variables",
                     groups, self.retention_s, expired)
        return expired

    def _live_entries(self) -> int:
        return len(self._control) + len(self._groups) + sum(len(d) for d in self._docs.values())

    def _should_compact(self) -> bool:
        if self._log.size < self.compact_min_bytes or self._log_entries == 0:
            return False
        unbatched = self._log_records - self._records_at_compaction
        if unbatched > max(REBATCH_RECORDS, len(self._control) // 10):
            return True
        dead = self._log_entries - self._live_entries()
        return dead / self._log_entries > self.compact_dead_ratio

    def maybe_compact(self) -> bool:
        """Start a compaction if dead entries exceed the ratio, or finish one that is done.

        Returns True when this call started or finished a compaction.
        """
        self._ready()
        if self._compaction is not None:
            if not self._compaction.done.is_set():
                return False
            return self._finish_compaction()
        if not self._should_compact():
            return False
        self._start_compaction()
        return True

    def compact(self, timeout: float = 60.0) -> None:
        """Compact now and wait for it (tests, benchmarks, operator tools)."""
        self._ready()
        if self._compaction is None:
            self._start_compaction()
        assert self._compaction is not None
        if not self._compaction.done.wait(timeout):
            raise TimeoutError(f"compaction did not finish within {timeout} s")
        if not self._finish_compaction():
            raise RuntimeError("compaction failed (see the log)") from self._last_compaction_error

    def _start_compaction(self) -> None:
        t0 = time.perf_counter()
        self._log.flush()
        snap = StoreSnapshot(  # C-level copies only: O(groups) at memcpy-like speed
            control=self._control.snapshot(),
            groups=dict(self._groups),  # values are frozen
            documents={ns: dict(d) for ns, d in self._docs.items()},
            activity=dict(self._activity),
            ts=self._clock(),
        )
        self._compaction = Compaction(self._log, snap, self._log.size, BATCH_ENTRIES)
        self._compaction_base = self._appended_entries
        self._compaction_base_records = self._appended_records
        self._compaction.start()
        self._note_pause(time.perf_counter() - t0)
        log.info("compaction started: %d bytes, %d entries (%d live)",
                 self._log.size, self._log_entries, self._live_entries())

    _last_compaction_error: BaseException | None = None

    def _finish_compaction(self) -> bool:
        job, self._compaction = self._compaction, None
        assert job is not None
        self._control.release_snapshot()
        if job.error is not None:
            self._compaction_failures += 1
            self._last_compaction_error = job.error
            return False
        t0 = time.perf_counter()
        before = self._log.size
        try:
            old_segment = job.finish()
        except LogFailed:
            raise  # fatal: the log refuses writes from now on
        except OSError as exc:  # before the rename: the old segment stays in use
            log.exception("switching to the compacted segment failed; keeping the old one")
            self._compaction_failures += 1
            self._last_compaction_error = exc
            return False
        self._join_deleter()
        self._deleter = delete_segment(old_segment)
        self._log_entries = job.entries_written + (self._appended_entries - self._compaction_base)
        self._log_records = job.records_written + (self._appended_records - self._compaction_base_records)
        self._records_at_compaction = job.records_written
        self._compactions += 1
        pause = time.perf_counter() - t0
        self._note_pause(pause)
        log.info("compaction done in %.3f s: %d -> %d bytes, %d entries; switch paused the caller %.1f ms",
                 time.perf_counter() - job.started, before, self._log.size, self._log_entries, pause * 1e3)
        return True

    def _join_deleter(self) -> None:
        if self._deleter is not None:
            self._deleter.join(JOIN_TIMEOUT_S)
            if self._deleter.is_alive():
                log.error("deleting the superseded segment takes over %.0f s", JOIN_TIMEOUT_S)
            self._deleter = None

    def _note_pause(self, seconds: float) -> None:
        self._last_pause_s = seconds
        self._max_pause_s = max(self._max_pause_s, seconds)
