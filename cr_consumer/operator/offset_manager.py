"""The offset manager: (topic, partition) -> next offset to fetch.

Only assigned partitions have an entry. Writers:

* the process thread, once per submitted batch per partition (last offset + 1),
  while it holds the region permit;
* the event thread, when the assignment changes and after every seek (it reads
  the positions back).

Reader: the event thread at drain, after the permit has been blocked (so no
batch is half-submitted). A lock makes every read a consistent snapshot and
makes an update for a partition that was revoked meanwhile a no-op; it is taken
once per batch, never per record.

Interval starts (the continuity fence, coordinator/region/continuity.py): each
partition also keeps where this member's current interval of it began, the
``from`` of its checkpoint answer:

1. a seek (a reset, an assignment: :meth:`set`, :meth:`set_many`) starts a new
   interval at the position seeked to;
2. a checkpoint answer ends the interval (:meth:`rebase`): the next one starts
   where it ended, the offset the checkpoint holds for this member's claim
   (a checkpoint that does not complete is followed by a reset, which seeks: 1);
3. submitting records (:meth:`update`) moves only the offset, never the start.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

import attrs

from cr_consumer.kafka.client import TopicPartition


@attrs.frozen
class Interval:
    """One partition's interval: ``start`` where it began (None: no seek set it),
    ``end`` the next offset to read."""

    start: int | None
    end: int


class OffsetManager:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offsets: dict[TopicPartition, int | None] = {}
        # where the current interval of each partition began (module docstring); guarded by _lock
        self._starts: dict[TopicPartition, int] = {}

    def set_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        """Keep exactly ``partitions``; new ones have no offset until set."""
        with self._lock:
            new = {tp: self._offsets.get(tp) for tp in partitions}
            self._offsets = new
            self._starts = {tp: off for tp, off in self._starts.items() if tp in new}

    def set(self, tp: TopicPartition, next_offset: int) -> None:
        """Set after a seek or a position read-back (event thread)."""
        with self._lock:
            if tp in self._offsets:
                self._offsets[tp] = next_offset
                self._starts[tp] = next_offset

    def set_many(self, offsets: Mapping[TopicPartition, int]) -> None:
        with self._lock:
            for tp, off in offsets.items():
                if tp in self._offsets:
                    self._offsets[tp] = off
                    self._starts[tp] = off

    def update(self, tp: TopicPartition, next_offset: int) -> None:
        """Record that every record before ``next_offset`` was submitted."""
        with self._lock:
            if tp in self._offsets:
                self._offsets[tp] = next_offset

    def snapshot(self) -> dict[TopicPartition, int]:
        """Known offsets of the assigned partitions (consistent copy)."""
        with self._lock:
            return {tp: off for tp, off in self._offsets.items() if off is not None}

    def intervals(self) -> dict[TopicPartition, Interval]:
        """The current interval of each assigned partition with a known offset (consistent copy)."""
        with self._lock:
            return {tp: Interval(self._starts.get(tp), off) for tp, off in self._offsets.items() if off is not None}

    def rebase(self, ended: Mapping[TopicPartition, Interval]) -> None:
        """A checkpoint answered with ``ended``: each partition's next interval
        starts at its end, unless the partition moved since (revoked, or seeked:
        its start or offset differ; the seek started its interval already)."""
        with self._lock:
            for tp, interval in ended.items():
                if tp in self._offsets and self._starts.get(tp) == interval.start and self._offsets[tp] == interval.end:
                    self._starts[tp] = interval.end

    def assigned(self) -> list[TopicPartition]:
        with self._lock:
            return list(self._offsets)

    def get(self, tp: TopicPartition) -> int | None:
        with self._lock:
            return self._offsets.get(tp)

    def __len__(self) -> int:
        return len(self._offsets)


__all__ = ["Interval", "OffsetManager"]
