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

During a handover the commits are sent by the client while it holds the
rebalance instead (``handover.py``).
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import TypeVar

from cr_consumer.kafka.client import ClientTimeout, KafkaClient, TopicPartition

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


__all__ = [
    "CALL_MARGIN_S",
    "COMMIT_TIMEOUT_S",
    "CallRequest",
    "CallTimedOut",
    "CommitRequest",
    "CommitTimedOut",
    "MemberFailed",
    "claimed",
    "fail_all",
    "serve_calls",
    "serve_commits",
]
