"""Pointers kept by Kafka: offsets committed for a consumer group that never has members.

A durable pointer into a topic (where a changelog partition's latest base begins) is kept the way
Kafka keeps a consumer's position: as the group's committed offset, replicated by the cluster in
its offsets topic. Nobody joins the group, so commits carry no generation (-1) and the group
coordinator accepts them as it does for a consumer that assigns its partitions itself.

1. :func:`read_offsets`: a kafka-python consumer with the group id, assigned the partitions
   (never subscribed: it joins nothing), asks the committed offset of each; None where the group
   has none (never committed, or expired: ``offsets.retention.minutes``).
2. :func:`commit_offsets`: the same consumer commits the offsets synchronously.

``settings`` are ``admin.admin_settings``'s (bootstrap, security, request timeout, client id);
every request is bounded by ``timeout_ms`` and a failure raises (kafka-python's error).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata


def _consumer(settings: Mapping[str, Any], group: str, timeout_ms: int) -> KafkaConsumer:
    known = KafkaConsumer.DEFAULT_CONFIG
    config = {k: v for k, v in settings.items() if k in known}
    config.update(
        group_id=group,
        enable_auto_commit=False,
        request_timeout_ms=timeout_ms,
        bootstrap_timeout_ms=timeout_ms,
    )
    return KafkaConsumer(**config)


def read_offsets(
    settings: Mapping[str, Any], group: str, topic: str, partitions: Iterable[int], *, timeout_ms: int
) -> dict[int, int | None]:
    """Step 1."""
    consumer = _consumer(settings, group, timeout_ms)
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        return {tp.partition: consumer.committed(tp, timeout_ms=timeout_ms) for tp in tps}
    finally:
        consumer.close(autocommit=False)


def commit_offsets(
    settings: Mapping[str, Any], group: str, topic: str, offsets: Mapping[int, int], *, timeout_ms: int
) -> None:
    """Step 2."""
    consumer = _consumer(settings, group, timeout_ms)
    try:
        consumer.assign([TopicPartition(topic, p) for p in offsets])
        consumer.commit(
            {TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()},
            timeout_ms=timeout_ms,
        )
    finally:
        consumer.close(autocommit=False)


__all__ = ["commit_offsets", "read_offsets"]
