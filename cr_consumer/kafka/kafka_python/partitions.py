"""The seam's partitions and offsets in kafka-python's types (the other way:
:func:`cr_consumer.kafka.client.topic_partitions`).

kafka-python's ``TopicPartition`` is a ``(topic, partition)`` tuple like the
seam's, so maps keyed by either agree; a call into kafka-python still gets its
own type, which some of its code checks.
"""

from __future__ import annotations

from collections.abc import Mapping

from kafka import TopicPartition as KafkaTopicPartition
from kafka.structs import OffsetAndMetadata

from cr_consumer.kafka.client import TopicPartition


def library_partition(tp: TopicPartition) -> KafkaTopicPartition:
    """``tp`` as kafka-python's ``TopicPartition``."""
    return KafkaTopicPartition(tp.topic, tp.partition)


def commit_request(offsets: Mapping[TopicPartition, int]) -> dict[KafkaTopicPartition, OffsetAndMetadata]:
    """kafka-python's commit request for ``offsets`` (next offset to read; no metadata, no leader epoch)."""
    return {library_partition(tp): OffsetAndMetadata(int(off), "", -1) for tp, off in offsets.items()}


__all__ = ["commit_request", "library_partition"]
