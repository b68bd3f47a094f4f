"""What the event thread puts into the message queue, and the reset epoch that stamps it.

1. :meth:`RecordIntake.on_records` (event thread, after a poll that returned
   records): while a reset is pending, or once the operator closed or failed,
   they are dropped; the first records move the state to RECORDS_FETCHED. With
   ``crkafka.filter.aborted`` the source's own ``read_committed``
   (``cr_consumer/kafka/kafka_python/aborted_records.py``) decides every record,
   gives each batch its end and seeks a partition back to its first record of a
   transaction still open, or to a committed record its client skipped. One batch per partition is queued, stamped with the
   epoch read before the state.
2. :meth:`RecordIntake.new_epoch` (Kafka's IO thread at a revocation, the
   handler caller at a reset): the epoch goes up and the queue is cleared; the
   process thread drops any older batch it still holds (``message_queue.py``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from cr_consumer.kafka.client import KafkaClient, KafkaRecord, TopicPartition
from cr_consumer.operator.config import OperatorConfig
from cr_consumer.operator.message_queue import Batch, BatchQueue
from cr_consumer.operator.metrics import OperatorMetrics
from cr_consumer.operator.states import ClientState, ClientStateMachine

if TYPE_CHECKING:
    from cr_consumer.kafka.kafka_python.aborted_records import AbortedRecordFilter

log = logging.getLogger(__name__)
S = ClientState


def aborted_filter(config: OperatorConfig) -> AbortedRecordFilter | None:
    """The source's own filter of aborted records with ``crkafka.filter.aborted``, else None."""
    if not config.filter_aborted:
        return None
    from cr_consumer.kafka.kafka_python.aborted_records import for_consumer  # lazily: kafka is heavy

    return for_consumer(config.bootstrap_servers, config.client_properties(), f"cr-{config.operator_name}-markers")


class RecordIntake:
    """Steps 1 and 2 of the module docstring for one operator; ``aborted``: the
    source's own filter of aborted records (:func:`aborted_filter`; event thread only), or None."""

    #: Reset epoch of the batches queued now: bumped (never lowered) by a
    #: revocation (Kafka's IO thread) and a reset (the handler caller), read by
    #: the event thread (stamping batches) and the process thread (dropping
    #: older ones). No lock: any bump makes older batches stale, and two racing
    #: bumps still leave a value above every stamped batch.
    epoch: int

    def __init__(
        self,
        name: str,
        *,
        queue: BatchQueue,
        sm: ClientStateMachine,
        stats: OperatorMetrics,
        aborted: AbortedRecordFilter | None,
    ) -> None:
        self.name = name
        self._queue = queue
        self._sm = sm
        self._stats = stats
        self._aborted = aborted
        self.epoch = 0

    def on_records(self, consumer: KafkaClient, records: dict[TopicPartition, list[KafkaRecord]]) -> None:
        """Step 1."""
        epoch = self.epoch  # read before the state: a revocation in between bumps it
        state = self._sm.state
        if state is S.CR_RESET_PENDING or state is S.CLOSED or state is S.FAILED:
            self._stats.dropped_reset_pending(sum(len(r) for r in records.values()))
            return
        if state is not S.RECORDS_FETCHED:
            self._sm.to_if({S.SUBSCRIBED, S.RESET_COMPLETE}, S.RECORDS_FETCHED, "first records fetched")
        if self._aborted is None:
            self._queue.put_many([Batch(epoch, tp, recs) for tp, recs in records.items()])
            return
        filtered = self._aborted.filter(records, consumer.assignment(), epoch)
        for tp, f in filtered.items():
            if f.rewind is not None:  # records of a transaction still open: read again later
                consumer.seek(tp, f.rewind)
        self._queue.put_many([Batch(epoch, tp, f.records, f.end) for tp, f in filtered.items() if f.end is not None])

    def new_epoch(self, reason: str) -> None:
        """Step 2."""
        self.epoch += 1
        n = self._queue.clear()
        if n:
            log.info("%s: dropped %d queued records (%s)", self.name, n, reason)


__all__ = ["RecordIntake", "aborted_filter"]
