"""The ends the planner handed to Spark, shared with the threads that read them.

The planner's thread hands ends; the members' threads ask what a handover
waits for, the notice thread and ``close()`` ask whether an end may be
committed, the metrics endpoint's thread reads the planned positions. One
lock orders all of it:

1. An end is handed only inside :meth:`HandedEnds.handing` (the lock held), so
   a plan and a revocation are ordered (ownership step 5 in ``planner.py``):
   a member records a revocation, then asks :meth:`HandedEnds.planned` under
   the same lock; the planner reads the assignment inside ``handing`` and
   leaves out of the batch a partition revoked before.
2. :meth:`HandedEnds.planned`: the positions of the last end handed (what a
   revoked partition's handover waits to see committed).
3. :meth:`HandedEnds.was_handed`: the end is one of the last ``HANDED_KEPT``
   handed, the only ones a sink-commit notice or Spark's commit log may commit
   (any local process can reach the notice socket).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from cr_consumer.spark.offsets import SourceOffset, TopicPartitionKey

#: Ends handed to Spark that a sink-commit notice (or Spark's commit log at close) may
#: name: a notice comes ~0.1 s after its batch, when at most a batch or two more are planned.
HANDED_KEPT = 8


class HandedEnds:
    """The last end handed (planned or replayed) and the recent ones (the module's steps)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: SourceOffset | None = None
        self._recent: collections.deque[SourceOffset] = collections.deque(maxlen=HANDED_KEPT)

    @contextmanager
    def handing(self) -> Iterator[Callable[[SourceOffset], None]]:
        """Step 1: hold the lock; the function yielded hands an end to Spark."""
        with self._lock:
            yield self._hand

    def _hand(self, end: SourceOffset) -> None:
        self._last = end
        if not self._recent or self._recent[-1] != end:
            self._recent.append(end)

    def planned(self) -> dict[TopicPartitionKey, int]:
        """Step 2: the positions of the last end handed (empty before the first)."""
        with self._lock:
            return self._last.positions if self._last is not None else {}

    def is_last(self, end: SourceOffset) -> bool:
        """``end`` is the last end handed."""
        with self._lock:
            return self._last is not None and self._last == end

    def was_handed(self, end: SourceOffset) -> bool:
        """Step 3."""
        with self._lock:
            return end in self._recent


__all__ = ["HANDED_KEPT", "HandedEnds"]
