"""A group member's handover of revoked partitions (step 4 of
``membership.py``): the rebalance is held until the query has committed every
range it planned for them, so their next owner starts where this query ends.

kafka-python 3 runs rebalance listeners on its IO loop: a listener that blocks
stops every request of the consumer (a commit from the member's thread fails
with "Cannot block on net.run() from the IO thread"). So the handover waits by
awaiting the loop's sleep (:func:`io_sleep`), and serves the commits queued
meanwhile from the loop (:func:`serve_commits_on_io_loop`: the member's thread
is inside ``poll`` until the rebalance completes):

1. The listener (:class:`MemberListener`) calls the member's revoked callback,
   which records the revocation and calls :func:`hold_rebalance`.
2. Until ``handed_over(revoked)`` (the planner: every range planned for them
   committed) is true: serve the queued commits, sleep :data:`HANDOVER_POLL_S`
   on the loop; stop early when the member is closing.
3. Past :data:`HANDOVER_TIMEOUT_S`, :class:`HandoverTimedOut` (kept as the
   member's failure: it fails the query). The rebalance, and so the next
   owner's assignment, completes only when the listener returns.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Awaitable, Callable

from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener
from kafka.net.selector import KernelEvent

from cr_consumer.spark.member_requests import COMMIT_TIMEOUT_S, CommitTimedOut, claimed

#: Bound on holding a rebalance until the ranges planned for the revoked
#: partitions are committed (Spark finishes the batch in flight and commits it
#: after planning the next). Below the group's rebalance timeout
#: (max.poll.interval.ms, 300 s by default), so the member is not evicted.
HANDOVER_TIMEOUT_S = 60.0
#: Step 2's sleep between two checks of the planner's commits (the join poll's length).
HANDOVER_POLL_S = 0.01
#: Step 2's sleep while a commit sent from the IO loop is in flight.
COMMIT_POLL_S = 0.002


class HandoverTimedOut(RuntimeError):
    """A revoked partition's planned ranges were not committed in time; the query fails."""


def io_sleep(delay_s: float) -> KernelEvent:
    """An awaitable pause on kafka-python's IO loop (its ``sleep`` kernel call): a
    listener awaiting it lets the loop serve heartbeats and other threads' requests."""
    return KernelEvent("_sleep", delay_s)


class MemberListener(AsyncConsumerRebalanceListener):
    """Step 1: the member's callbacks, run on kafka-python's IO loop."""

    def __init__(self, revoked: Callable[[set[TopicPartition]], Awaitable[None]],
                 assigned: Callable[[set[TopicPartition]], None]) -> None:
        self._revoked = revoked
        self._assigned = assigned

    async def on_partitions_revoked(self, revoked):
        await self._revoked(set(revoked))

    async def on_partitions_assigned(self, assigned):
        self._assigned(set(assigned))


async def hold_rebalance(name: str, revoked: set[TopicPartition], handed_over: Callable[[set[TopicPartition]], bool],
                         serve_commits: Callable[[], Awaitable[None]], stopping: Callable[[], bool]) -> float | None:
    """Steps 2-3: the milliseconds the rebalance was held, or None when the
    member is closing (``stopping()``) before the handover completed."""
    t0 = time.monotonic()
    deadline = t0 + HANDOVER_TIMEOUT_S
    while not handed_over(revoked):
        if time.monotonic() > deadline:
            raise HandoverTimedOut(
                f"{name}: the ranges planned for {partition_names(revoked)} were not committed within "
                f"{HANDOVER_TIMEOUT_S}s of their revocation; their next owner would read them again")
        await serve_commits()
        await io_sleep(HANDOVER_POLL_S)
        if stopping():
            return None
    return (time.monotonic() - t0) * 1000


async def serve_commits_on_io_loop(consumer: KafkaConsumer, commits: queue.Queue, name: str) -> None:
    """Commits asked for during a handover, sent from the listener on the IO loop
    (the member's thread is inside ``poll`` until the rebalance completes)."""
    for meta, fut in claimed(commits):
        sent = consumer.commit_async(meta)
        deadline = time.monotonic() + COMMIT_TIMEOUT_S
        while not sent.is_done and time.monotonic() < deadline:
            await io_sleep(COMMIT_POLL_S)
        if not sent.is_done:
            fut.set_exception(CommitTimedOut(f"{name}: a handover commit did not complete within "
                                             f"{COMMIT_TIMEOUT_S}s"))
        elif sent.failed():
            fut.set_exception(sent.exception)
        else:
            fut.set_result(None)


def partition_names(tps) -> list[str]:
    return sorted(f"{tp.topic}[{tp.partition}]" for tp in tps)


__all__ = ["HANDOVER_TIMEOUT_S", "HandoverTimedOut", "MemberListener", "hold_rebalance", "io_sleep",
           "partition_names", "serve_commits_on_io_loop"]
