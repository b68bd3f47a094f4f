"""The Kafka log's producer: idempotent, acks=all, every wait bounded.

Idempotence (with at most 5 requests in flight) keeps the records of one producer
in the order they were sent, without duplicates from internal retries; acks=all
makes an acknowledged record one that ``min.insync.replicas`` replicas hold.
``max_block_ms`` bounds a send that waits for metadata or buffer space,
``request_timeout_ms`` and ``delivery_timeout_ms`` bound one record's delivery;
the callers bound their ``flush`` as well.
"""

from __future__ import annotations

from kafka import KafkaProducer

from coordinator.store.kafka.settings import TOPIC_MAX_MESSAGE_BYTES, KafkaLogSettings


def log_producer(settings: KafkaLogSettings, *, timeout_s: float) -> KafkaProducer:
    """A producer whose deliveries end (acknowledged or failed) within `timeout_s`."""
    timeout_ms = int(timeout_s * 1000)
    return KafkaProducer(
        bootstrap_servers=settings.bootstrap.split(","),
        client_id="cr-coordinator-log",
        acks="all",
        enable_idempotence=True,
        max_in_flight_requests_per_connection=5,
        linger_ms=0,
        max_request_size=TOPIC_MAX_MESSAGE_BYTES,
        request_timeout_ms=timeout_ms,
        bootstrap_timeout_ms=settings.call_timeout_ms,
        delivery_timeout_ms=timeout_ms,
        max_block_ms=settings.call_timeout_ms,
    )
