"""librdkafka's rebalance callbacks -> the seam's :class:`~cr_consumer.kafka.client.RebalanceListener`.

:class:`RebalanceCallbacks` is what the client gives librdkafka's ``subscribe``
(``on_assign``, ``on_revoke``, ``on_lost``); librdkafka calls them inside
``poll``, on the polling thread. It decides:

1. An assignment: the listener's ``on_assigned`` runs with seeks and pauses of
   the new partitions collected; the partitions it did not seek start at their
   absolute start offset, looked up within :data:`ASSIGN_LOOKUP_TIMEOUT_MS`;
   librdkafka assigns them there (``assign``, or ``incremental_assign`` for a
   cooperative protocol), then pauses what the listener paused
   (:class:`~cr_consumer.kafka.librdkafka.partitions.PartitionStates` keeps the
   positions and pauses).
2. A failed assignment (the listener or the lookup raised) stays failed: the
   exception propagates out of the poll and nothing after it runs (no lookup
   after a failed listener, no assignment from this callback). confluent-kafka
   then assigns the partitions at their logical offsets itself, so
   :meth:`RebalanceCallbacks.check` raises at every later poll: none of their
   records is ever handed out (the operator fails and is restarted: never a
   silent skip).
3. A revocation or a loss: the listener's ``on_revoked`` / ``on_lost``, then,
   whatever it raised, ``unassign`` (or ``incremental_unassign``).
4. Once :meth:`RebalanceCallbacks.mute` is called (the client is closing) the
   listener is no longer called; the assignments still are made.

Every callback marks the group member id as possibly changed
(:attr:`RebalanceCallbacks.member_changed`) and sets whether a rebalance is in
progress (:attr:`RebalanceCallbacks.rebalancing`); both are read on the polling thread.
"""

from __future__ import annotations

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition

from cr_consumer.kafka.client import (
    KafkaClientError,
    RebalanceListener,
    RebalanceProtocol,
    TopicPartition,
    topic_partitions,
)
from cr_consumer.kafka.librdkafka.offsets import OffsetLookups, ck
from cr_consumer.kafka.librdkafka.partitions import PartitionStates

#: Bound on resolving the absolute start offsets of an assignment
#: (OffsetLookups.start_offsets: OffsetFetch, then ListOffsets): a broker
#: that does not answer fails the poll instead of stalling the group join
#: (whose rebalance timeout is max.poll.interval.ms, minutes).
ASSIGN_LOOKUP_TIMEOUT_MS = 10_000


class RebalanceCallbacks:
    """librdkafka's rebalance callbacks of one client (see the module docstring)."""

    def __init__(self, parts: PartitionStates, lookups: OffsetLookups, protocol: RebalanceProtocol) -> None:
        self._parts = parts
        self._lookups = lookups
        self._incremental = protocol is RebalanceProtocol.COOPERATIVE
        self._listener: RebalanceListener | None = None
        self._muted = False
        self._rebalancing = True
        #: The first failure of an assignment (step 2).
        self._failure: BaseException | None = None
        self._member_changed = True

    @property
    def member_changed(self) -> bool:
        """True once a callback ran since :meth:`member_id_read` (the group member
        id may have changed: the client asks librdkafka again)."""
        return self._member_changed

    def member_id_read(self) -> None:
        """The client read the member id: :attr:`member_changed` is False until the next callback."""
        self._member_changed = False

    @property
    def rebalancing(self) -> bool:
        """True from a subscription or a revocation until the next assignment."""
        return self._rebalancing

    def listen(self, listener: RebalanceListener) -> None:
        """Call ``listener`` from now on (a subscription: a rebalance is to come)."""
        self._listener = listener
        self._rebalancing = True

    def mute(self) -> None:
        """Step 4."""
        self._muted = True

    def check(self) -> None:
        """Step 2: KafkaClientError once an assignment failed."""
        if self._failure is not None:
            raise KafkaClientError(f"an assignment failed earlier: {self._failure!r}") from self._failure

    def on_assign(self, consumer: Consumer, partitions: list[CkTopicPartition]) -> None:
        """Steps 1 and 2 (librdkafka's assignment callback)."""
        self._member_changed = True
        try:
            self._assign(consumer, topic_partitions(partitions))
        except BaseException as exc:
            if self._failure is None:
                self._failure = exc
            raise

    def _assign(self, consumer: Consumer, tps: frozenset[TopicPartition]) -> None:
        """Step 1."""
        self._parts.begin_assign(tps)
        try:
            if self._listener is not None and not self._muted:
                self._listener.on_assigned(tps)
        finally:
            seeks, pauses = self._parts.end_assign()
        try:
            starts = {**self._lookups.start_offsets(tps - seeks.keys(), ASSIGN_LOOKUP_TIMEOUT_MS), **seeks}
        except KafkaClientError as exc:
            raise type(exc)(
                f"assignment of {sorted(tps)}: cannot look up where the partitions start "
                f"within {ASSIGN_LOOKUP_TIMEOUT_MS} ms: {exc}"
            ) from exc
        start = [ck(tp, starts[tp]) if tp in starts else ck(tp) for tp in sorted(tps)]
        if self._incremental:
            consumer.incremental_assign(start)
        else:
            consumer.assign(start)
        if pauses:
            consumer.pause([ck(tp) for tp in sorted(pauses)])
        self._parts.assigned_at(tps, starts, pauses, incremental=self._incremental)
        self._rebalancing = False

    def on_revoke(self, consumer: Consumer, partitions: list[CkTopicPartition]) -> None:
        """Step 3, a revocation."""
        self._give_up(consumer, partitions, lost=False)

    def on_lost(self, consumer: Consumer, partitions: list[CkTopicPartition]) -> None:
        """Step 3, a loss."""
        self._give_up(consumer, partitions, lost=True)

    def _give_up(self, consumer: Consumer, partitions: list[CkTopicPartition], *, lost: bool) -> None:
        tps = topic_partitions(partitions)
        self._rebalancing = True
        self._member_changed = True
        try:
            if self._listener is not None and not self._muted:
                if lost:
                    self._listener.on_lost(tps)
                else:
                    self._listener.on_revoked(tps)
        finally:
            if self._incremental:
                consumer.incremental_unassign(partitions)
            else:
                consumer.unassign()
            self._parts.gave_up(tps, incremental=self._incremental)


__all__ = ["ASSIGN_LOOKUP_TIMEOUT_MS", "RebalanceCallbacks"]
