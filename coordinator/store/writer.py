"""The store's write path: one request's entries -> one log record -> the tables.

`RecordWriter` is owned by `coordinator.store.state_store.StateStore` and built
with the store's log, tables (`coordinator.store.tables`) and segment counters;
it runs on the store's owner thread. The store validates a request and decides
its entries; the writer makes them durable-to-be and applies them, so that the
tables never get ahead of the log and a refused write changes nothing.

A write (`append_request`):

1. The entries are encoded (`coordinator.store.records`); the record also
   carries the activity (last-use time) of every group touched since the last
   record that carried it, so retention survives a restart without records of
   its own.
2. If that makes the record larger than a batched record, the activity goes
   first into bounded records of its own (`records.Batcher`), and the request's
   record carries none.
3. A request too large for one record (over the log's frame limit) raises
   `RecordTooLarge` (a ValueError) before anything is appended; values JSON
   cannot encode raise ValueError/TypeError in step 1, likewise.
4. The record is appended (`append_payload`: the log first, so a log that
   refuses leaves the tables and counters as they were), the counters advance,
   and the entries are applied to the tables exactly as replay will apply them.

Activity (`mark_active`, `write_for_group`): a group is marked active before
its record is encoded (the record carries that activity); a write that is
refused does not leave a group that held no state marked (the store's
invariant: the groups in `tables.activity` are the groups with state).
Nothing here syncs: the caller's `sync()` (group commit) makes it durable.
"""

from __future__ import annotations

from collections.abc import Callable

from coordinator.store import records
from coordinator.store.durable_log import DurableLog
from coordinator.store.log.frame import RecordTooLarge
from coordinator.store.tables import LogCounters, StoreTables


class RecordWriter:
    """The write path of one store (see the module docstring); one owner thread."""

    def __init__(
        self, log: DurableLog, tables: StoreTables, counters: LogCounters, *, clock: Callable[[], float]
    ) -> None:
        self._log = log
        self._tables = tables
        self._counters = counters
        self._clock = clock

    def append_request(self, entries: list[records.Entry]) -> None:
        """Append one request's entries as ONE record (replayed all or nothing), then
        apply them to the tables (steps 1-4). Raises RecordTooLarge, ValueError or
        TypeError with nothing written and nothing changed."""
        ts = self._clock()
        tables = self._tables
        parts = [records.encode_entry(e) for e in entries]
        active = [(g, tables.activity[g]) for g in tables.dirty_activity if g in tables.activity]
        act = [records.encode_activity(g, at) for g, at in active]
        payload = records.assemble(ts, parts, act)
        separate_activity = len(payload) > records.BATCH_BYTES and bool(act)
        if separate_activity:
            payload = records.assemble(ts, parts)
        if len(payload) > self._log.max_payload_bytes:
            raise RecordTooLarge(
                f"request too large for one log record ({len(payload)} bytes > {self._log.max_payload_bytes}); "
                "split it into smaller requests"
            )
        if separate_activity:
            batcher = records.Batcher(ts, lambda p, _e, _c: self.append_payload(p, 0))
            for group, at in active:
                batcher.add_activity(group, at)
            batcher.flush()
        self.append_payload(payload, sum(records.entry_count(e) for e in entries), carries_activity=True)
        for entry in entries:
            tables.apply(entry)

    def append_payload(self, payload: bytes, count: int, *, carries_activity: bool = False) -> None:
        """Append one encoded record; `carries_activity`: it holds the activity of every
        group touched since the last such record (so those need not be written again)."""
        self._log.append(payload)  # first: if the log refuses, nothing changed
        if carries_activity:
            self._tables.dirty_activity.clear()
        self._counters.appended(count)

    def mark_active(self, group: str) -> None:
        """`group` is in use now; written with the next record that carries activity."""
        self._tables.activity[group] = self._clock()
        self._tables.dirty_activity.add(group)

    def write_for_group(self, group: str, entries: list[records.Entry]) -> None:
        """Mark `group` active and append `entries`; if the write is refused, a group
        that held no state is not left marked."""
        had_state = group in self._tables.activity
        self.mark_active(group)  # before encoding: the record carries the activity
        try:
            self.append_request(entries)
        except (ValueError, TypeError):
            if not had_state:
                del self._tables.activity[group]
                self._tables.dirty_activity.discard(group)
            raise
