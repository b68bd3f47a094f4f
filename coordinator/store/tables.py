"""The state store's in-memory tables and the counters of its active segment.

`StoreTables` is what the log decides: replay (`coordinator.store.replay`)
fills it from the log at start-up, the live writes of
`coordinator.store.state_store.StateStore` and retention
(`coordinator.store.retention`) apply their entries to it after appending
them, and compaction snapshots it. Every entry goes through the one
`StoreTables.apply`, so memory after a write equals memory after replaying it.

One owner thread (the server loop) uses both classes; nothing here does I/O.
"""

from __future__ import annotations

import bisect
import json
from typing import Any, NamedTuple

import attrs

from coordinator.store import records
from coordinator.store.control_table import ControlTable


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


class StoreTables:
    """Control variables, the group registry, documents and group activity.

    Invariants (kept by the store's writes, by replay and by retention):
    - `member_count` is the sum of ``len(members)`` over `groups`;
    - once loaded, `activity` has exactly the groups that hold state (a
      registry entry or control variables): its length is the group count;
    - `dirty_activity` names the groups whose activity changed since the last
      record that carried it (a subset of `activity`'s keys, or stale names
      that are skipped).
    """

    def __init__(self) -> None:
        self.control = ControlTable()
        self.groups: dict[str, RegistryEntry] = {}
        self.member_count = 0
        self.docs: dict[str, dict[str, str]] = {}  # namespace -> key -> JSON text
        self.activity: dict[str, float] = {}  # group -> last activity (store clock)
        self.dirty_activity: set[str] = set()

    def apply(self, entry: records.Entry) -> int:
        """Apply one decoded log entry; returns its keyed-entry count.

        The caller guarantees that `entry` has the shape `records.decode`
        checks. Raises ValueError for an entry that is well formed but cannot be
        applied (a member of a group without a registry entry, an offset out of
        range); the tables are then unchanged by that entry."""
        kind = entry[0]
        if kind == records.CONTROL:
            _, group, topic, partitions, offsets = entry
            self.control.set_many(group, topic, partitions, offsets)
            return len(partitions)
        if kind == records.MEMBER:
            _, group, member, present = entry
            self._apply_member(group, member, present is not None)
            return 1
        if kind == records.REGISTRY:
            _, group, index = entry
            current = self.groups.get(group)
            if index is None:
                if current is not None:
                    self.member_count -= len(current.members)
                    del self.groups[group]
            else:
                self.groups[group] = RegistryEntry(index, current.members if current is not None else ())
            return 1
        _, namespace, key, value = entry
        if value is None:
            docs = self.docs.get(namespace)
            if docs is not None:
                docs.pop(key, None)
                if not docs:
                    del self.docs[namespace]
        else:
            self.docs.setdefault(namespace, {})[key] = json.dumps(value, separators=(",", ":"))
        return 1

    def _apply_member(self, group: str, member: str, present: bool) -> None:
        current = self.groups.get(group)
        if current is None:
            raise ValueError(f"member {member!r} of group {group!r}, which has no registry entry")
        members = current.members
        i = bisect.bisect_left(members, member)
        found = i < len(members) and members[i] == member
        if present and not found:
            members = (*members[:i], member, *members[i:])
            self.member_count += 1
        elif not present and found:
            members = members[:i] + members[i + 1 :]
            self.member_count -= 1
        else:
            return
        self.groups[group] = RegistryEntry(current.region_index, members)

    def holds_state(self, group: str) -> bool:
        return group in self.groups or self.control.has_group(group)

    def known_groups(self) -> set[str]:
        """The groups that hold state, computed from the tables (not from `activity`)."""
        return set(self.groups) | set(self.control.groups())

    def live_entries(self) -> int:
        """Keyed entries a compacted log would hold."""
        return len(self.control) + len(self.groups) + self.member_count + sum(len(d) for d in self.docs.values())


@attrs.define
class LogCounters:
    """Counts of the active segment and of appends since load; they drive compaction.

    Written by the store's appends (`StateStore`), set once by the store from
    the replay result at load, and rebased by `Maintenance` when it switches to
    a compacted segment. All on the owner thread.
    """

    entries: int = 0  # keyed entries in the active segment
    records: int = 0  # records in the active segment
    records_at_compaction: int = 0  # `records` right after the last compaction
    appended_records: int = 0  # records appended since load (monotonic)
    appended_entries: int = 0  # keyed entries appended since load (monotonic)

    def appended(self, entries: int) -> None:
        """One record of `entries` keyed entries was appended to the active segment."""
        self.entries += entries
        self.appended_entries += entries
        self.records += 1
        self.appended_records += 1
