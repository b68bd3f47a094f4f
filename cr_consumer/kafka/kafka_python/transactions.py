"""Ending a transaction that another process prepared: commit a completed checkpoint's output,
or abort an abandoned interval's, when the member that wrote it never comes back.

Kafka's own clients end only their own transaction. The protocol allows more: the transaction
coordinator accepts ``EndTxn(transactional_id, producer_id, producer_epoch, committed)`` from
any connection that names the transaction's current producer id and epoch (the test broker
does too: ``tests/kafka_clients/test_committed_reader.py``).

1. The writer, after flushing its records (every send acknowledged, the transaction still
   open), records :func:`prepared_of` its producer: transactional id, producer id and epoch, as
   versioned JSON (:meth:`PreparedTransaction.to_json`) in its checkpoint data.
2. Whoever decides (the writer itself when it lives, else a live member or the coordinator)
   calls :func:`end_prepared`: FindCoordinator for the transactional id (``key_type`` 1), then
   EndTxn to that broker, each bounded by the request timeout and the whole by ``deadline_s``.
3. An answer other than NoError raises ``TransactionEndError`` naming the transaction. A
   successor's ``init_transactions`` fences the recorded epoch: a real Kafka answers
   ``ProducerFenced`` (or ``InvalidProducerEpoch``); the test broker drops the connection
   instead, which fails the request as a connection error: raised the same way, never retried
   without bound. A repeated commit answers NoError and writes no second marker.
4. Known gap of the test broker: ``EndTxn(commit)`` of a transaction it already aborted answers
   NoError (a real Kafka answers ``InvalidTxnState``): a reader of the output
   (``raw_batches.read_committed``) shows what happened.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import attrs
from kafka import KafkaProducer
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import EndTxnRequest

from cr_consumer.kafka.kafka_python.raw_requests import RawClient, RawRequestError, error_name

#: The version of ``PreparedTransaction``'s JSON form.
PREPARED_VERSION = 1
#: FindCoordinator's key type of a transactional id.
TRANSACTION_KEY_TYPE = 1
#: An end's whole budget by default: well within any transaction timeout a broker allows
#: (Kafka's default ``transaction.max.timeout.ms`` is 15 minutes).
DEFAULT_DEADLINE_S = 30.0


class TransactionEndError(RawRequestError):
    """A prepared transaction could not be ended as asked."""


@attrs.frozen
class PreparedTransaction:
    """Step 1: what another process needs to end this transaction."""

    transactional_id: str = attrs.field(validator=attrs.validators.min_len(1))
    producer_id: int = attrs.field(validator=attrs.validators.ge(0))
    producer_epoch: int = attrs.field(validator=[attrs.validators.ge(0), attrs.validators.le(32767)])

    def to_json(self) -> dict[str, object]:
        return {
            "v": PREPARED_VERSION,
            "tid": self.transactional_id,
            "pid": self.producer_id,
            "epoch": self.producer_epoch,
        }

    @classmethod
    def from_json(cls, doc: object) -> PreparedTransaction:
        """Refuses another version, a missing field or a wrong type (ValueError)."""
        if not isinstance(doc, dict) or doc.get("v") != PREPARED_VERSION:
            raise ValueError(f"not a prepared transaction of version {PREPARED_VERSION}: {doc!r:.200}")
        tid, pid, epoch = doc.get("tid"), doc.get("pid"), doc.get("epoch")
        if not isinstance(tid, str) or type(pid) is not int or type(epoch) is not int:
            raise ValueError(f"a prepared transaction needs tid (str), pid and epoch (int): {doc!r:.200}")
        try:
            return cls(tid, pid, epoch)
        except ValueError as exc:
            raise ValueError(f"a prepared transaction out of range: {exc}") from None

    def describe(self) -> str:
        return f"transaction {self.transactional_id!r} (producer {self.producer_id}, epoch {self.producer_epoch})"


def prepared_of(producer: KafkaProducer, transactional_id: str) -> PreparedTransaction:
    """Step 1: the producer's id and epoch (kafka-python keeps them in its private transaction manager)."""
    manager = producer._transaction_manager
    if manager is None:
        raise ValueError("the producer has no transactional.id")
    ids = manager.producer_id_and_epoch
    return PreparedTransaction(transactional_id, int(ids.producer_id), int(ids.epoch))


def end_prepared(
    settings: Mapping[str, Any], txn: PreparedTransaction, *, commit: bool, deadline_s: float = DEFAULT_DEADLINE_S
) -> None:
    """Steps 2-3."""
    what = f"{'committing' if commit else 'aborting'} {txn.describe()}"
    with RawClient(settings, time.monotonic() + deadline_s) as client:
        try:
            found = client.request(
                FindCoordinatorRequest(key=txn.transactional_id, key_type=TRANSACTION_KEY_TYPE, max_version=3),
                what=what,
            )
            if found.error_code:
                raise TransactionEndError(f"{what}: no transaction coordinator ({error_name(found.error_code)})")
            answer = client.request(
                EndTxnRequest(
                    transactional_id=txn.transactional_id,
                    producer_id=txn.producer_id,
                    producer_epoch=txn.producer_epoch,
                    committed=commit,
                    max_version=3,
                ),
                int(found.node_id),
                what,
            )
        except TransactionEndError:
            raise
        except Exception as exc:  # a dropped connection (the test broker's answer to a fenced epoch), a timeout
            raise TransactionEndError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
    if answer.error_code:
        raise TransactionEndError(f"{what} refused: {error_name(answer.error_code)}")


__all__ = ["PreparedTransaction", "TransactionEndError", "end_prepared", "prepared_of"]
