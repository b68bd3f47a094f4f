"""Start-up of the state store: replay the durable log into the in-memory tables.

`StoreReplay` is a mixin of `coordinator.store.state_store.StateStore` (like
`coordinator.store.maintenance.StoreMaintenance`); the tables and the log it
fills are the store's. The live table API (writes, reads, sync) is in
`state_store`.

Protocol of `load()` (called once, by the owner thread; the server answers
LOAD_IN_PROGRESS to every request until it returns):

1. Open the log (`durable_log.SegmentLog.open`): take the directory lock,
   delete leftovers of an unfinished compaction, then hand every record of the
   newest segment, in order, to `on_record` (`coordinator.store.log.recovery`).
2. `on_record` decodes the payload (`coordinator.store.records`, versions 1 and 2)
   and applies its entries in order (`_apply`): control variables, registry
   entries, members and documents, a `null` value being a tombstone; a
   version-1 whole-group value replaces the group's member set. One record
   holds all entries of one request, so a request is replayed all or nothing.
   The live writes apply their entries with the same `_apply`, so memory after
   a write equals memory after replaying it. A payload that does not decode
   raises ValueError: recovery refuses to start (a CRC-valid record is never a
   torn write), unless the operator asked to cut the log
   (`truncate_corrupt`, see `log_recovery`).
3. A record that decodes but cannot be applied (for example a negative
   offset) is not a torn write: `LogError` stops start-up and nothing is
   truncated, because truncating acknowledged data for what may be a bug here
   would lose it for good.
4. Activity times come from the `act` field of the records (the newest wins).
   A group that holds state but has no recorded activity counts as active now;
   activity of groups that no longer hold state is dropped, so `_activity`
   holds exactly the groups with state.
5. The counters that drive compaction (entries and records in the segment) are
   set, and `LoadReport` says what was replayed and how long it took.
"""

from __future__ import annotations

import bisect
import json
import logging
import time
from typing import Any, NamedTuple

import attrs

from coordinator.store import records
from coordinator.store.log.frame import LogError

log = logging.getLogger(__name__)


@attrs.frozen
class LoadReport:
    records: int
    entries: int
    bytes: int
    seconds: float
    truncated_bytes: int


class RegistryEntry(NamedTuple):
    """A registry value. A tuple of ints and strings, so the cyclic GC untracks it
    (a million-entry state must not give every full collection work to do)."""

    region_index: int
    members: tuple[str, ...]  # sorted

    def has(self, member: str) -> bool:
        i = bisect.bisect_left(self.members, member)
        return i < len(self.members) and self.members[i] == member

    def value(self) -> dict[str, Any]:
        return {"region_index": self.region_index, "members": list(self.members)}


class StoreReplay:
    """Mixin: needs the attributes StateStore.__init__ sets."""

    def load(self) -> LoadReport:
        """Replay the log into the tables; detect, report and truncate a torn tail."""
        if self.loaded or self._closed:
            raise RuntimeError("StateStore.load() may be called once, before close()")
        t0 = time.perf_counter()
        entries = 0

        def on_record(offset: int, payload: memoryview) -> None:
            nonlocal entries
            _ts, act, items = records.decode(payload)  # ValueError = undecodable (see log_recovery)
            try:
                for entry in items:
                    entries += self._apply(entry)
                for group, at in act.items():
                    if at > self._activity.get(group, 0.0):
                        self._activity[group] = float(at)
            except (ValueError, TypeError) as exc:
                # Not a torn write (the CRC matched and the shape is valid): refuse to
                # truncate acknowledged data because of what may be a bug here.
                raise LogError(f"record at byte {offset} of {self._log.path} cannot be applied: {exc}") from exc

        recovery = self._log.open(on_record, truncate_corrupt=self.truncate_corrupt)
        self._compact_soon = recovery.oversize_records > 0
        # Groups with state but no recorded activity count as active now; activity of
        # groups that no longer hold state is dropped.
        now, known = self._clock(), self._known_groups()
        self._activity = {g: self._activity.get(g, now) for g in known}
        self._log_entries = entries
        self._log_records = recovery.records
        self._truncated = recovery.truncated_bytes
        self._load_seconds = time.perf_counter() - t0
        self.loaded = True
        report = LoadReport(recovery.records, entries, recovery.bytes, self._load_seconds, recovery.truncated_bytes)
        log.info(
            "loaded %s: %d records, %d entries, %d bytes in %.3f s (%d control variables, %d groups, "
            "%d truncated bytes)",
            recovery.path, report.records, report.entries, report.bytes, report.seconds,
            len(self._control), len(self._groups), report.truncated_bytes,
        )
        return report

    def _apply(self, entry: list) -> int:
        """Apply one decoded log entry to the tables; returns its keyed-entry count."""
        kind = entry[0]
        if kind == records.CONTROL:
            _, group, topic, partitions, offsets = entry
            self._control.set_many(group, topic, partitions, offsets)
            return len(partitions)
        if kind == records.MEMBER:
            _, group, member, present = entry
            self._apply_member(group, member, present is not None)
            return 1
        if kind == records.REGISTRY:
            _, group, index = entry
            current = self._groups.get(group)
            if index is None:
                if current is not None:
                    self._member_count -= len(current.members)
                    del self._groups[group]
            else:
                self._groups[group] = RegistryEntry(index, current.members if current is not None else ())
            return 1
        if kind == records.GROUP:  # version 1: the whole value
            _, group, value = entry
            current = self._groups.pop(group, None)
            if current is not None:
                self._member_count -= len(current.members)
            if value is not None:
                members = tuple(sorted(set(value["members"])))
                self._groups[group] = RegistryEntry(value["region_index"], members)
                self._member_count += len(members)
            return 1
        _, namespace, key, value = entry
        if value is None:
            docs = self._docs.get(namespace)
            if docs is not None:
                docs.pop(key, None)
                if not docs:
                    del self._docs[namespace]
        else:
            self._docs.setdefault(namespace, {})[key] = json.dumps(value, separators=(",", ":"))
        return 1

    def _apply_member(self, group: str, member: str, present: bool) -> None:
        current = self._groups.get(group)
        if current is None:
            raise ValueError(f"member {member!r} of group {group!r}, which has no registry entry")
        members = current.members
        i = bisect.bisect_left(members, member)
        found = i < len(members) and members[i] == member
        if present and not found:
            members = (*members[:i], member, *members[i:])
            self._member_count += 1
        elif not present and found:
            members = members[:i] + members[i + 1 :]
            self._member_count -= 1
        else:
            return
        self._groups[group] = RegistryEntry(current.region_index, members)

    def _known_groups(self) -> set[str]:
        return set(self._groups) | set(self._control.groups())
