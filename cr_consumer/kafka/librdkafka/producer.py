"""librdkafka's transactional producer (confluent-kafka) as the Kafka sink uses it, every call
bounded (``cr_consumer/kafka/producer.py``: the seam, ``TransactionalWriter``).

librdkafka writes a transaction's records faster than kafka-python (BENCHMARKS.md), but has no
call for the producer id and epoch another process needs to end the transaction when this one
is gone. They are in every record batch the producer writes, so
``prepared`` reads them back from the log: one Fetch of the batch at the transaction's first
offset in one of its partitions (``coordinator/kafka/raw_batches.py``), once per producer.
Invariant that makes once enough: a producer's id and epoch change only at its
``init_transactions`` (at its construction) or when librdkafka bumps the epoch after an abortable
error, and any error fails the sink's interval, after which the reset closes the producer.

1. Construction: ``Producer`` with the checked properties mapped to librdkafka's names
   (``properties.librdkafka_producer_config``; librdkafka refuses a name it does not know
   here), the transactional id, idempotence and ``acks=all``; then ``init_transactions``
   bounded by ``max.block.ms``; a producer that fails it is closed.
2. ``send_many`` (one topic per transaction): ``produce`` with a delivery callback (served by
   ``poll`` and ``flush`` on the calling thread): it keeps the first failure and each
   partition's first offset (an idempotent producer delivers a partition's records in order). A full local queue (``BufferError``) is
   polled for room, at most ``max.block.ms``; ``bound`` serves the callbacks waiting.
3. ``flush`` (bounded; ``TimeoutError`` naming the records left); ``outcome``; ``prepared``.
4. ``commit`` / ``abort``: librdkafka's own, bounded; a refusal or a timeout is
   ``TransactionEndError``.
5. ``close``: the queued and in-flight records purged, then a flush bounded by the timeout (it
   returns at once after the purge) before the producer is dropped.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from coordinator.kafka.raw_batches import PartitionReader, RawReadError
from coordinator.kafka.raw_requests import RawClient, TransactionEndError
from coordinator.protocol.region.transactions import PreparedTxn, TxnPartition
from cr_consumer.kafka.librdkafka.properties import librdkafka_producer_config
from cr_consumer.kafka.producer import OutRecord, SendOutcome
from cr_consumer.kafka.property_rules import int_property

#: ``max.block.ms`` unless given (kafka-python's default): step 1's and step 2's bound.
DEFAULT_MAX_BLOCK_MS = 60_000
#: Pause between two polls for room in a full local queue (step 2).
ROOM_POLL_S = 0.005
#: Bound of reading the producer id and epoch back (step 3): one Fetch and its metadata.
IDS_READ_TIMEOUT_S = 30.0


class LibrdkafkaTransactionalProducer:
    """Steps 1-5 of the module docstring; ``settings`` are the raw client's (bootstrap,
    security), for reading the producer id and epoch back."""

    def __init__(
        self,
        bootstrap: str,
        properties: Mapping[str, object],
        transactional_id: str,
        settings: Mapping[str, Any],
    ) -> None:
        cfg = librdkafka_producer_config(properties)
        cfg.update(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": transactional_id,
                "enable.idempotence": True,
                "acks": "all",
            }
        )
        self.transactional_id = transactional_id
        self._block_s = int_property(properties, "max.block.ms", DEFAULT_MAX_BLOCK_MS) / 1000
        self._settings = settings
        self._ids: tuple[int, int] | None = None  # (producer id, epoch), read once (step 3)
        self._sent = 0
        self._delivered = 0
        self._failed = 0
        self._error: BaseException | None = None
        self._topic: str | None = None  # the open transaction's
        self._first: dict[int, int] = {}  # the open transaction's first offset per partition
        try:
            self._producer = Producer(cfg)
        except KafkaException as exc:
            raise ValueError(f"Kafka sink: librdkafka refuses the producer settings: {exc}") from None
        self._produce = self._producer.produce
        try:
            self._producer.init_transactions(self._block_s)
        except BaseException:
            self.close(0.0)
            raise

    def begin(self) -> None:
        self._producer.begin_transaction()
        self._sent = self._delivered = self._failed = 0
        self._error = None
        self._topic = None
        self._first = {}

    def send_many(self, topic: str, records: Sequence[OutRecord]) -> None:
        """Step 2 (one topic per transaction: the sink's)."""
        if topic != self._topic:
            self._one_topic(topic)
        produce, delivered = self._produce, self._on_delivery
        for key, value, headers, partition in records:
            # -1: librdkafka's partitioner picks; confluent-kafka's headers are a list of
            # (str, str | bytes | None): the same pairs
            args = (topic, value, key, -1 if partition is None else partition)
            sent_headers = cast("list[tuple[str, str | bytes | None]]", headers)
            try:
                produce(*args, on_delivery=delivered, headers=sent_headers)
            except BufferError:
                self._send_when_room(args, sent_headers)
            self._sent += 1

    def _one_topic(self, topic: str) -> None:
        if self._topic is not None:
            raise ValueError(f"{self.transactional_id}: one topic per transaction ({self._topic}), not {topic}")
        self._topic = topic

    def _send_when_room(
        self,
        args: tuple[str, bytes | None, bytes | None, int],
        headers: list[tuple[str, str | bytes | None]],
    ) -> None:
        """Step 2's wait for room in a full queue, at most ``max.block.ms``."""
        deadline = time.monotonic() + self._block_s
        while True:
            self._producer.poll(ROOM_POLL_S)
            try:
                self._produce(*args, on_delivery=self._on_delivery, headers=headers)
                return
            except BufferError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{self.transactional_id}: the producer's queue stayed full for {self._block_s:g}s"
                    ) from None

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            self._delivered += 1
            partition = message.partition()
            if partition not in self._first:
                offset = message.offset()
                if partition is None or offset is None:
                    self._delivered -= 1
                    self._fail(RuntimeError(f"{self.transactional_id}: a delivery report without its position"))
                else:
                    self._first[partition] = offset
            return
        self._fail(KafkaException(error))

    def _fail(self, error: BaseException) -> None:
        self._failed += 1
        if self._error is None:
            self._error = error

    def bound(self, timeout_s: float) -> None:
        """Step 2: serve the delivery callbacks waiting (the queue's bound is librdkafka's own)."""
        self._producer.poll(0)

    def outcome(self) -> SendOutcome:
        unanswered = self._sent - self._delivered - self._failed
        partitions: tuple[TxnPartition, ...] = ()
        if self._error is None and unanswered == 0:
            topic = self._topic or ""
            partitions = tuple(TxnPartition(topic, p, o) for p, o in sorted(self._first.items()))
        return SendOutcome(self._sent, unanswered, self._error, partitions)

    def flush(self, timeout_s: float) -> None:
        left = self._producer.flush(timeout_s)
        if left:
            raise TimeoutError(f"{self.transactional_id}: {left} records unacknowledged after {timeout_s:g}s")

    def prepared(self, partitions: tuple[TxnPartition, ...]) -> PreparedTxn:
        """Step 3 (``partitions``: the outcome's, at least one: a transaction with records)."""
        if self._ids is None:
            self._ids = self._read_ids(partitions[0])
        producer_id, epoch = self._ids
        return PreparedTxn(self.transactional_id, producer_id, epoch, partitions)

    def _read_ids(self, where: TxnPartition) -> tuple[int, int]:
        with RawClient(self._settings, time.monotonic() + IDS_READ_TIMEOUT_S) as client:
            batches, _ = PartitionReader(client, where.topic, where.partition, with_records=False).fetch(
                where.first_offset
            )
        batch = next((b for b in batches if b.base_offset <= where.first_offset <= b.last_offset), None)
        if batch is None or not batch.transactional:
            raise RawReadError(
                f"{self.transactional_id}: no transactional batch at {where.topic}[{where.partition}]@"
                f"{where.first_offset} to read the producer id and epoch from"
            )
        return batch.producer_id, batch.producer_epoch

    def commit(self, timeout_s: float, what: str) -> None:
        """Step 4."""
        try:
            self._producer.commit_transaction(timeout_s)
        except KafkaException as exc:
            raise TransactionEndError(f"{what}: the commit failed: {exc}") from None

    def abort(self, timeout_s: float, what: str) -> None:
        """Step 4's abort of the producer's own open transaction."""
        try:
            self._producer.abort_transaction(timeout_s)
        except KafkaException as exc:
            raise TransactionEndError(f"{what}: the abort failed: {exc}") from None

    def close(self, timeout_s: float) -> None:
        """Step 5."""
        self._producer.purge(in_queue=True, in_flight=True, blocking=False)
        self._producer.flush(max(timeout_s, 0.0))


__all__ = ["LibrdkafkaTransactionalProducer"]
