"""Partitions held while the pipeline restores their state (a pipeline with partition-scoped
state, ``cr_consumer/runtime/pipeline/partitioned_tables.py``: its ``TableRestorer``).

The rebalancer's part (``rebalance.py``) that keeps a seeked partition from being fetched until
the state its records will be applied to is back; the member's other partitions flow meanwhile:

1. ``hold(consumer, tps)`` (event thread after a seek, or Kafka's listener: starting a restore
   and pausing are pure memory and client state): the restorer starts restoring ``tps`` in the
   background; those whose restore is not finished are paused and held; returned, so that the
   caller resumes only the others.
2. ``finished()`` (event thread, after each poll): the held partitions whose restore finished,
   done or failed, leave the hold and are returned for the caller to resume (a failed one fails
   its first batch, and the region resets).
3. ``revoked(tps)`` (Kafka's listener): they leave the hold and the restorer forgets them (their
   next owner writes their state from then on).
4. ``clear()``: a reset seeks every partition, and has dropped the restores; its seeks hold the
   partitions again (step 1).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection
from typing import Protocol

from coordinator.protocol.common.partitions import partition_label
from cr_consumer.kafka.client import KafkaClient, TopicPartition

log = logging.getLogger(__name__)


class StateRestorer(Protocol):
    """The pipeline's partition-scoped state as the source sees it."""

    def restore(self, partitions: Collection[TopicPartition]) -> None:
        """Start restoring the state of ``partitions`` in the background; returns at once."""
        ...

    def restoring(self) -> set[TopicPartition]:
        """The partitions whose restore is started and not finished."""
        ...

    def forget(self, partitions: Collection[TopicPartition]) -> None:
        """``partitions`` were revoked: drop their restores."""
        ...


class RestoreHold:
    """Steps 1-4 of the module docstring for one source (no restorer: nothing is ever held)."""

    #: The held partitions. Written under ``_lock`` on the event thread and on Kafka's IO thread
    #: (a revocation), replaced as a whole; read without the lock by the event thread's
    #: backpressure, which sees the set before or after a replacement.
    held: frozenset[TopicPartition]

    def __init__(self, name: str, restorer: StateRestorer | None) -> None:
        self.name = name
        self._restorer = restorer
        self._lock = threading.Lock()
        self.held = frozenset()

    def hold(self, consumer: KafkaClient, tps: Collection[TopicPartition]) -> set[TopicPartition]:
        """Step 1."""
        if self._restorer is None or not tps:
            return set()
        self._restorer.restore(tps)
        pending = self._restorer.restoring() & set(tps)
        if pending:
            consumer.pause(pending)
            with self._lock:
                self.held = self.held | pending
            log.info("%s: restoring the state of %s (paused meanwhile)", self.name, _labels(pending))
        return pending

    def finished(self) -> frozenset[TopicPartition]:
        """Step 2."""
        if self._restorer is None or not self.held:
            return frozenset()
        done = self.held - self._restorer.restoring()
        if done:
            with self._lock:
                self.held = self.held - done
            log.info("%s: state of %s restored: resumed", self.name, _labels(done))
        return done

    def revoked(self, tps: Collection[TopicPartition]) -> None:
        """Step 3."""
        with self._lock:
            self.held = self.held - set(tps)
        if self._restorer is not None:
            self._restorer.forget(tps)

    def clear(self) -> None:
        """Step 4."""
        with self._lock:
            self.held = frozenset()


def _labels(tps: Collection[TopicPartition]) -> list[str]:
    return sorted(partition_label(tp.topic, tp.partition) for tp in tps)


__all__ = ["RestoreHold", "StateRestorer"]
