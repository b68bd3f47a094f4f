"""The bounded queue between the event thread and the process thread.

Records cross it in batches: one :class:`Batch` per partition per poll. The
queue counts records, not batches, for its capacity. It never blocks the
producer (the event thread): instead the event thread checks
:meth:`BatchQueue.free` before each poll and pauses all assigned partitions
while free space < max.poll.records, so the queue overshoots its capacity by
at most one poll. The consumer (the process thread) waits with a timeout.

Every batch carries the reset epoch at which it was polled; a reset increments
the epoch and clears the queue, and the process thread drops any batch of an
older epoch that it still holds.
"""

from __future__ import annotations

import threading
from collections import deque

from cr_consumer.kafka.client import KafkaRecord, TopicPartition


class Batch:
    """Records of one partition from one poll (:class:`~cr_consumer.kafka.client.KafkaRecord`)
    and ``end``, the partition's next offset once they are submitted: past the last record, or
    further when the source dropped what follows it (aborted records and control markers,
    ``kafka_python/aborted_records.py``), which may leave no record at all."""

    __slots__ = ("_end", "epoch", "records", "tp")

    def __init__(self, epoch: int, tp: TopicPartition, records: list[KafkaRecord], end: int | None = None) -> None:
        if end is None and not records:
            raise ValueError(f"a batch of {tp} without records needs its end")
        self.epoch = epoch
        self.tp = tp
        self.records = records
        self._end = end

    @property
    def end(self) -> int:
        """The given end, else the last record's offset + 1 (read by the process thread only)."""
        return self._end if self._end is not None else self.records[-1].offset + 1

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Batch(epoch={self.epoch}, tp={self.tp}, n={len(self.records)}, end={self.end})"


class BatchQueue:
    #: Records queued: written under ``_cond`` by the event thread (put) and the
    #: process thread (get); read without it by :meth:`free` and ``len`` (the
    #: backpressure check and metrics, where a value one batch old is fine).
    _count: int

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity  # OperatorConfig checked it: at least max_poll_records
        self._items: deque[Batch] = deque()
        self._count = 0
        self._cond = threading.Condition(threading.Lock())

    def put_many(self, batches: list[Batch]) -> None:
        if not batches:
            return
        with self._cond:
            for b in batches:
                self._items.append(b)
                self._count += len(b.records)
            self._cond.notify()

    def get(self, timeout: float) -> Batch | None:
        """The oldest batch, or None after ``timeout`` seconds."""
        with self._cond:
            if not self._items and not self._cond.wait_for(lambda: self._items, timeout):
                return None
            b = self._items.popleft()
            self._count -= len(b.records)
            return b

    def clear(self) -> int:
        """Drop everything; return the number of records dropped."""
        with self._cond:
            n = self._count
            self._items.clear()
            self._count = 0
            return n

    def free(self) -> int:
        return self.capacity - self._count

    def __len__(self) -> int:
        """Records queued."""
        return self._count


__all__ = ["Batch", "BatchQueue"]
