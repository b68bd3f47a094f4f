"""In-memory table of control variables: (group, topic, partition) -> initial offset.

Budget: at most 64 bytes per group/topic/partition/offset entry, with the
strings interned and a compact lookup structure. A dict of
(group, topic, partition) tuples costs ~100-200 bytes per entry in CPython, so
the table is two levels of dicts ending in packed offsets::

    group -> topic -> bytearray of native int64 offsets indexed by partition (-1 = absent)

Sparse topics: a (group, topic) stays dense only while its buffer has at most
``DENSE_SLACK + DENSE_FACTOR * live entries`` slots; a write that would grow it
beyond that turns it into a dict ``partition -> offset`` (~100 bytes per
entry). So memory is bounded by the entries actually stored, whatever the
partition numbers: at most ``8 * DENSE_FACTOR`` bytes of buffer per live entry
plus ``8 * DENSE_SLACK`` per (group, topic), or ~100 bytes per entry when
sparse. A request entry costs at least 9 bytes on the wire (``["t",0,0],``),
so the table grows by at most ~20 bytes per request byte for entries and a few
hundred bytes per new (group, topic) name (measured:
tests/coordinator/server/test_coordinator_limits.py).

Group and topic names are interned (`sys.intern`), so a topic name shared by
many groups is stored once. A (group, topic) with P partitions costs 8 bytes
per partition slot plus one bytearray header (~60 bytes), which is ~10 bytes
per entry at 100 partitions per topic; the table is least compact with very
few, or very sparse, partitions per (group, topic) (see BENCHMARKS.md).

Why bytearray and not array('q'): a bytearray is not tracked by the cyclic
garbage collector, and neither is a dict holding only bytearrays, so a table of
a million entries adds one tracked object, not hundreds of thousands, and a
full GC collection never pauses the server loop to scan it. Offsets are read
and written through `memoryview(buf).cast("q")` (released before the buffer is
ever resized) or `struct` for single items.

Live counts: the table keeps the number of live entries of every (group,
topic) and of every group, updated by each write with the delta it made, so
that `group_count` (asked by every put's limit check) and the density check of
a growing buffer cost O(1), not a scan of the group's buffers (O(entries) per
request would make writing a large group quadratic). They are ints in dicts
of str keys, untracked by the collector like the buffers. A write that raises
part-way recounts its (group, topic) from the buffer, so the counts stay exact.

Thread use: the owner thread mutates; the compaction thread reads a
`snapshot()`. The snapshot is a copy of the group level only (one C-level dict
copy, ~1 ms per 100,000 groups); the per-group topic dicts are shared
copy-on-write: until `release_snapshot()`, the owner copies a group's topic
dict before it adds or removes a topic there, so the compaction thread never
iterates a dict that changes size. The offset buffers are shared as they are:
the compaction thread copies each with one C call (`array("q", buf)`, under
the GIL), so it sees each buffer either before or after any given write; the
log records appended after the snapshot are replayed after the snapshot, so
either view gives the right result.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterator
from types import TracebackType

#: A dense buffer may have this many slots beyond DENSE_FACTOR per live entry.
DENSE_SLACK = 16
#: Slots per live entry a dense buffer may have (bounds memory per stored entry).
DENSE_FACTOR = 4

ABSENT = -1
_ABSENT_BYTES = struct.pack("=q", ABSENT)
_ITEM = struct.Struct("=q")
MAX_OFFSET = (1 << 63) - 1

#: A (group, topic)'s offsets: dense (bytearray indexed by partition) or sparse.
Offsets = bytearray | dict[int, int]
Snapshot = dict[str, dict[str, Offsets]]


class ControlTable:
    def __init__(self) -> None:
        self._groups: dict[str, dict[str, Offsets]] = {}
        self.count = 0  # live entries
        # Invariants (owner thread only; the compaction thread never reads them, so they
        # are not copy-on-write): _topic_live[g][t] == _live(_groups[g][t]) for every
        # (g, t) of the table, _group_live[g] == their sum over g's topics, and both
        # hold exactly the groups and topics of `_groups`.
        self._topic_live: dict[str, dict[str, int]] = {}
        self._group_live: dict[str, int] = {}
        # While a snapshot is out: groups whose topic dict was copied since (owned
        # again). None = no snapshot. Tracking the copied ones, not the shared ones,
        # makes starting a snapshot O(1) beyond the group-level dict copy.
        self._copied: set[str] | None = None
        # While a snapshot is out: sparse (group, topic) dicts copied since (owned again).
        self._copied_sparse: set[tuple[str, str]] = set()

    def __len__(self) -> int:
        return self.count

    def groups(self) -> list[str]:
        return list(self._groups)

    def has_group(self, group: str) -> bool:
        return group in self._groups

    def get(self, group: str, topic: str, partition: int) -> int | None:
        topics = self._groups.get(group)
        buf = topics.get(topic) if topics else None
        if buf is None:
            return None
        if isinstance(buf, dict):
            return buf.get(partition)
        if (partition + 1) * 8 > len(buf):
            return None
        value = _ITEM.unpack_from(buf, partition * 8)[0]
        return None if value == ABSENT else value

    def reads(self, group: str) -> GroupReads:
        """Point reads of many entries of ``group`` (see `GroupReads`); close it before the
        next write."""
        return GroupReads(self._groups.get(group))

    def group_items(self, group: str) -> dict[tuple[str, int], int]:
        out: dict[tuple[str, int], int] = {}
        for topic, buf in self._groups.get(group, {}).items():
            for partition, offset in _items(buf):
                out[(topic, partition)] = offset
        return out

    def group_count(self, group: str) -> int:
        return self._group_live.get(group, 0)

    def _own(self, group: str) -> dict[str, Offsets]:
        """The group's topic dict, copied first if a snapshot shares it (copy-on-write)."""
        topics = self._groups[group]
        if self._copied is not None and group not in self._copied:
            topics = self._groups[group] = dict(topics)
            self._copied.add(group)
        return topics

    def _own_sparse(self, group: str, topic: str, sparse: dict[int, int]) -> dict[int, int]:
        """A sparse dict the owner may change: copied first if a snapshot shares it."""
        if self._copied is None or (group, topic) in self._copied_sparse:
            return sparse
        self._copied_sparse.add((group, topic))
        owned = self._own(group)[topic] = dict(sparse)
        return owned

    def _buffer(self, group: str, topic: str, slots: int, adding: int) -> Offsets:
        """The (group, topic) offsets, created or grown to at least `slots` partitions;
        sparse instead when that many slots would exceed the density bound for the
        live entries after `adding` new ones."""
        topics = self._groups.get(group)
        if topics is None:
            group = sys.intern(group)
            topics = self._groups[group] = {}
            self._topic_live[group] = {}
            self._group_live[group] = 0
        buf = topics.get(topic)
        if buf is None:
            topic = sys.intern(topic)
            buf = self._own(group)[topic] = bytearray()
            self._topic_live[group][topic] = 0
        if isinstance(buf, dict):
            return self._own_sparse(group, topic, buf)
        if len(buf) < slots * 8:
            if slots > DENSE_SLACK + DENSE_FACTOR * (self._topic_live[group][topic] + adding):
                sparse = dict(_items(buf))
                self._own(group)[topic] = sparse
                if self._copied is not None:
                    self._copied_sparse.add((group, topic))
                return sparse
            buf += _ABSENT_BYTES * (slots - len(buf) // 8)
        return buf

    def set_many(self, group: str, topic: str, partitions: list[int], offsets: list[int | None]) -> None:
        """Apply entries as written in the log: set, or delete where the offset is None.

        Raises ValueError for values that cannot be stored (bad log content).
        """
        if not partitions:
            return
        try:
            if min(partitions) < 0:
                raise ValueError(f"negative partition in {group}/{topic}")
            tombstones = None in offsets
            if tombstones:
                top = max((p for p, o in zip(partitions, offsets) if o is not None), default=-1)
                if top < 0 and topic not in self._groups.get(group, {}):
                    return  # only deletes of a topic that does not exist
            else:
                top = max(partitions)
            adding = sum(1 for o in offsets if o is not None)
            buf = self._buffer(group, topic, top + 1, adding)
        except (TypeError, OverflowError) as exc:
            raise ValueError(f"bad control variable for {group}/{topic}: {exc}") from exc
        try:
            if isinstance(buf, dict):
                delta = self._set_sparse(buf, partitions, offsets)
            else:
                delta = self._set_dense(buf, partitions, offsets)
        except (TypeError, OverflowError, ValueError) as exc:
            # Entries before the bad one were set: count what the buffer holds.
            self._add_live(group, topic, _live(buf) - self._topic_live[group][topic])
            if isinstance(exc, ValueError):
                raise
            raise ValueError(f"bad control variable for {group}/{topic}: {exc}") from exc
        self._add_live(group, topic, delta)
        if tombstones and self._topic_live[group][topic] == 0:
            topics = self._own(group)
            del topics[topic]
            del self._topic_live[group][topic]
            if not topics:
                del self._groups[group]
                del self._topic_live[group]
                del self._group_live[group]

    def _add_live(self, group: str, topic: str, delta: int) -> None:
        """``delta`` entries of (group, topic) became live (negative: were deleted)."""
        self._topic_live[group][topic] += delta
        self._group_live[group] += delta
        self.count += delta

    @staticmethod
    def _set_sparse(buf: dict[int, int], partitions: list[int], offsets: list[int | None]) -> int:
        delta = 0
        for partition, offset in zip(partitions, offsets):
            if offset is None:
                if buf.pop(partition, None) is not None:
                    delta -= 1
            else:
                if type(offset) is not int or not 0 <= offset <= MAX_OFFSET:
                    raise ValueError(f"offset {offset!r:.40} of partition {partition} is out of range")
                if partition not in buf:
                    delta += 1
                buf[partition] = offset
        return delta

    @staticmethod
    def _set_dense(buf: bytearray, partitions: list[int], offsets: list[int | None]) -> int:
        slots, delta = len(buf) // 8, 0
        with memoryview(buf) as raw, raw.cast("q") as view:
            for partition, offset in zip(partitions, offsets):
                if offset is None:
                    if partition < slots and view[partition] != ABSENT:
                        view[partition] = ABSENT
                        delta -= 1
                elif offset < 0:
                    raise ValueError(f"negative offset {offset} of partition {partition}")
                else:
                    if view[partition] == ABSENT:
                        delta += 1
                    view[partition] = offset
        return delta

    def snapshot(self) -> Snapshot:
        """Copy of the group level; topic dicts and sparse dicts shared copy-on-write
        until `release_snapshot()`, offset buffers shared (see the module docstring)."""
        if self._copied is not None:
            raise RuntimeError("a snapshot is already in use")
        self._copied = set()
        self._copied_sparse = set()
        return dict(self._groups)

    def release_snapshot(self) -> None:
        """The snapshot's reader is done: stop copying on write."""
        self._copied = None
        self._copied_sparse = set()


#: One topic's offsets as `GroupReads.topic` gives them: (dense view, its slots, sparse dict).
TopicReads = tuple[memoryview, int, dict[int, int] | None]
#: The dense view of a topic without a buffer: no slots (shared, never released).
_NO_SLOTS = memoryview(b"").cast("q")
_NO_TOPIC: TopicReads = (_NO_SLOTS, 0, None)


class GroupReads:
    """Point reads of one group's entries between two writes (the put path reads one
    entry per requested partition: a `get` per entry looks the topic up every time).

    1. ``topic(t)`` gives ``(dense, slots, sparse)``, looked up once per topic:
       the offset of partition ``p`` is ``dense[p]`` when ``p < slots`` (ABSENT
       there: none), else ``sparse.get(p)`` when ``sparse`` is not None, else
       none. The caller inlines that in its loop.
    2. ``close()`` (or the end of a ``with`` block) releases the views. It must
       come before the next write: a buffer with a view cannot be resized
       (BufferError), and a write may resize it.
    """

    #: A topic with nothing stored (what a loop reads before its first topic).
    nothing: TopicReads = _NO_TOPIC

    def __init__(self, topics: dict[str, Offsets] | None) -> None:
        self._topics = topics
        self._open: dict[str, TopicReads] = {}
        self._views: list[memoryview] = []

    def topic(self, topic: str) -> TopicReads:
        found = self._open.get(topic)
        if found is not None:
            return found
        buf = self._topics.get(topic) if self._topics else None
        if buf is None:
            found = _NO_TOPIC
        elif isinstance(buf, dict):
            found = (_NO_SLOTS, 0, buf)
        else:
            raw = memoryview(buf)
            view = raw.cast("q")
            self._views += (view, raw)  # released in this order: the cast first
            found = (view, len(view), None)
        self._open[topic] = found
        return found

    def close(self) -> None:
        for view in self._views:
            view.release()
        self._views.clear()
        self._open.clear()

    def __enter__(self) -> GroupReads:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _items(buf: Offsets) -> list[tuple[int, int]]:
    """(partition, offset) of the live entries, in partition order (one consistent copy)."""
    if isinstance(buf, dict):
        return sorted(buf.items())
    return [(p, o) for p, o in enumerate(array("q", buf)) if o != ABSENT]


def _live(buf: Offsets) -> int:
    if isinstance(buf, dict):
        return len(buf)
    arr = array("q", buf)
    return len(arr) - arr.count(ABSENT)


def iter_snapshot(snap: Snapshot, max_entries: int) -> Iterator[tuple[str, str, list[int], list[int]]]:
    """(group, topic, partitions, offsets) chunks of at most max_entries live entries."""
    for group, topics in snap.items():
        for topic, shared in topics.items():
            items = _items(shared)  # one C-level copy: consistent
            for i in range(0, len(items), max_entries):
                chunk = items[i : i + max_entries]
                yield group, topic, [p for p, _ in chunk], [o for _, o in chunk]
