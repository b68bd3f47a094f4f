"""Requests to a group member's thread (:class:`~cr_consumer.spark.membership.GroupMember`):
its Kafka client is not thread-safe, so a call or a commit from another
thread is a ``(payload, Future)`` pair on a queue that the member's thread serves.

1. A caller puts the pair on the member's queue and waits on the future,
   bounded (a commit by :data:`COMMIT_TIMEOUT_S` + :data:`CALL_MARGIN_S`); past
   the bound it cancels the future and raises :class:`CallTimedOut` or
   :class:`CommitTimedOut`.
2. The member's thread, between two polls, takes every waiting request
   (:func:`claimed`): a future its caller cancelled is skipped, every other
   one gets exactly one result or exception (:func:`serve_calls`,
   :func:`serve_commits`: a synchronous commit bounded by COMMIT_TIMEOUT_S).
3. When the thread ends (a failure, or close), :func:`fail_all` fails what is
   left with :class:`MemberFailed`: no caller waits for a thread that is gone.

Handover (step 4 of ``membership.py``): when partitions are revoked, the
rebalance is held until the query has committed every range it planned for
them, so their next owner starts where this query ends.
:class:`HandoverHold` is the member's :class:`~cr_consumer.kafka.client.RebalanceHold`
(the client seam holds the rebalance and keeps the group's heartbeats going;
kafka-python does it on its IO loop, ``HoldingListener`` in ``cr_consumer/kafka/kafka_python/listeners.py``):

4. The member's revocation callback records the revocation and calls
   :meth:`HandoverHold.begin`.
5. Until ``handed_over(revoked)`` (the planner: every range planned for them
   committed) is true, the client sends the commits queued meanwhile
   (:meth:`HandoverHold.commits`, each settled through its caller's future:
   the member's thread is inside ``poll`` until the rebalance completes) and
   checks again every :data:`HANDOVER_POLL_S`; the hold ends early when the
   member is closing.
6. Past :data:`HANDOVER_TIMEOUT_S`, :class:`HandoverTimedOut` (kept as the
   member's failure: it fails the query). The rebalance, and so the next
   owner's assignment, completes only when the hold is released.
"""

from __future__ import annotations

import functools
import logging
import queue
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import TypeVar

from cr_consumer.kafka.client import ClientTimeout, HeldCommit, KafkaClient, KafkaClientError, TopicPartition

log = logging.getLogger(__name__)

#: Bound on one synchronous commit inside kafka-python: it retries a commit for
#: as long as the broker answers with a retriable error (a rebalance in
#: progress, a deleted topic), and the member's thread then stops polling.
COMMIT_TIMEOUT_S = 5.0
#: Extra wait for a queued call beyond its own bound (one poll in progress).
CALL_MARGIN_S = 2.0


class MemberFailed(RuntimeError):
    """The member's consumer thread died; the query must fail."""


class CallTimedOut(TimeoutError):
    """A call on the member's thread did not complete in time."""


class CommitTimedOut(CallTimedOut):
    """An offset commit did not complete within COMMIT_TIMEOUT_S."""


P = TypeVar("P")  # what a request carries to the member's thread
F = TypeVar("F")  # what its future answers
#: A commit for the member's thread: the offsets (next offset to read) and its caller's future.
CommitRequest = tuple[dict[TopicPartition, int], Future[None]]
#: A call for the member's thread: the function of its client and its caller's future.
CallRequest = tuple[Callable[[KafkaClient], object], Future[object]]


def claimed(requests: queue.Queue[tuple[P, Future[F]]]) -> Iterator[tuple[P, Future[F]]]:
    """Step 2: take every waiting ``(payload, future)`` off ``requests`` and yield
    those whose future the caller has not cancelled, now marked running: each
    yielded future gets exactly one result or exception from the loop body."""
    while True:
        try:
            payload, fut = requests.get_nowait()
        except queue.Empty:
            return
        if fut.set_running_or_notify_cancel():
            yield payload, fut


def serve_commits(client: KafkaClient, commits: queue.Queue[CommitRequest], name: str) -> None:
    """Step 2 for commits: each one synchronous, bounded by COMMIT_TIMEOUT_S."""
    for offsets, fut in claimed(commits):
        try:
            client.commit(offsets, int(COMMIT_TIMEOUT_S * 1000))
        except ClientTimeout:
            fut.set_exception(
                CommitTimedOut(
                    f"{name}: committing {len(offsets)} partitions did not complete within {COMMIT_TIMEOUT_S}s"
                )
            )
        except BaseException as exc:  # noqa: BLE001 - handed to the caller through the future
            fut.set_exception(exc)
        else:
            fut.set_result(None)


def serve_calls(client: KafkaClient, calls: queue.Queue[CallRequest]) -> None:
    """Step 2 for calls: ``fn(client)``, its result or exception to the future."""
    for fn, fut in claimed(calls):
        try:
            fut.set_result(fn(client))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller through the future
            fut.set_exception(exc)


def fail_all(requests: queue.Queue[tuple[P, Future[F]]], why: str) -> None:
    """Step 3: fail every request left with MemberFailed(``why``)."""
    for _, fut in claimed(requests):
        fut.set_exception(MemberFailed(why))


#: Bound on holding a rebalance until the ranges planned for the revoked
#: partitions are committed (Spark finishes the batch in flight and commits it
#: after planning the next). Below the group's rebalance timeout
#: (max.poll.interval.ms, 300 s by default), so the member is not evicted.
HANDOVER_TIMEOUT_S = 60.0
#: Step 5's wait between two checks of the planner's commits (the join poll's length).
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
    """Steps 4-6 for one member (see the module docstring)."""

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
        """Step 4: a revocation; the hold's timeout starts now."""
        self._started = time.monotonic()

    def released(self, partitions: frozenset[TopicPartition]) -> bool:
        """Steps 5-6: True once ``partitions`` are handed over, or the member is closing."""
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
        """Step 5: the commits queued for the member, each settled through its caller's future."""
        return [
            HeldCommit(offsets, functools.partial(_settle, fut, self._name)) for offsets, fut in claimed(self._commits)
        ]


def partition_names(tps: Iterable[TopicPartition]) -> list[str]:
    return sorted(f"{tp.topic}[{tp.partition}]" for tp in tps)


__all__ = [
    "CALL_MARGIN_S",
    "COMMIT_TIMEOUT_S",
    "HANDOVER_TIMEOUT_S",
    "CallRequest",
    "CallTimedOut",
    "CommitRequest",
    "CommitTimedOut",
    "HandoverHold",
    "HandoverTimedOut",
    "MemberFailed",
    "claimed",
    "fail_all",
    "partition_names",
    "serve_calls",
    "serve_commits",
]
