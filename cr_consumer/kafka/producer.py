"""The transactional producer as the exactly-once Kafka sinks use it: the seam both clients
implement (``kafka_python/producer.py``, ``librdkafka/producer.py``; built by
``factory.make_transactional_producer``).

One producer writes one transactional id's transactions, one at a time:

1. built: the client's ``init_transactions`` (it fences the id's previous epoch and aborts its
   open transaction), bounded; a producer that fails it is closed;
2. ``begin`` a transaction, ``send_many`` records to one topic into it (bounded: a client whose
   queue is full waits for room at most its block bound), ``bound`` now and then (the client's
   own bound on records waiting for an answer);
3. ``flush`` (bounded), then ``outcome``: how many records were sent, how many have no answer
   yet, the first failure, and each partition's first offset; ``prepared``: the transaction as
   the region protocol records it (``PreparedTxn``: transactional id, producer id and epoch,
   partitions), which another process can end by those ids alone when this one is gone;
4. ``commit`` or ``abort``, bounded (``TransactionEndError`` on a timeout or a refusal);
5. ``close``, bounded, without committing or waiting for unsent records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

from coordinator.protocol.region.transactions import PreparedTxn, TxnPartition

#: One record to send: key, value, headers, partition (None: the producer's partitioner).
OutRecord = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int | None]


@attrs.frozen
class SendOutcome:
    """The open transaction's sends as step 3 reads them after a flush."""

    #: Records sent into the transaction.
    sent: int
    #: Sends with no answer yet (none after a flush that returned).
    unanswered: int
    #: The first failed send's error, if any send failed.
    error: BaseException | None
    #: Each partition written with its first record's offset, sorted.
    partitions: tuple[TxnPartition, ...]


class TransactionalWriter(Protocol):
    """Steps 2-5 of the module docstring on one client's producer."""

    def begin(self) -> None: ...

    def send_many(self, topic: str, records: Sequence[OutRecord]) -> None: ...

    def bound(self, timeout_s: float) -> None: ...

    def outcome(self) -> SendOutcome: ...

    def flush(self, timeout_s: float) -> None: ...

    def prepared(self, partitions: tuple[TxnPartition, ...]) -> PreparedTxn: ...

    def commit(self, timeout_s: float, what: str) -> None: ...

    def abort(self, timeout_s: float, what: str) -> None: ...

    def close(self, timeout_s: float) -> None: ...


__all__ = ["OutRecord", "SendOutcome", "TransactionalWriter"]
