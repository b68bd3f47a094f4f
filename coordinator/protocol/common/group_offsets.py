"""A consumer group's committed offsets, read as any Kafka tool reads them.

The offsets come from the broker (OffsetFetch through the admin client;
kafka-python 3.0.12 names it ``list_group_offsets``), never from a member's
own view, so a caller checks what a restarted member or another tool would
resume from. A partition without a committed offset (the broker answers -1)
is left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kafka import KafkaAdminClient, TopicPartition


def group_committed_offsets(admin: KafkaAdminClient, group: str) -> dict[TopicPartition, int]:
    """Partition -> committed offset of ``group`` (partitions without one left out); the admin
    client's own timeouts bound the request and its ``KafkaError`` propagates."""
    found = admin.list_group_offsets({group: None}).get(group, {})
    return {tp: meta.offset for tp, meta in found.items() if meta.offset >= 0}
