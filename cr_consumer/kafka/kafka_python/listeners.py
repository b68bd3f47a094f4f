"""The seam's rebalance listener (and hold) as kafka-python's listeners, on its IO thread.

kafka-python runs rebalance callbacks on its IO thread while ``poll`` runs.
Without a hold, :class:`SeamListener` hands each callback to the seam's
:class:`~cr_consumer.kafka.client.RebalanceListener`.

A rebalance hold (``subscribe(..., hold=...)``) runs on that IO loop too. A
listener that blocks there stops every request of the consumer (a commit from
the polling thread fails with "Cannot block on net.run() from the IO
thread"), heartbeats included. So :class:`HoldingListener` is an
``AsyncConsumerRebalanceListener`` whose hold awaits the loop's sleep
(:func:`io_sleep`) and sends the hold's commits from the loop (the polling
thread is inside ``poll`` until the rebalance completes):

1. ``on_partitions_revoked`` / ``on_partitions_lost``: the seam listener's
   ``on_revoked`` / ``on_lost``, then, for a non-empty set, the hold.
2. Until ``hold.released(partitions)``: every commit of ``hold.commits()`` is
   sent with ``commit_async`` and awaited in steps of :data:`COMMIT_POLL_S`,
   bounded by ``hold.commit_timeout_ms`` (its outcome to the commit's ``done``);
   then one sleep of ``hold.poll_s`` on the loop.
3. ``on_partitions_assigned``: the seam listener's ``on_assigned``.

An exception of the seam listener or of the hold ends the listener call;
kafka-python logs it and completes the rebalance, so the hold's owner keeps it
itself. Like ``compat.py``, the hold uses kafka-python internals (the loop's
``KernelEvent``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener, ConsumerRebalanceListener
from kafka.net.selector import KernelEvent

from cr_consumer.kafka.client import (
    ClientTimeout,
    KafkaClientError,
    RebalanceHold,
    RebalanceListener,
    TopicPartition,
    topic_partitions,
)
from cr_consumer.kafka.kafka_python.errors import commit_error
from cr_consumer.kafka.kafka_python.partitions import commit_request

#: Step 2's wait while a commit sent from the IO loop is in flight.
COMMIT_POLL_S = 0.002


def io_sleep(delay_s: float) -> KernelEvent:
    """An awaitable pause on kafka-python's IO loop (its ``sleep`` kernel call): a
    listener awaiting it lets the loop serve heartbeats and other threads' requests."""
    return KernelEvent("_sleep", delay_s)


class SeamListener(ConsumerRebalanceListener):  # type: ignore[misc]  # kafka-python is untyped: its base class is Any
    """kafka-python's listener interface -> :class:`RebalanceListener` (IO thread)."""

    def __init__(self, listener: RebalanceListener) -> None:
        self._listener = listener

    def on_partitions_revoked(self, revoked: Iterable[KafkaTopicPartition]) -> None:
        self._listener.on_revoked(topic_partitions(revoked))

    def on_partitions_lost(self, lost: Iterable[KafkaTopicPartition]) -> None:
        self._listener.on_lost(topic_partitions(lost))

    def on_partitions_assigned(self, assigned: Iterable[KafkaTopicPartition]) -> None:
        self._listener.on_assigned(topic_partitions(assigned))


class HoldingListener(AsyncConsumerRebalanceListener):  # type: ignore[misc]  # kafka-python is untyped: its base class is Any
    """The seam's listener and hold on kafka-python's IO loop (see the module docstring)."""

    def __init__(self, consumer: KafkaConsumer, listener: RebalanceListener, hold: RebalanceHold) -> None:
        self._consumer = consumer
        self._listener = listener
        self._hold = hold

    async def on_partitions_revoked(self, revoked: Iterable[KafkaTopicPartition]) -> None:
        tps = topic_partitions(revoked)
        self._listener.on_revoked(tps)
        await self._hold_while(tps)

    async def on_partitions_lost(self, lost: Iterable[KafkaTopicPartition]) -> None:
        tps = topic_partitions(lost)
        self._listener.on_lost(tps)
        await self._hold_while(tps)

    async def on_partitions_assigned(self, assigned: Iterable[KafkaTopicPartition]) -> None:
        self._listener.on_assigned(topic_partitions(assigned))

    async def _hold_while(self, tps: frozenset[TopicPartition]) -> None:
        """Step 2."""
        if not tps:
            return
        while not self._hold.released(tps):
            for commit in self._hold.commits():
                commit.done(await self._commit(commit.offsets))
            await io_sleep(self._hold.poll_s)

    async def _commit(self, offsets: Mapping[TopicPartition, int]) -> KafkaClientError | None:
        timeout_ms = self._hold.commit_timeout_ms
        sent = self._consumer.commit_async(commit_request(offsets))
        deadline = time.monotonic() + timeout_ms / 1000
        while not sent.is_done and time.monotonic() < deadline:
            await io_sleep(COMMIT_POLL_S)
        if not sent.is_done:
            return ClientTimeout(
                f"a commit during a held rebalance not answered within {timeout_ms} ms (outcome unknown)"
            )
        if sent.failed():
            return commit_error(sent.exception)
        return None


__all__ = ["COMMIT_POLL_S", "HoldingListener", "SeamListener", "io_sleep"]
