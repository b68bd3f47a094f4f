"""The Kafka log's producers: the log topic's transactional writer and the snapshots'
idempotent producer, acks=all, every wait bounded.

Idempotence (with at most 5 requests in flight) keeps the records of one producer
in the order they were sent, without duplicates from internal retries; acks=all
makes an acknowledged record one that ``min.insync.replicas`` replicas hold.
``max_block_ms`` bounds a send that waits for metadata or buffer space and
``init_transactions``; ``request_timeout_ms`` and ``delivery_timeout_ms`` bound one
record's delivery; the callers bound their ``flush`` as well.

`LogWriter` (the log topic; one owner thread, the server loop):

1. `fence()`: ``init_transactions`` with the log's one transactional id
   (``KafkaLogSettings.transactional_id``). The broker bumps the id's epoch: every
   other producer of the id (a deposed leader) is fenced, and its open transaction
   is aborted (an ABORT marker) before this call returns. The new epoch (`epoch`) is
   the coordinator's leader epoch (``coordinator/protocol/wire/envelope.py``).
2. `write(records, timeout_s)`: one transaction: begin, send every record, flush,
   commit; returns the records' offsets only after the commit is acknowledged.
   Everything is bounded by ``timeout_s``: a fenced producer gets no answer on the
   test broker (it drops the connection; kafka-python reconnects for ever and its
   ``commit_transaction()`` has no timeout), so the commit is started on the
   transaction manager and its result waited for with the remaining time. A
   timeout, a refusal or a failed send raises `LogWriteError`; its outcome is
   unknown (the caller fail-stops).
3. `close(timeout_s)`: after a failure the sender is stopped at once (a fenced
   producer's requests would be retried for ever), else a bounded graceful close.

The bounded commit of step 2 and the forced close of step 3 are
`coordinator.kafka.bounded_producer`'s, which the member side's sink producer uses too.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kafka import KafkaProducer

from coordinator.kafka.bounded_producer import end_transaction, force_close
from coordinator.store.kafka.settings import TOPIC_MAX_MESSAGE_BYTES, KafkaLogSettings


class LogWriteError(RuntimeError):
    """A write of the log failed or got no answer in time; its outcome is unknown."""


def log_producer(settings: KafkaLogSettings, *, timeout_s: float, transactional_id: str | None = None) -> KafkaProducer:
    """A producer whose deliveries end (acknowledged or failed) within `timeout_s`."""
    timeout_ms = int(timeout_s * 1000)
    return KafkaProducer(
        bootstrap_servers=settings.bootstrap.split(","),
        client_id="cr-coordinator-log",
        acks="all",
        enable_idempotence=True,
        transactional_id=transactional_id,
        max_in_flight_requests_per_connection=5,
        linger_ms=0,
        max_request_size=TOPIC_MAX_MESSAGE_BYTES,
        request_timeout_ms=timeout_ms,
        bootstrap_timeout_ms=settings.call_timeout_ms,
        delivery_timeout_ms=timeout_ms,
        max_block_ms=settings.call_timeout_ms,
    )


def _nothing() -> None:
    pass


#: ``(key, value)`` of one record of the log topic.
Record = tuple[bytes | None, bytes]


class LogWriter:
    """The log topic's transactional writer (steps 1-3 of the module docstring)."""

    def __init__(self, settings: KafkaLogSettings) -> None:
        self._settings = settings
        self._producer = log_producer(
            settings, timeout_s=settings.write_timeout_s, transactional_id=settings.transactional_id
        )
        self._failed = False

    def fence(self) -> None:
        """Step 1 (bounded by ``call_timeout_s``, the producer's ``max_block_ms``)."""
        try:
            self._producer.init_transactions()
        except Exception as exc:
            self._failed = True
            raise LogWriteError(f"init_transactions of {self._settings.transactional_id!r}: {exc}") from exc

    @property
    def epoch(self) -> int:
        """The producer epoch the broker gave this writer at `fence` (step 1): the log's leader
        epoch, higher than every earlier writer's of the transactional id."""
        return int(self._producer._transaction_manager.producer_id_and_epoch.epoch)

    def write(self, records: list[Record], timeout_s: float, on_sent: Callable[[], None] = _nothing) -> list[int]:
        """Step 2; the offsets of `records`, in order. ``on_sent`` runs between the flush
        and the commit (a test's crash point)."""
        producer = self._producer
        deadline = time.monotonic() + timeout_s
        try:
            producer.begin_transaction()
            futures = [producer.send(self._settings.topic, key=k, value=v, partition=0) for k, v in records]
            producer.flush(timeout=max(0.0, deadline - time.monotonic()))
            offsets = [int(future.get(timeout=0).offset) for future in futures]
            on_sent()
            end_transaction(
                producer, deadline - time.monotonic(), f"the log's transaction of {len(records)} records", commit=True
            )
        except Exception as exc:  # fenced, refused, a failed send, a flush or commit past the deadline
            self._failed = True
            raise LogWriteError(f"transaction of {len(records)} records: {type(exc).__name__}: {exc}") from exc
        return offsets

    def close(self, timeout_s: float) -> None:
        """Step 3."""
        if self._failed:
            force_close(self._producer, timeout_s)
        else:
            self._producer.close(timeout=timeout_s)
