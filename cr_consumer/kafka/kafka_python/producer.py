"""kafka-python's transactional producer as the Kafka sink uses it, every call bounded
(``cr_consumer/kafka/producer.py``: the seam; ``TransactionalWriter``).

kafka-python keeps the producer id and epoch another process needs to end the sink's
transaction (``transactions.end_prepared``) in its transaction manager, where ``prepared``
reads them.

1. :func:`producer_config`: kafka-python keyword arguments from dotted properties (checked
   before by ``property_rules.check_producer_properties``), with the transactional id, acks all,
   idempotence and the sink's bounds.
2. :class:`TransactionalProducer`: a ``KafkaProducer`` and its ``init_transactions`` (which fences the
   transactional id's previous epoch and aborts its open transaction), bounded by
   ``max.block.ms``.
3. ``send`` keeps each record's future and adds no callback: a callback per record costs the
   sending thread a closure and two registrations, and the producer's sender thread a call per
   acknowledged record, while the GIL is shared. After ``flush``, ``outcome`` reads the
   transaction's futures at once (C-level scans): how many are unanswered, the first failure,
   and each partition's first offset. ``prepared``: the producer's id and epoch (kafka-python
   keeps them in its private transaction manager) and where the transaction's records start, as
   the protocol's ``PreparedTxn``.
4. ``commit`` (``abort``): commit (abort) the open transaction, waiting at
   most ``timeout_s``.
   ``KafkaProducer.commit_transaction()`` waits without a bound, and a fenced producer on the
   test broker has its connection dropped instead of an answer, after which kafka-python
   reconnects for ever: the commit is started on the transaction manager and its result waited
   for with a timeout instead (``TransactionEndError`` on timeout or refusal).
5. ``close``: close without committing or waiting for unsent records (a forced
   close of the sender), bounded: the sink never needs them at a close (an interval not
   prepared is aborted, by the sink or a fence, and replayed), and a fenced producer's sends
   would be retried for ever.

The bounded commit, abort and forced close are `coordinator.kafka.bounded_producer`'s (the
coordinator's log writer needs them too); the one private field read here
(``_transaction_manager``, for the producer id and epoch) stays inside this package, like
``compat.py``'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any

from kafka import KafkaProducer
from kafka.producer.future import FutureRecordMetadata

from coordinator.kafka.bounded_producer import end_transaction, force_close
from coordinator.kafka.raw_requests import TransactionEndError
from coordinator.protocol.region.transactions import PreparedTxn, TxnPartition
from cr_consumer.kafka.kafka_python.properties import RENAMED
from cr_consumer.kafka.producer import OutRecord, SendOutcome

#: Sends of the open transaction that may be unanswered before ``bound`` waits: kafka-python 3
#: has no ``buffer.memory``, so without it the sink's producer would take records as fast as
#: the pipeline makes them, its memory unbounded, and the flush inside a checkpoint's stopped
#: flow would have to send them all. About a second of kafka-python's transactional rate.
MAX_UNANSWERED = 20_000

#: kafka-python's producer settings (keyword names).
PRODUCER_SETTINGS: frozenset[str] = frozenset(KafkaProducer.DEFAULT_CONFIG)


def producer_name(key: str) -> str:
    """kafka-python's keyword name of the dotted producer property ``key`` (librdkafka's security
    spellings mapped, as for the consumer)."""
    return RENAMED.get(key, key).replace(".", "_")


def producer_default(key: str) -> object | None:
    """kafka-python's default of the dotted producer property ``key`` (None: no such setting)."""
    default: object | None = KafkaProducer.DEFAULT_CONFIG.get(producer_name(key))
    return default


def producer_config(
    bootstrap: str, properties: Mapping[str, object], transactional_id: str, defaults: Mapping[str, object]
) -> dict[str, Any]:
    """Step 1: ``defaults`` (dotted) under ``properties`` (dotted), then what a transaction needs."""
    cfg: dict[str, Any] = {producer_name(k): v for k, v in {**defaults, **properties}.items()}
    cfg.update(
        bootstrap_servers=bootstrap,
        transactional_id=transactional_id,
        enable_idempotence=True,
        acks="all",
    )
    return cfg


_IS_DONE = attrgetter("is_done")
_EXCEPTION = attrgetter("exception")
_VALUE = attrgetter("value")
_TOPIC_PARTITION = attrgetter("topic_partition")
_OFFSET = attrgetter("offset")


def _read(sent: list[FutureRecordMetadata]) -> SendOutcome:
    answered = sum(map(_IS_DONE, sent))
    error = next(filter(None, map(_EXCEPTION, sent)), None)
    if answered != len(sent) or error is not None:
        return SendOutcome(len(sent), len(sent) - answered, error, ())
    # Every send succeeded. An idempotent producer writes a partition's records in send order
    # (its retries keep the order), so the first send to a partition has the partition's
    # lowest offset: read in reverse, the dict keeps each partition's first.
    metas = list(map(_VALUE, reversed(sent)))
    first = dict(zip(map(_TOPIC_PARTITION, metas), map(_OFFSET, metas), strict=True))
    return SendOutcome(len(sent), 0, None, tuple(TxnPartition(t, p, o) for (t, p), o in sorted(first.items())))


