"""The decision log of one query of the ``crkafka`` sink: a Kafka topic where the driver records
each batch's decision before it commits the batch's transactions.

Why Kafka: the log must survive a kill -9 of the driver and be read by the next attempt of the
batch, on the driver (its ``commit``) and on the executors (a task checks it before it fences
anything, ``writer.py``). Kafka is the one system every part of a ``crkafka`` query reaches (the
executors do not reach the coordinator, and a query reading another source has none), and it is
where the decided transactions live anyway.

The log is the topic ``<decisionTopicPrefix>-<Spark query id>``, one partition, created by the
driver on the first decision (replication and ``min.insync.replicas`` are the broker's
defaults; the records must be as durable as the output's). It is read at one place only: its last
record. That is enough because Spark decides batch ``n + 1`` only after batch ``n`` is in its
commit log, and a restarted query replays only the last batch of its offset log: the only
decision a replay can find for its batch is the log's last record.

1. :meth:`DecisionLog.last`: metadata for the topic (never created by the read: an unknown topic
   is a log without decisions), ListOffsets ``latest`` at its leader, then one fetch of the
   record before it (each record is a batch of its own: ``latest`` is right on every broker, the
   test broker included). Its JSON is checked whole (``reports.Decision``) and must name this
   query.
2. :meth:`DecisionLog.record`: create the topic when it is missing (an existing one is fine),
   then send the decision with an idempotent producer (acks all) and wait for its offset: the
   decision is durable when this returns. Every request is bounded by the request timeout and
   the whole by the caller's deadline.
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

from coordinator.kafka.raw_batches import RawReadError, read_committed_with
from coordinator.kafka.raw_requests import RawClient, error_name
from cr_consumer.spark.sink.reports import Decision

#: Kafka's error code of an unknown topic: a log nothing was decided in yet.
UNKNOWN_TOPIC = 3
#: ListOffsets' timestamp asking for the end of the partition.
LATEST = -1
#: The decision producer's request size: a decision of ``MAX_TASKS`` transactions fits.
DECISION_MAX_REQUEST_BYTES = 16 << 20


def decision_topic(prefix: str, query: str) -> str:
    return f"{prefix}-{query}"


class DecisionLog:
    """Steps 1-2 for one query (``settings``: ``admin.admin_settings``, whose request timeout
    bounds each request)."""

    def __init__(self, settings: Mapping[str, Any], prefix: str, query: str) -> None:
        self._settings = dict(settings)
        self.query = query
        self.topic = decision_topic(prefix, query)

    def last(self, deadline_s: float) -> Decision | None:
        """Step 1: the last decision recorded, or None."""
        with RawClient(self._settings, time.monotonic() + deadline_s) as client:
            leader = self._leader(client)
            if leader is None:
                return None
            end = self._end(client, leader)
            if end == 0:
                return None
            read = read_committed_with(client, self.topic, 0, end - 1, end)
        if not read.records:
            raise RawReadError(f"decision log {self.topic}: no record at offset {end - 1} below its end {end}")
        record = read.records[-1]
        decision = Decision.decode(record.value, f"decision log {self.topic} at {record.offset}")
        if decision.query != self.query:
            raise RawReadError(f"decision log {self.topic} at {record.offset} names query {decision.query!r}")
        return decision

    def record(self, decision: Decision, deadline_s: float) -> int:
        """Step 2: the decision's offset once it is durable."""
        data = decision.encode()
        admin = KafkaAdminClient(**self._settings)
        try:
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics([NewTopic(self.topic, num_partitions=1, replication_factor=-1)])
        finally:
            admin.close()
        producer = KafkaProducer(
            **{k: v for k, v in self._settings.items() if k in KafkaProducer.DEFAULT_CONFIG},
            acks="all",
            enable_idempotence=True,
            max_request_size=DECISION_MAX_REQUEST_BYTES,
            max_block_ms=int(deadline_s * 1000),
        )
        try:
            future = producer.send(self.topic, key=self.query.encode(), value=data, partition=0)
            return int(future.get(timeout=deadline_s).offset)
        finally:
            producer.close(timeout=deadline_s)

    def _leader(self, client: RawClient) -> int | None:
        request = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=self.topic)], allow_auto_topic_creation=False
        )
        for found in client.request(request, None, f"the metadata of {self.topic}").topics:
            if found.error_code == UNKNOWN_TOPIC:
                return None
            if found.error_code:
                raise RawReadError(f"decision log {self.topic}: {error_name(found.error_code)}")
            for part in found.partitions:
                if part.partition_index == 0 and part.leader_id >= 0:
                    return int(part.leader_id)
        raise RawReadError(f"decision log {self.topic}: partition 0 has no leader")

    def _end(self, client: RawClient, leader: int) -> int:
        where = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, timestamp=LATEST)
        request = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            topics=[ListOffsetsRequest.ListOffsetsTopic(name=self.topic, partitions=[where])],
            max_version=4,
        )
        for topic in client.request(request, leader, f"the end of {self.topic}").topics:
            for part in topic.partitions:
                if part.error_code:
                    raise RawReadError(f"the end of decision log {self.topic}: {error_name(part.error_code)}")
                return int(part.offset)
        raise RawReadError(f"the end of decision log {self.topic}: no answer for partition 0")


__all__ = ["DecisionLog", "decision_topic"]
