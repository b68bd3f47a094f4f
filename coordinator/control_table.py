"""In-memory table of control variables: (group, topic, partition) -> initial offset.

Seed 002 asks for no more than 64 bytes per group/topic/partition/offset entry
"assuming the strings are interned and a compact lookup structure". A dict of
(group, topic, partition) tuples costs ~200 bytes per entry in CPython, so the
table is two levels of dicts ending in a packed array::

    group -> topic -> array('q') of offsets indexed by partition (-1 = absent)

Group and topic names are interned (`sys.intern`), so a topic name shared by
many groups is stored once. A (group, topic) with P partitions costs 8 bytes
per partition slot plus one array header (~80 bytes), which is ~9 bytes per
entry at 100 partitions per topic; the table is least compact with very few,
or very sparse, partitions per (group, topic) (see BENCHMARKS.md).

Thread use: the owner thread mutates; the compaction thread reads a
`snapshot()`. The snapshot is a copy of the group level only (one C-level dict
copy, ~1 ms per 100,000 groups); the per-group topic dicts are shared
copy-on-write: until `release_snapshot()`, the owner copies a group's topic
dict before it adds or removes a topic there, so the compaction thread never
iterates a dict that changes size. Arrays are shared as they are: they are only
modified in place by single C-level operations (item set, frombytes), and the
compaction thread copies each with one `tobytes()` call, so it sees each array
either before or after a given write; the log records appended after the
snapshot are replayed after the snapshot, so either view gives the right result.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterator

ABSENT = -1
_ABSENT_BYTES = b"\xff" * 8  # array('q') item -1
MAX_OFFSET = (1 << 63) - 1

Snapshot = dict[str, dict[str, array]]


class ControlTable:
    def __init__(self) -> None:
        self._groups: dict[str, dict[str, array]] = {}
        self.count = 0  # live entries
        # While a snapshot is out: groups whose topic dict was copied since (owned
        # again). None = no snapshot. Tracking the copied ones, not the shared ones,
        # makes starting a snapshot O(1) beyond the group-level dict copy.
        self._copied: set[str] | None = None

    def __len__(self) -> int:
        return self.count

    def groups(self) -> list[str]:
        return list(self._groups)

    def has_group(self, group: str) -> bool:
        return group in self._groups

    def get(self, group: str, topic: str, partition: int) -> int | None:
        arr = self._groups.get(group, {}).get(topic)
        if arr is None or partition >= len(arr):
            return None
        value = arr[partition]
        return None if value == ABSENT else value

    def group_items(self, group: str) -> dict[tuple[str, int], int]:
        out: dict[tuple[str, int], int] = {}
        for topic, arr in self._groups.get(group, {}).items():
            for partition, offset in enumerate(arr):
                if offset != ABSENT:
                    out[(topic, partition)] = offset
        return out

    def group_count(self, group: str) -> int:
        return sum(len(arr) - arr.count(ABSENT) for arr in self._groups.get(group, {}).values())

    def _own(self, group: str) -> dict[str, array]:
        """The group's topic dict, copied first if a snapshot shares it (copy-on-write)."""
        topics = self._groups[group]
        if self._copied is not None and group not in self._copied:
            topics = self._groups[group] = dict(topics)
            self._copied.add(group)
        return topics

    def _array(self, group: str, topic: str, size: int) -> array:
        topics = self._groups.get(group)
        if topics is None:
            topics = self._groups[sys.intern(group)] = {}
        arr = topics.get(topic)
        if arr is None:
            arr = self._own(group)[sys.intern(topic)] = array("q")
        if len(arr) < size:
            arr.frombytes(_ABSENT_BYTES * (size - len(arr)))
        return arr

    def set_many(self, group: str, topic: str, partitions: list[int], offsets: list[int | None]) -> None:
        """Apply entries as written in the log: set, or delete where the offset is None.

        Raises ValueError for values that cannot be stored (bad log content).
        """
        if not partitions:
            return
        try:
            if min(partitions) < 0:
                raise ValueError(f"negative partition in {group}/{topic}")
            if None not in offsets:
                if min(offsets) < 0:
                    raise ValueError(f"negative offset in {group}/{topic}")
                arr = self._array(group, topic, max(partitions) + 1)
                added = 0
                for partition, offset in zip(partitions, offsets):
                    if arr[partition] == ABSENT:
                        added += 1
                    arr[partition] = offset
                self.count += added
                return
            puts = [p for p, o in zip(partitions, offsets) if o is not None]
            if not puts and topic not in self._groups.get(group, {}):
                return
            arr = self._array(group, topic, max(puts, default=-1) + 1)
            before, size = arr.count(ABSENT), len(arr)
            for partition, offset in zip(partitions, offsets):
                if offset is None:
                    if partition < size:
                        arr[partition] = ABSENT
                elif offset < 0:
                    raise ValueError(f"negative offset in {group}/{topic}")
                else:
                    arr[partition] = offset
            after = arr.count(ABSENT)
            self.count += before - after
            if after == len(arr):
                topics = self._own(group)
                del topics[topic]
                if not topics:
                    del self._groups[group]
        except (TypeError, OverflowError) as exc:
            raise ValueError(f"bad control variable for {group}/{topic}: {exc}") from exc

    def put_if_absent(self, group: str, topic: str, partition: int, offset: int) -> tuple[int, bool]:
        """(effective offset, True if this call stored it)."""
        arr = self._array(group, topic, partition + 1)
        current = arr[partition]
        if current != ABSENT:
            return current, False
        arr[partition] = offset
        self.count += 1
        return offset, True

    def drop_group(self, group: str) -> list[tuple[str, list[int]]]:
        """Remove every control variable of `group`; returns (topic, partitions) removed."""
        topics = self._groups.pop(group, None)
        if not topics:
            return []
        removed = []
        for topic, arr in topics.items():
            partitions = [p for p, o in enumerate(arr) if o != ABSENT]
            self.count -= len(partitions)
            removed.append((topic, partitions))
        return removed

    def snapshot(self) -> Snapshot:
        """Copy of the group level; topic dicts shared copy-on-write until
        `release_snapshot()`, arrays shared (see the module docstring)."""
        if self._copied is not None:
            raise RuntimeError("a snapshot is already in use")
        self._copied = set()
        return dict(self._groups)

    def release_snapshot(self) -> None:
        """The snapshot's reader is done: stop copying on write."""
        self._copied = None


def iter_snapshot(
    snap: Snapshot, max_entries: int
) -> Iterator[tuple[str, str, list[int], list[int]]]:
    """(group, topic, partitions, offsets) chunks of at most max_entries live entries."""
    for group, topics in snap.items():
        for topic, shared in topics.items():
            arr = array("q", shared.tobytes())  # one C call: a consistent copy
            partitions = [p for p, o in enumerate(arr) if o != ABSENT]
            for i in range(0, len(partitions), max_entries):
                chunk = partitions[i : i + max_entries]
                yield group, topic, chunk, [arr[p] for p in chunk]