def _combine(earlier: SendOutcome, later: SendOutcome) -> SendOutcome:
    """Two runs of sends in send order as one: the first error, each partition's first offset."""
    error = earlier.error or later.error
    unanswered = earlier.unanswered + later.unanswered
    partitions: tuple[TxnPartition, ...] = ()
    if error is None and unanswered == 0:
        first = {(p.topic, p.partition): p.first_offset for p in later.partitions}
        first.update({(p.topic, p.partition): p.first_offset for p in earlier.partitions})
        partitions = tuple(TxnPartition(t, p, o) for (t, p), o in sorted(first.items()))
    return SendOutcome(earlier.sent + later.sent, unanswered, error, partitions)


class TransactionalProducer:
    """Steps 2-5 on one kafka-python ``KafkaProducer``: the only object outside this package
    sees (the Kafka sink)."""

    def __init__(self, config: Mapping[str, Any], max_unanswered: int = MAX_UNANSWERED) -> None:
        """Step 2 (``max_block_ms`` bounds ``init_transactions``; a producer that fails it is closed)."""
        # The open transaction's sends in send order (step 3), at most 2 * max_unanswered after
        # ``bound``; written by the sending thread, read by ``outcome`` under the caller's
        # serialisation. ``_folded``: the answered sends ``bound`` took off its front.
        self._sent: list[FutureRecordMetadata] = []
        self._folded = SendOutcome(0, 0, None, ())
        self._max_unanswered = max_unanswered
        self._producer = KafkaProducer(**config)
        try:
            self._producer.init_transactions()
        except BaseException:
            self.close(0.0)
            raise

    def begin(self) -> None:
        self._producer.begin_transaction()
        self._sent = []
        self._folded = SendOutcome(0, 0, None, ())

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]],
        partition: int | None,
    ) -> None:
        """One record into the open transaction (``max_block_ms`` bounds its wait for the topic's
        metadata; ``bound`` bounds how many sends wait unanswered)."""
        self._sent.append(self._producer.send(topic, value=value, key=key, headers=headers, partition=partition))

    def send_many(self, topic: str, records: Sequence[OutRecord]) -> None:
        """``send`` of each record to ``topic``, in order."""
        send, sent = self._producer.send, self._sent.append
        for key, value, headers, partition in records:
            sent(send(topic, value=value, key=key, headers=headers, partition=partition))

    def bound(self, timeout_s: float) -> None:
        """Keep at most ``max_unanswered`` sends waiting: past twice that, wait (each wait
        bounded by ``timeout_s``; a failed send raises) until every send but the last
        ``max_unanswered`` is answered, and fold those into one summary, so that the kept
        futures stay bounded too."""
        sent = self._sent
        if len(sent) <= 2 * self._max_unanswered:
            return
        cut = len(sent) - self._max_unanswered
        front = sent[:cut]
        for future in front:
            if not future.is_done:
                future.get(timeout=timeout_s)  # KafkaTimeoutError past it; the send's error if it failed
        self._folded = _combine(self._folded, _read(front))
        self._sent = sent[cut:]

    @property
    def kept(self) -> int:
        """Sends whose futures are kept (not folded yet): at most ``2 * max_unanswered`` after ``bound``."""
        return len(self._sent)

    def outcome(self) -> SendOutcome:
        """Step 3's reading of the open transaction's sends (meant after a flush: a send still
        unanswered counts in ``unanswered`` and not in ``partitions``)."""
        return _combine(self._folded, _read(self._sent))

    def flush(self, timeout_s: float) -> None:
        """Every send answered, within ``timeout_s`` (``KafkaTimeoutError`` past it)."""
        self._producer.flush(timeout=timeout_s)

    def prepared(self, partitions: tuple[TxnPartition, ...]) -> PreparedTxn:
        """Step 3."""
        manager = self._producer._transaction_manager
        if manager is None:
            raise ValueError("the producer has no transactional.id")
        ids = manager.producer_id_and_epoch
        return PreparedTxn(str(manager.transactional_id), int(ids.producer_id), int(ids.epoch), partitions)

    def commit(self, timeout_s: float, what: str) -> None:
        """Step 4."""
        self._end(timeout_s, what, commit=True)

    def abort(self, timeout_s: float, what: str) -> None:
        """Step 4's bound for an abort of the producer's own open transaction."""
        self._end(timeout_s, what, commit=False)

    def _end(self, timeout_s: float, what: str, *, commit: bool) -> None:
        end_transaction(self._producer, timeout_s, what, commit=commit)

    def close(self, timeout_s: float) -> None:
        """Step 5: the sender is stopped at once (its unsent records failed), then the producer closed."""
        if not force_close(self._producer, timeout_s):
            raise TransactionEndError(
                f"the producer's sender thread did not stop within {timeout_s:g}s of a forced close"
            )


__all__ = [
    "PRODUCER_SETTINGS",
    "TransactionalProducer",
    "producer_config",
    "producer_default",
    "producer_name",
]
