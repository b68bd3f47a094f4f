"""A one-partition Kafka topic used as a log read only at its end: the record before its end,
and an append that creates the topic when it is missing. Raw requests, every one bounded.

1. :func:`last_record`: metadata for the topic (an unknown topic is an empty log: the read never
   creates it), ListOffsets ``latest`` at the leader of partition 0, then one fetch of the
   record before that end. Each append is a batch of its own, so ``latest`` is right on every
   broker, the test broker included (whose ListOffsets answers a batch's base offset + 1).
2. :func:`append`: create the topic (one partition; replication and ``min.insync.replicas`` the
   broker's defaults) unless it exists, then send the record with an idempotent producer (acks
   all) and wait for its offset: the record is durable when this returns.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError
from kafka.protocol.consumer import ListOffsetsRequest
from kafka.protocol.metadata import MetadataRequest

from coordinator.kafka.committed_filter import LogRecord
from coordinator.kafka.raw_batches import RawReadError, read_committed_with
from coordinator.kafka.raw_requests import RawClient, error_name

#: Kafka's error code of an unknown topic: a log nothing was appended to yet.
UNKNOWN_TOPIC = 3
#: ListOffsets' timestamp asking for the end of the partition.
LATEST = -1


def last_record(settings: Mapping[str, Any], topic: str, deadline_s: float) -> LogRecord | None:
    """Step 1: the record before the end of ``topic``'s partition 0, or None (no topic, or empty)."""
    with RawClient(settings, time.monotonic() + deadline_s) as client:
        leader = _leader(client, topic)
        if leader is None:
            return None
        end = _end(client, topic, leader)
        if end == 0:
            return None
        read = read_committed_with(client, topic, 0, end - 1, end)
    if not read.records:
        raise RawReadError(f"log {topic}: no record at offset {end - 1} below its end {end}")
    return read.records[-1]


def append(
    settings: Mapping[str, Any], topic: str, key: bytes, value: bytes, deadline_s: float, *, max_request_bytes: int
) -> int:
    """Step 2: the record's offset once it is durable."""
    admin = KafkaAdminClient(**settings)
    try:
        with contextlib.suppress(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=-1)])
    finally:
        admin.close()
    producer = KafkaProducer(
        **{k: v for k, v in settings.items() if k in KafkaProducer.DEFAULT_CONFIG},
        acks="all",
        enable_idempotence=True,
        max_request_size=max_request_bytes,
        max_block_ms=int(deadline_s * 1000),
    )
    try:
        future = producer.send(topic, key=key, value=value, partition=0)
        return int(future.get(timeout=deadline_s).offset)
    finally:
        producer.close(timeout=deadline_s)


def _leader(client: RawClient, topic: str) -> int | None:
    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False
    )
    for found in client.request(request, None, f"the metadata of {topic}").topics:
        if found.error_code == UNKNOWN_TOPIC:
            return None
        if found.error_code:
            raise RawReadError(f"log {topic}: {error_name(found.error_code)}")
        for part in found.partitions:
            if part.partition_index == 0 and part.leader_id >= 0:
                return int(part.leader_id)
    raise RawReadError(f"log {topic}: partition 0 has no leader")


def _end(client: RawClient, topic: str, leader: int) -> int:
    where = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=LATEST)
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[where])],
        max_version=4,
    )
    for found in client.request(request, leader, f"the end of {topic}").topics:
        for part in found.partitions:
            if part.error_code:
                raise RawReadError(f"the end of log {topic}: {error_name(part.error_code)}")
            return int(part.offset)
    raise RawReadError(f"the end of log {topic}: no answer for partition 0")
