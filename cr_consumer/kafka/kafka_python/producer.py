"""kafka-python's transactional producer as the Kafka sink uses it, every call bounded.

kafka-python is the sink's client because it is the only one that exposes the producer id and
epoch another process needs to end the sink's transaction (``transactions.end_prepared``);
librdkafka has no public call for them and no way to resume a prepared transaction.

1. :func:`producer_config`: kafka-python keyword arguments from dotted properties (checked
   before by ``property_rules.check_producer_properties``), with the transactional id, acks all,
   idempotence and the sink's bounds.
2. :class:`TransactionalProducer`: a ``KafkaProducer`` and its ``init_transactions`` (which fences the
   transactional id's previous epoch and aborts its open transaction), bounded by
   ``max.block.ms``.
3. ``prepared``: the producer's id and epoch (kafka-python keeps them in its private
   transaction manager) and where the transaction's records start, as the protocol's
   ``PreparedTxn``.
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

The private fields used (``_transaction_manager``, ``_sender``) stay inside this package, like
``compat.py``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kafka import KafkaProducer

from coordinator.protocol.region.transactions import PreparedTxn, TxnPartition
from cr_consumer.kafka.kafka_python.client import RENAMED
from cr_consumer.kafka.kafka_python.raw_requests import RawRequestError

#: kafka-python's producer settings (keyword names).
PRODUCER_SETTINGS: frozenset[str] = frozenset(KafkaProducer.DEFAULT_CONFIG)


class TransactionEndError(RawRequestError):
    """A transaction could not be ended as asked (refused, fenced, timed out)."""


def producer_name(key: str) -> str:
    """kafka-python's keyword name of the dotted producer property ``key`` (librdkafka's security
    spellings mapped, as for the consumer)."""
    return RENAMED.get(key, key).replace(".", "_")


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


#: Called with (topic, partition, offset) when a send is acknowledged.
OnAck = Callable[[str, int, int], None]
#: Called with the error when a send fails.
OnError = Callable[[BaseException], None]


class TransactionalProducer:
    """Steps 2-5 on one kafka-python ``KafkaProducer``: the only object outside this package
    sees (the Kafka sink)."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        """Step 2 (``max_block_ms`` bounds ``init_transactions``; a producer that fails it is closed)."""
        self._producer = KafkaProducer(**config)
        try:
            self._producer.init_transactions()
        except BaseException:
            self.close(0.0)
            raise

    def begin(self) -> None:
        self._producer.begin_transaction()

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]],
        partition: int | None,
        on_ack: OnAck,
        on_error: OnError,
    ) -> None:
        """One record into the open transaction; ``max_block_ms`` bounds a wait for buffer space."""
        future = self._producer.send(topic, value=value, key=key, headers=headers, partition=partition)
        future.add_callback(lambda meta: on_ack(meta.topic, meta.partition, meta.offset))
        future.add_errback(on_error)

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
        manager = self._producer._transaction_manager
        if manager is None:
            raise ValueError("the producer has no transactional.id")
        verb = "committing" if commit else "aborting"
        try:
            result = manager.begin_commit() if commit else manager.begin_abort()
            self._producer._sender.wakeup()
            done = result.wait(timeout_ms=timeout_s * 1000)
        except Exception as exc:  # refused: fenced, or an earlier send failed the transaction
            raise TransactionEndError(f"{verb} {what} failed: {type(exc).__name__}: {exc}") from exc
        if not done:
            raise TransactionEndError(f"{verb} {what}: no answer within {timeout_s:g}s")

    def close(self, timeout_s: float) -> None:
        """Step 5: the sender is stopped at once (its unsent records failed), then the producer closed."""
        sender = self._producer._sender
        sender.force_close()
        sender.join(timeout_s)
        if sender.is_alive():
            raise TransactionEndError(
                f"the producer's sender thread did not stop within {timeout_s:g}s of a forced close"
            )
        self._producer.close(timeout=0)  # nothing left to flush: the forced close failed every unsent batch


__all__ = [
    "PRODUCER_SETTINGS",
    "OnAck",
    "OnError",
    "TransactionEndError",
    "TransactionalProducer",
    "producer_config",
    "producer_name",
]
