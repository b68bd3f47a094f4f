"""A group member's handover of revoked partitions (step 4 of
``membership.py``): the rebalance is held until the query has committed every
range it planned for them, so their next owner starts where this query ends.

:class:`HandoverHold` is the member's :class:`~cr_consumer.kafka.client.RebalanceHold`
(the client seam holds the rebalance and keeps the group's heartbeats going;
kafka-python does it on its IO loop, ``cr_consumer/kafka/kafka_python/hold.py``):

1. The member's revocation callback records the revocation and calls
   :meth:`HandoverHold.begin`.
2. Until ``handed_over(revoked)`` (the planner: every range planned for them
   committed) is true, the client sends the commits queued meanwhile
   (:meth:`HandoverHold.commits`: the member's thread is inside ``poll``
   until the rebalance completes) and checks again every
   :data:`HANDOVER_POLL_S`; the hold ends early when the member is closing.
3. Past :data:`HANDOVER_TIMEOUT_S`, :class:`HandoverTimedOut` (kept as the
   member's failure: it fails the query). The rebalance, and so the next
   owner's assignment, completes only when the hold is released.
"""

from __future__ import annotations

import functools
import logging
import queue
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future

from cr_consumer.kafka.client import ClientTimeout, HeldCommit, KafkaClientError, TopicPartition
from cr_consumer.spark.member_requests import COMMIT_TIMEOUT_S, CommitRequest, CommitTimedOut, claimed

log = logging.getLogger(__name__)

#: Bound on holding a rebalance until the ranges planned for the revoked
#: partitions are committed (Spark finishes the batch in flight and commits it
#: after planning the next). Below the group's rebalance timeout
#: (max.poll.interval.ms, 300 s by default), so the member is not evicted.
HANDOVER_TIMEOUT_S = 60.0
#: Step 2's wait between two checks of the planner's commits (the join poll's length).
HANDOVER_POLL_S = 0.01


class HandoverTimedOut(RuntimeError):
    """A revoked partition's planned ranges were not committed in time; the query fails."""


def _settle(fut: Future[None], name: str, error: KafkaClientError | None) -> None:
    """A commit sent during the hold: its outcome to its caller's future."""
    if error is None:
        fut.set_result(None)
    elif isinstance(error, ClientTimeout):
        fut.set_exception(CommitTimedOut(f"{name}: a handover commit did not complete within {COMMIT_TIMEOUT_S}s"))
    else:
        fut.set_exception(error)


class HandoverHold:
    """Steps 1-3 for one member (see the module docstring)."""

    def __init__(
        self,
        name: str,
        commits: queue.Queue[CommitRequest],
        handed_over: Callable[[], Callable[[set[TopicPartition]], bool] | None],
        stopping: Callable[[], bool],
        ended: Callable[[], None],
        failed: Callable[[BaseException], None],
    ) -> None:
        self._name = name
        self._commits = commits
        self._handed_over = handed_over  # the planner's check, once it has set one
        self._stopping = stopping
        self._ended = ended  # the hold is over (released or failed)
        self._failed = failed  # the member keeps the failure: the client drops a listener's exception
        self._started = time.monotonic()
        self.held_ms: list[float] = []  # how long each handover held its rebalance

    @property
    def poll_s(self) -> float:
        return HANDOVER_POLL_S

    @property
    def commit_timeout_ms(self) -> int:
        return int(COMMIT_TIMEOUT_S * 1000)

    def begin(self) -> None:
        """Step 1: a revocation; the hold's timeout starts now."""
        self._started = time.monotonic()

    def released(self, partitions: frozenset[TopicPartition]) -> bool:
        """Steps 2-3: True once ``partitions`` are handed over, or the member is closing."""
        try:
            done = self._released(partitions)
        except BaseException as exc:
            self._failed(exc)
            self._ended()
            raise
        if done:
            self._ended()
        return done

    def _released(self, partitions: frozenset[TopicPartition]) -> bool:
        handed_over = self._handed_over()
        if handed_over is None:
            return True
        if handed_over(set(partitions)):
            waited_ms = (time.monotonic() - self._started) * 1000
            self.held_ms.append(waited_ms)
            log.info("crkafka %s: handed over %s in %.0f ms", self._name, partition_names(partitions), waited_ms)
            return True
        if time.monotonic() > self._started + HANDOVER_TIMEOUT_S:
            raise HandoverTimedOut(
                f"{self._name}: the ranges planned for {partition_names(partitions)} were not committed within "
                f"{HANDOVER_TIMEOUT_S}s of their revocation; their next owner would read them again"
            )
        return self._stopping()

    def commits(self) -> list[HeldCommit]:
        """Step 2: the commits queued for the member, each settled through its caller's future."""
        return [
            HeldCommit(offsets, functools.partial(_settle, fut, self._name)) for offsets, fut in claimed(self._commits)
        ]


def partition_names(tps: Iterable[TopicPartition]) -> list[str]:
    return sorted(f"{tp.topic}[{tp.partition}]" for tp in tps)


__all__ = ["HANDOVER_TIMEOUT_S", "HandoverHold", "HandoverTimedOut", "partition_names"]
