"""Create and check the Kafka log's two topics (`KafkaLogSettings`: the log and its
snapshots).

`ensure_topics`, at every start-up, before replay:

1. Create each topic that is missing: one partition, the configured replication
   factor, and configs ``min.insync.replicas``, ``cleanup.policy=delete``,
   ``retention.ms=-1``, ``retention.bytes=-1`` (nothing is ever deleted: replay
   relies on every record after the snapshot pointer, and on the whole log
   when there is no pointer), ``max.message.bytes`` (`TOPIC_MAX_MESSAGE_BYTES`).
   A topic another process created meanwhile counts as existing.
2. Check each topic: exactly one partition (one partition is one order of
   records; a second would split requests between two orders). Anything else
   raises `LogError` and nothing is written. An existing topic's configs are not
   changed: an operator's choice stands.

Every call is bounded by the settings' ``call_timeout_s``; a broker that does not
answer raises (start-up fails) instead of hanging.
"""

from __future__ import annotations

import logging

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from coordinator.store.kafka.settings import TOPIC_MAX_MESSAGE_BYTES, KafkaLogSettings
from coordinator.store.log.frame import LogError

log = logging.getLogger(__name__)


def topic_configs(settings: KafkaLogSettings) -> dict[str, str]:
    return {
        "min.insync.replicas": str(settings.min_insync_replicas),
        "cleanup.policy": "delete",
        "retention.ms": "-1",
        "retention.bytes": "-1",
        "max.message.bytes": str(TOPIC_MAX_MESSAGE_BYTES),
    }


def ensure_topics(settings: KafkaLogSettings) -> None:
    """Steps 1-2 for the log topic and the snapshot topic."""
    admin = KafkaAdminClient(
        bootstrap_servers=settings.bootstrap.split(","),
        client_id="cr-coordinator-log",
        request_timeout_ms=settings.call_timeout_ms,
        bootstrap_timeout_ms=settings.call_timeout_ms,
    )
    try:
        names = (settings.topic, settings.snapshot_topic)
        for name in names:
            topic = NewTopic(name, 1, settings.replication_factor, topic_configs=topic_configs(settings))
            try:
                admin.create_topics([topic], timeout_ms=settings.call_timeout_ms)
                log.info(
                    "created %s: 1 partition, replication factor %d, min.insync.replicas %d",
                    name,
                    settings.replication_factor,
                    settings.min_insync_replicas,
                )
            except TopicAlreadyExistsError:
                pass
        for described in admin.describe_topics(list(names)):
            partitions = described.get("partitions") or []
            if described.get("error_code") or len(partitions) != 1:
                raise LogError(
                    f"kafka topic {described.get('name')!r} at {settings.bootstrap} must have exactly one "
                    f"partition (error code {described.get('error_code')}, {len(partitions)} partitions); "
                    "nothing was written"
                )
    finally:
        admin.close()
