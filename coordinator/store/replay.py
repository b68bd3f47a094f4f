"""Start-up of the state store: replay the durable log into the in-memory tables.

`Replay` is one replay: `StateStore.load()` builds it with the store's log and
(empty) tables and runs it once. The live table API (writes, reads, sync) is
in `coordinator.store.state_store`, the tables in `coordinator.store.tables`.

Protocol of `Replay.run()` (called once, by the owner thread; the server
answers LOAD_IN_PROGRESS to every request until `load()` returns):

1. Open the log (`coordinator.store.durable_log.DurableLog.open`), which hands
   every record to `on_record` in order. The file log
   (`coordinator.store.file_log`) takes the directory lock, deletes leftovers of
   an unfinished compaction and scans the newest segment
   (`coordinator.store.log.recovery`); the Kafka log
   (`coordinator.store.kafka.kafka_log`) replays its newest snapshot and then
   the log topic to its high watermark.
2. `on_record` decodes the payload (`coordinator.store.records`) and applies its
   entries in order (`StoreTables.apply`): control variables, registry
   entries, members and documents, a `null` value being a tombstone. One record
   holds all entries of one request, so a request is replayed all or nothing.
   The live writes apply their entries with the same `apply`, so memory after
   a write equals memory after replaying it. A payload that does not decode
   raises ValueError: the log refuses to start (a CRC-valid record is never a
   torn write), unless the operator asked to cut a file log
   (`truncate_corrupt`, see `coordinator.store.log.recovery`).
3. A record that decodes but cannot be applied (for example a negative
   offset) is not a torn write: `LogError` stops start-up and nothing is
   truncated, because truncating acknowledged data for what may be a bug here
   would lose it for good.
4. Activity times come from the `act` field of the records (the newest wins).
   A group that holds state but has no recorded activity counts as active now;
   activity of groups that no longer hold state is dropped, so `activity`
   holds exactly the groups with state.
5. `LoadReport` carries the counters that drive compaction (entries and
   records in the segment) for the store to set, and says what was replayed
   and how long it took.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from coordinator.protocol.wire.status import LoadReport
from coordinator.store import records
from coordinator.store.durable_log import DurableLog
from coordinator.store.log.frame import LogError
from coordinator.store.tables import RegistryEntry, StoreTables

__all__ = ["LoadReport", "RegistryEntry", "Replay"]

log = logging.getLogger(__name__)


class Replay:
    """One replay of `log` into `tables` (see the module docstring).

    The caller guarantees: `log` is not open yet, `tables` is empty and used by
    no one else until `run()` returns, and `run()` is called at most once."""

    def __init__(
        self, log: DurableLog, tables: StoreTables, *, clock: Callable[[], float], truncate_corrupt: bool
    ) -> None:
        self._log = log
        self._tables = tables
        self._clock = clock
        self._truncate_corrupt = truncate_corrupt
        self._entries = 0

    def run(self) -> LoadReport:
        """Open the log and apply every record; detect, report and truncate a torn tail.

        Raises LogError (a record that cannot be applied, a corrupt log without
        `truncate_corrupt`) or OSError; the store is then unusable."""
        t0 = time.perf_counter()
        tables = self._tables
        recovery = self._log.open(self._on_record, truncate_corrupt=self._truncate_corrupt)
        # Groups with state but no recorded activity count as active now; activity of
        # groups that no longer hold state is dropped.
        now = self._clock()
        tables.activity = {g: tables.activity.get(g, now) for g in tables.known_groups()}
        seconds = time.perf_counter() - t0
        report = LoadReport(recovery.records, self._entries, recovery.bytes, seconds, recovery.truncated_bytes)
        log.info(
            "loaded %s: %d records, %d entries, %d bytes in %.3f s (%d control variables, %d groups, "
            "%d truncated bytes)",
            self._log.where,
            report.records,
            report.entries,
            report.bytes,
            report.seconds,
            len(tables.control),
            len(tables.groups),
            report.truncated_bytes,
        )
        return report

    def _on_record(self, offset: int, payload: memoryview) -> None:
        _ts, act, items = records.decode(payload)  # ValueError = undecodable (see log.recovery)
        tables = self._tables
        try:
            for entry in items:
                self._entries += tables.apply(entry)
            for group, at in act.items():
                if at > tables.activity.get(group, 0.0):
                    tables.activity[group] = float(at)
        except (ValueError, TypeError) as exc:
            # Not a torn write (the CRC matched and the shape is valid): refuse to
            # truncate acknowledged data because of what may be a bug here.
            raise LogError(f"record at {offset} of {self._log.where} cannot be applied: {exc}") from exc
