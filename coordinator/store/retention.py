"""Retention: which groups' state one pass tombstones, and how it reaches the log.

1. A group whose last activity is older than `retention_s` gets every control
   variable tombstoned, and its registry entry too if no member is registered.
   Activity is every write to the group and every `touch(group)`: the services
   touch a group for each request that names it (registry, control variables,
   merges) and the region controller for each message of the region of that
   name (joins, heartbeats, acks, triggers), so a region that runs for weeks
   without a restart keeps its control variables.
2. Tombstones are packed by `records.Batcher` into records bounded by bytes and
   entries (at most `records.BATCH_ENTRIES` keyed entries); each record is
   appended first and then applied to the tables, so memory never gets ahead
   of the log.
3. The activity of groups touched since the last record is written too, and a
   group that holds no state any more leaves the activity table.

When a pass runs, and what a failed one does, is `coordinator.store.maintenance`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from coordinator.store import records
from coordinator.store.tables import StoreTables

log = logging.getLogger(__name__)


#: ``append(payload, entries)``: append one encoded record of `entries` keyed
#: entries to the log and count it (`StateStore`'s append; raises LogFailed).
Append = Callable[[bytes, int], None]


class Expiry:
    """One retention pass (steps 1 to 3): tombstone the state of groups idle since
    before `now - retention_s`, appending each record with `append`.

    The caller guarantees that the store is loaded and that nothing else uses
    `tables` during `run()`."""

    def __init__(self, tables: StoreTables, append: Append, *, clock: Callable[[], float], retention_s: float) -> None:
        self._tables = tables
        self._append = append
        self._clock = clock
        self._retention_s = retention_s

    def _tombstone(self, batcher: records.Batcher, group: str) -> tuple[int, bool] | None:
        """Add the tombstones of an idle group's control variables, and of its registry
        entry when no member is left; (control variables tombstoned, registry dropped),
        or None when the group holds nothing to drop."""
        tables = self._tables
        by_topic: dict[str, list[int]] = {}
        for topic, partition in tables.control.group_items(group):
            by_topic.setdefault(topic, []).append(partition)
        registry = tables.groups.get(group)
        drop_registry = registry is not None and not registry.members
        if not by_topic and not drop_registry:
            return None
        n = 0
        for topic, partitions in by_topic.items():
            partitions.sort()
            for i in range(0, len(partitions), records.BATCH_ENTRIES):
                chunk = partitions[i : i + records.BATCH_ENTRIES]
                batcher.add(records.control_entry(group, topic, chunk, [None] * len(chunk)))
            n += len(partitions)
        if drop_registry:
            batcher.add(records.registry_entry(group, None))
        return n, drop_registry

    def run(self, now: float) -> int:
        """Returns the number of control variables tombstoned; raises what an append raises."""
        tables = self._tables
        cutoff = now - self._retention_s
        expired = groups = 0

        def emit(payload: bytes, entries: list[records.Entry], count: int) -> None:
            self._append(payload, count)  # first: memory never gets ahead of the log
            for entry in entries:
                tables.apply(entry)

        batcher = records.Batcher(self._clock(), emit)
        idle = [(g, t) for g, t in tables.activity.items() if t < cutoff]
        # `activity` has exactly the groups that hold state (StoreTables invariant).
        for group, last in idle:
            tombstoned = self._tombstone(batcher, group)
            if tombstoned is None:
                continue  # a registered group whose control variables are gone already
            n, drop_registry = tombstoned
            groups += 1
            expired += n
            log.debug(
                "retention: group %r idle since %.0f: tombstoning %d control variables%s",
                group,
                last,
                n,
                " and its registry entry" if drop_registry else "",
            )
        # The activity of groups touched since the last record (reads, heartbeats) rides
        # on the next request's record; written here too, so that even a group that is
        # only read has its activity on disk within one expiry interval.
        carried = [(g, tables.activity[g]) for g in tables.dirty_activity if g in tables.activity]
        for group, at in carried:
            batcher.add_activity(group, at)
        # A group may span records: a crash between them leaves it idle, and the
        # next expire finishes it.
        batcher.flush()
        tables.dirty_activity.difference_update(g for g, _ in carried)
        for group, _ in idle:
            if not tables.holds_state(group):
                tables.activity.pop(group, None)
                tables.dirty_activity.discard(group)
        if groups:
            log.info(
                "retention: %d groups idle for more than %.0f s: tombstoned %d control variables in %d records",
                groups,
                self._retention_s,
                expired,
                batcher.records,
            )
        return expired
