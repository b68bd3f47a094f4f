"""The changelog topic's creation on kafka-python (``cr_consumer/state/changelog.py`` has the
record format; ``runtime/pipeline/partitioned_aggregate.py`` writes and reads the changelog):
:func:`ensure_changelog` creates the topic when it is missing, with ``cleanup.policy=delete`` and
``retention.ms=-1`` (never compacted: the log cleaner cannot tell a committed record from an
aborted one, so an aborted newer value could survive and the committed older one be lost),
replication factor 3 clamped to the cluster's broker count and ``min.insync.replicas``
min(2, replication). A topic that exists keeps its settings, but a partition count other than the
input's raises ``ValueError``: nothing is written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from kafka import KafkaAdminClient
from kafka.errors import TopicAlreadyExistsError

from coordinator.protocol.common.waiting import wait_until
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.state.changelog import validate_topic_name

#: Replication factor asked by default (clamped to the cluster's broker count).
DEFAULT_REPLICATION_FACTOR = 3
#: ``min.insync.replicas`` asked by default (clamped to the replication factor).
DEFAULT_MIN_INSYNC_REPLICAS = 2

#: Bounds the admin client's construction when no broker of the bootstrap list answers: it fails
#: within 10 s instead of kafka-python's 30 s.
BOOTSTRAP_TIMEOUT_MS = 10_000
#: Bounds each admin request of :func:`ensure_changelog` (a broker that does not answer).
ADMIN_REQUEST_TIMEOUT_MS = 10_000
#: Bounds :func:`ensure_changelog`'s wait for a created topic to show its partitions in the
#: metadata (a broker that accepts the creation but never creates it); each request has its own
#: bound above.
ENSURE_TIMEOUT_S = 30.0

_UNKNOWN_TOPIC = 3  # UNKNOWN_TOPIC_OR_PARTITION


@attrs.frozen
class ChangelogTopic:
    """What :func:`ensure_changelog` found or made."""

    name: str
    partitions: int
    #: True: created now with the two settings below; False: it existed, its settings stand
    #: (and the two settings are None).
    created: bool
    replication_factor: int | None
    min_insync_replicas: int | None


def ensure_changelog(
    bootstrap: str,
    topic: str,
    partitions: int,
    replication_factor: int = DEFAULT_REPLICATION_FACTOR,
    min_insync_replicas: int | None = None,
    *,
    properties: Mapping[str, object] | None = None,
    timeout_s: float = ENSURE_TIMEOUT_S,
) -> ChangelogTopic:
    """The module docstring. ``properties``: dotted client properties (security) the admin client also knows;
    ``min_insync_replicas`` None: min(2, replication factor)."""
    validate_topic_name(topic)
    if partitions < 1 or replication_factor < 1 or (min_insync_replicas is not None and min_insync_replicas < 1):
        raise ValueError(
            f"changelog {topic}: partitions {partitions}, replication factor {replication_factor} and"
            f" min.insync.replicas {min_insync_replicas} must be >= 1"
        )
    settings = admin_settings(
        bootstrap, properties or {}, request_timeout_ms=ADMIN_REQUEST_TIMEOUT_MS, client_id="cr-changelog-admin"
    )
    settings["bootstrap_timeout_ms"] = BOOTSTRAP_TIMEOUT_MS
    admin = KafkaAdminClient(**settings)
    try:
        found = _partition_count(admin, topic)
        if found is not None:
            return _checked(topic, partitions, found, ChangelogTopic(topic, found, False, None, None))
        brokers = len(admin.describe_cluster()["brokers"])
        replication = max(1, min(replication_factor, brokers))
        min_isr = min(DEFAULT_MIN_INSYNC_REPLICAS if min_insync_replicas is None else min_insync_replicas, replication)
        spec = {
            "num_partitions": partitions,
            "replication_factor": replication,
            "configs": {"cleanup.policy": "delete", "retention.ms": "-1", "min.insync.replicas": str(min_isr)},
        }
        created = True
        try:
            admin.create_topics({topic: spec}, timeout_ms=ADMIN_REQUEST_TIMEOUT_MS)
        except TopicAlreadyExistsError:
            created = False  # another process created it meanwhile: checked like any existing topic
        count = wait_until(
            lambda: _partition_count(admin, topic), timeout_s, f"changelog {topic} to show its partitions"
        )
        result = ChangelogTopic(topic, count, True, replication, min_isr)
        return _checked(
            topic, partitions, count, result if created else ChangelogTopic(topic, count, False, None, None)
        )
    finally:
        admin.close()


def _partition_count(admin: Any, topic: str) -> int | None:
    """The topic's partition count, or None when the cluster does not know it (yet)."""
    for described in admin.describe_topics([topic]):
        if described.get("name") != topic:
            continue
        code = int(described.get("error_code") or 0)
        if code == _UNKNOWN_TOPIC:
            return None
        if code:
            raise RuntimeError(f"describing changelog {topic}: Kafka error code {code}")
        return len(described.get("partitions") or ()) or None
    return None


def _checked(topic: str, expected: int, found: int, result: ChangelogTopic) -> ChangelogTopic:
    if found != expected:
        raise ValueError(
            f"changelog {topic} has {found} partitions, but its input has {expected}: changelog partition p must"
            " hold input partition p's table (nothing was written)"
        )
    return result


__all__ = ["DEFAULT_MIN_INSYNC_REPLICAS", "DEFAULT_REPLICATION_FACTOR", "ChangelogTopic", "ensure_changelog"]
