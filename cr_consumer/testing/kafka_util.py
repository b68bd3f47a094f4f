"""Small Kafka helpers shared by tests, benchmarks, drills and demos.

Topic creation waits until the broker's metadata shows every partition, and
production is batched and idempotent-free (plain acks=all) so that offsets are
dense: record i of a partition has offset i. Nothing here is tansu-specific.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from coordinator.protocol.common.group_offsets import group_committed_offsets
from coordinator.protocol.common.waiting import wait_until

#: Bound on waiting for a new topic's partitions to appear in metadata, so a
#: broker that never creates the topic fails the caller instead of hanging it.
TOPIC_READY_TIMEOUT_S = 30.0


def unique_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> str:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="cr-admin")
    try:
        with contextlib.suppress(TopicAlreadyExistsError):  # create is idempotent: the partitions are checked below
            admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    finally:
        admin.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id="cr-meta")
    try:
        wait_until(
            lambda: len(consumer.partitions_for_topic(name) or ()) >= partitions,
            TOPIC_READY_TIMEOUT_S,
            f"topic {name!r} to show {partitions} partitions",
        )
    finally:
        consumer.close()
    return name


def producer(bootstrap: str, **overrides: object) -> KafkaProducer:
    config = dict(bootstrap_servers=bootstrap, acks="all", linger_ms=5, batch_size=256 * 1024)
    config.update(overrides)
    return KafkaProducer(**config)


def produce(
    bootstrap: str,
    topic: str,
    values: Iterable[bytes],
    *,
    partition: int | None = None,
    keys: Iterable[bytes | None] | None = None,
    single_record_batches: bool = False,
) -> int:
    """Send ``values`` (round robin over partitions unless ``partition`` is given).

    ``single_record_batches`` flushes after each send: on tansu, end offsets are
    only right when the last batch holds one record (see the notes).
    """
    p = producer(bootstrap)
    n = 0
    try:
        parts = [] if partition is not None else sorted(p.partitions_for(topic))
        key_iter = iter(keys) if keys is not None else None
        for i, v in enumerate(values):
            key = next(key_iter) if key_iter is not None else None
            part = partition if partition is not None else parts[i % len(parts)]
            p.send(topic, value=v, key=key, partition=part)
            n += 1
            if single_record_batches:
                p.flush()
        p.flush()
    finally:
        p.close()
    return n


def group_offsets(bootstrap: str, group_id: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets by (topic, partition), as any Kafka tool sees them
    (partitions without a committed offset are left out)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="cr-admin")
    try:
        found = group_committed_offsets(admin, group_id)
    finally:
        admin.close()
    return {(tp.topic, tp.partition): offset for tp, offset in found.items()}


def committed_offsets(bootstrap: str, group_id: str, topic: str) -> dict[int, int]:
    """The group's committed offsets for ``topic`` (:func:`group_offsets`)."""
    return {p: offset for (t, p), offset in group_offsets(bootstrap, group_id).items() if t == topic}


__all__ = [
    "TopicPartition",
    "committed_offsets",
    "create_topic",
    "group_offsets",
    "produce",
    "producer",
    "unique_name",
]
