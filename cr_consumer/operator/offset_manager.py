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
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

from cr_consumer.kafka.client import TopicPartition


class OffsetManager:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offsets: dict[TopicPartition, int | None] = {}

    def set_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        """Keep exactly ``partitions``; new ones have no offset until set."""
        with self._lock:
            new = {tp: self._offsets.get(tp) for tp in partitions}
            self._offsets = new

    def set(self, tp: TopicPartition, next_offset: int) -> None:
        """Set after a seek or a position read-back (event thread)."""
        with self._lock:
            if tp in self._offsets:
                self._offsets[tp] = next_offset

    def set_many(self, offsets: Mapping[TopicPartition, int]) -> None:
        with self._lock:
            for tp, off in offsets.items():
                if tp in self._offsets:
                    self._offsets[tp] = off

    def update(self, tp: TopicPartition, next_offset: int) -> None:
        """Record that every record before ``next_offset`` was submitted."""
        with self._lock:
            if tp in self._offsets:
                self._offsets[tp] = next_offset

    def snapshot(self) -> dict[TopicPartition, int]:
        """Known offsets of the assigned partitions (consistent copy)."""
        with self._lock:
            return {tp: off for tp, off in self._offsets.items() if off is not None}

    def assigned(self) -> list[TopicPartition]:
        with self._lock:
            return list(self._offsets)

    def get(self, tp: TopicPartition) -> int | None:
        with self._lock:
            return self._offsets.get(tp)

    def __len__(self) -> int:
        return len(self._offsets)


__all__ = ["OffsetManager"]
