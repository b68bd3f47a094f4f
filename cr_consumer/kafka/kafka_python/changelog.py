"""The changelog's Kafka side (``cr_consumer/state/changelog.py`` has the format and the steps):
step 1, the topic's creation (:func:`ensure_changelog`), and steps 3-4, the writer
(:class:`ChangelogWriter`), on kafka-python.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs
from kafka import KafkaAdminClient, KafkaProducer
from kafka.errors import TopicAlreadyExistsError

from coordinator.kafka.bounded_producer import force_close
from coordinator.protocol.common.waiting import wait_until
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.kafka.kafka_python.producer import PRODUCER_SETTINGS
from cr_consumer.state.changelog import (
    ChangelogRecord,
    JsonKey,
    JsonValue,
    encode_record,
    validate_topic_name,
)

#: Replication factor asked by default (clamped to the cluster's broker count).
DEFAULT_REPLICATION_FACTOR = 3
#: ``min.insync.replicas`` asked by default (clamped to the replication factor).
DEFAULT_MIN_INSYNC_REPLICAS = 2

#: Bounds a send's wait for the changelog topic's metadata (topic missing, cluster unreachable):
#: a write fails instead of hanging the checkpoint.
SEND_MAX_BLOCK_MS = 10_000
#: Bounds the writer's construction (and the admin client's) when no broker of the bootstrap list
#: answers: it fails within 10 s instead of kafka-python's 30 s.
BOOTSTRAP_TIMEOUT_MS = 10_000
#: Bounds each admin request of :func:`ensure_changelog` (a broker that does not answer).
ADMIN_REQUEST_TIMEOUT_MS = 10_000
#: Bounds :func:`ensure_changelog`'s wait for a created topic to show its partitions in the
#: metadata (a broker that accepts the creation but never creates it); each request has its own
#: bound above.
ENSURE_TIMEOUT_S = 30.0

#: Producer settings the writer fixes: the record format (serializers), durability and order
#: (idempotence, acks), the target, and no transactions (step 4: the region decides, not Kafka).
FIXED_PRODUCER_SETTINGS = frozenset(
    {"bootstrap_servers", "enable_idempotence", "acks", "key_serializer", "value_serializer", "transactional_id"}
)

_UNKNOWN_TOPIC = 3  # UNKNOWN_TOPIC_OR_PARTITION


class ChangelogWriteError(RuntimeError):
    """Sends to the changelog failed or were not acknowledged in time (step 4)."""


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
    """Step 1. ``properties``: dotted client properties (security) the admin client also knows;
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


# -- writer -----------------------------------------------------------------------------------


def _answered(future: Any, timeout_s: float) -> bool:
    """Whether the send ``future`` (a kafka-python ``FutureRecordMetadata``) is answered, success
    or failure, within ``timeout_s`` (its outcome stays on the future)."""
    if future.is_done:
        return True
    if timeout_s <= 0:
        return False
    answered = threading.Event()
    future.add_both(lambda _: answered.set())  # called at once when answered meanwhile
    return answered.wait(timeout_s)


class ChangelogWriter:
    """Steps 3-4 on one idempotent kafka-python producer. ``write`` and ``flush`` are called
    from one thread (the member's checkpoint)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        overrides: Mapping[str, object] | None = None,
        *,
        producer_factory: Callable[..., Any] = KafkaProducer,
    ) -> None:
        """``overrides``: kafka-python producer keywords (``linger_ms``, security, ...); those of
        :data:`FIXED_PRODUCER_SETTINGS` and unknown names raise ``ValueError``.
        ``producer_factory``: makes the producer from the keywords (a test's fake)."""
        self.topic = validate_topic_name(topic)
        overrides = dict(overrides or {})
        unknown = sorted(set(overrides) - PRODUCER_SETTINGS)
        fixed = sorted(set(overrides) & FIXED_PRODUCER_SETTINGS)
        if unknown or fixed:
            raise ValueError(
                f"changelog writer for {topic}: unknown producer settings {unknown}, fixed settings {fixed}"
            )
        config: dict[str, Any] = {
            "max_block_ms": SEND_MAX_BLOCK_MS,
            "bootstrap_timeout_ms": BOOTSTRAP_TIMEOUT_MS,
            **overrides,
        }
        config.update(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
        # Sends since the last flush, in send order; their partitions are the flush's answer.
        self._pending: list[Any] = []
        self._producer = producer_factory(**config)

    @property
    def pending(self) -> int:
        """Sends not yet taken by a flush."""
        return len(self._pending)

    def write(self, seq: int, partition: int, changes: Mapping[JsonKey, JsonValue], src: Mapping[JsonKey, int]) -> None:
        """Queue one record per changed key (value None: a delete) to ``partition``. Every change is
        encoded before the first is sent: a key without a source offset or a state that is not
        JSON raises ``ValueError`` with nothing queued."""
        if type(partition) is not int or partition < 0:
            raise ValueError(f"changelog {self.topic}: partition {partition!r} must be an int >= 0")
        encoded = []
        for key, value in changes.items():
            if key not in src:
                raise ValueError(f"changelog {self.topic}:{partition}: key {key!r} changed without a source offset")
            encoded.append(encode_record(ChangelogRecord(key, value, seq, src[key])))
        send = self._producer.send
        for record in encoded:
            self._pending.append(
                send(self.topic, key=record.key, value=record.value, headers=list(record.headers), partition=partition)
            )

    def flush(self, timeout_s: float) -> dict[int, int]:
        """Step 3: wait (at most ``timeout_s``) until every queued send is acknowledged; per
        partition written since the last flush, its end offset (last acknowledged offset + 1).
        Step 4: a failed or unanswered send raises ``ChangelogWriteError``; the sends are
        forgotten either way (a failed flush's seq is never completed)."""
        pending, self._pending = self._pending, []
        if not pending:
            return {}
        # ``KafkaProducer.flush(timeout)`` bounds its wait per record batch, not in total: wait
        # for the sends themselves against one deadline instead (linger_ms is 0 unless
        # overridden, so no record waits for a flush to be sent).
        deadline = time.monotonic() + timeout_s
        for future in pending:
            if not _answered(future, deadline - time.monotonic()):
                break
        unanswered = sum(1 for f in pending if not f.is_done)
        failed = [f.exception for f in pending if f.is_done and f.exception is not None]
        if unanswered or failed:
            first = f"; first failure: {type(failed[0]).__name__}: {failed[0]}" if failed else ""
            raise ChangelogWriteError(
                f"changelog {self.topic}: {len(failed)} of {len(pending)} sends failed and {unanswered} unanswered"
                f" within {timeout_s:g}s{first}"
            )
        ends: dict[int, int] = {}
        for future in pending:
            meta = future.value
            partition, end = int(meta.partition), int(meta.offset) + 1
            if end > ends.get(partition, 0):
                ends[partition] = end
        return dict(sorted(ends.items()))

    def close(self, timeout_s: float) -> None:
        """Stop the producer within ``timeout_s``: sends not flushed are dropped (step 4: their seq
        is never completed). ``ChangelogWriteError`` if its sender thread did not stop in time."""
        self._pending = []
        if not force_close(self._producer, timeout_s):
            raise ChangelogWriteError(
                f"changelog {self.topic}: the producer's sender thread did not stop within {timeout_s:g}s"
            )


__all__ = [
    "DEFAULT_MIN_INSYNC_REPLICAS",
    "DEFAULT_REPLICATION_FACTOR",
    "ChangelogTopic",
    "ChangelogWriteError",
    "ChangelogWriter",
    "ensure_changelog",
]
