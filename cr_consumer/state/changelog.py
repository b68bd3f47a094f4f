"""The changelog of a partition-scoped keyed table: its topic, record format and writer.

One changelog topic per (group, operator id, input topic), named by :func:`changelog_topic`,
with the input's partition count: changelog partition p holds the table of input partition p.

1. **Topic.** :func:`ensure_changelog` creates the topic when it is missing, with
   ``cleanup.policy=delete`` and ``retention.ms=-1`` (never compacted: the log cleaner cannot see
   a checkpoint's logical abort, so an aborted newer value would survive and the committed older
   one be lost), replication factor 3 clamped to the cluster's broker count and
   ``min.insync.replicas`` min(2, replication). A topic that exists keeps its settings, but a
   partition count other than the input's raises ``ValueError``: nothing is written.
2. **Record.** Kafka key = compact JSON of the table key, Kafka value = compact JSON of the key's
   state, or no value for a delete (a tombstone). Headers: ``cr.v`` (format version ``1``),
   ``cr.seq`` (the checkpoint the write belongs to) and ``cr.src`` (the source offset of the last
   input record that changed the key), both ASCII decimal in 0..2**63-1.
3. **Writing.** At ``checkpoint(seq)`` the owner of input partition p calls
   :meth:`ChangelogWriter.write` with the keys dirty since its last checkpoint: one record per
   key, to changelog partition p, through one idempotent producer (``acks=all``). Then
   :meth:`ChangelogWriter.flush` waits until every send is acknowledged and returns each written
   partition's end offset (last acknowledged offset + 1, from the sends' own metadata: a
   ``ListOffsets(latest)`` answer is wrong on the test broker). Only then may the member ack the
   checkpoint, with those end offsets.
4. **Failure.** A send that fails or is unanswered within the flush's timeout raises
   :class:`ChangelogWriteError` naming how many: the member must not ack, the seq is never
   completed, and the records already written carry that seq, which restore skips (the region
   records it as aborted). A writer closed before its flush drops its unsent records for the
   same reason. Records of a zombie (an owner that lost its partition) carry its own seqs, never
   completed, or lie after the checkpoint's end offset: restore skips them as well.
5. **Reading** (``restore.py``): :func:`decode_record` checks a stored record completely and
   raises :class:`ChangelogFormatError` (a ``ValueError``) naming its partition and offset.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

import attrs
from kafka import KafkaAdminClient, KafkaProducer
from kafka.errors import TopicAlreadyExistsError

from coordinator.kafka.bounded_producer import force_close
from coordinator.protocol.common.waiting import wait_until
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.kafka.kafka_python.producer import PRODUCER_SETTINGS

#: A table key: a JSON scalar or array; arrays are kept as tuples, so that every key is hashable.
JsonKey: TypeAlias = str | int | float | bool | tuple["JsonKey", ...] | None
#: A key's state: any JSON value (objects with string keys only; read back as lists and dicts).
#: ``None`` in a change is a delete.
JsonValue: TypeAlias = str | int | float | bool | Sequence["JsonValue"] | Mapping[str, "JsonValue"] | None

#: The record format's version (header ``cr.v``).
FORMAT_VERSION = b"1"
VERSION_HEADER = "cr.v"
SEQ_HEADER = "cr.seq"
SRC_HEADER = "cr.src"
#: Largest seq and source offset (Kafka offsets are signed 64-bit).
MAX_INT = 2**63 - 1
#: Kafka's limit on a topic name's length.
MAX_TOPIC_NAME = 249
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

_TOPIC_CHARS = re.compile(r"[A-Za-z0-9._-]+")
_DECIMAL = re.compile(rb"0|[1-9][0-9]{0,18}")
_UNKNOWN_TOPIC = 3  # UNKNOWN_TOPIC_OR_PARTITION


class ChangelogFormatError(ValueError):
    """A stored changelog record that is not in the format of step 2 (named by partition and offset)."""


class ChangelogWriteError(RuntimeError):
    """Sends to the changelog failed or were not acknowledged in time (step 4)."""


# -- topic ------------------------------------------------------------------------------------


def validate_topic_name(name: str) -> str:
    """``name`` if Kafka accepts it as a topic name, else ``ValueError`` naming the problem."""
    if not name:
        raise ValueError("a topic name may not be empty")
    if len(name) > MAX_TOPIC_NAME:
        raise ValueError(f"topic name {name[:40]!r}... is {len(name)} characters long (at most {MAX_TOPIC_NAME})")
    if name in (".", ".."):
        raise ValueError(f"topic name {name!r} is not allowed")
    if not _TOPIC_CHARS.fullmatch(name):
        bad = sorted({c for c in name if not _TOPIC_CHARS.fullmatch(c)})
        raise ValueError(f"topic name {name!r} has characters {bad!r} (allowed: ASCII letters, digits, '.', '_', '-')")
    return name


def changelog_topic(group: str, operator_id: str, topic: str) -> str:
    """The changelog topic of the tables an operator keeps for one input topic (step 1)."""
    for what, part in (("group", group), ("operator id", operator_id), ("topic", topic)):
        if not part:
            raise ValueError(f"changelog topic: the {what} is empty")
    return validate_topic_name(f"{group}.{operator_id}.{topic}.changelog")


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


# -- record format ----------------------------------------------------------------------------


def key_of(value: object) -> JsonKey:
    """``value`` as a table key: JSON arrays (lists) become tuples, recursively; an object, a
    non-finite float or a non-JSON type raises ``ValueError``."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"a key may not be {value!r} (not JSON)")
        return value
    if isinstance(value, list | tuple):
        return tuple(key_of(v) for v in value)
    raise ValueError(f"a key must be a JSON scalar or array, not {type(value).__name__}")


def _seq_like(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or not 0 <= value <= MAX_INT:
        raise ValueError(f"{attribute.name} must be an int in 0..2**63-1, not {value!r}")


@attrs.frozen
class ChangelogRecord:
    """One change of a key's state (step 2)."""

    key: JsonKey = attrs.field(converter=key_of)
    #: The key's state after the change; None: the key was deleted.
    value: JsonValue
    #: The checkpoint this write belongs to.
    seq: int = attrs.field(validator=_seq_like)
    #: The source offset of the last input record that changed the key.
    src: int = attrs.field(validator=_seq_like)


@attrs.frozen
class KafkaRecord:
    """A changelog record as Kafka stores it (step 2)."""

    key: bytes
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


def _dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def _check_object_keys(value: object) -> None:
    """JSON objects need string keys: ``json.dumps`` would turn 1 into "1" and change the state."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for k, v in item.items():
                if not isinstance(k, str):
                    raise ValueError(f"a state's object has key {k!r}: JSON object keys must be strings")
                stack.append(v)
        elif isinstance(item, list | tuple):
            stack.extend(item)


def encode_record(record: ChangelogRecord) -> KafkaRecord:
    """Step 2; a state that is not JSON raises ``ValueError``."""
    try:
        key = _dumps(record.key)
        if record.value is None:
            value = None
        else:
            _check_object_keys(record.value)
            value = _dumps(record.value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"the change of key {record.key!r} is not JSON: {exc}") from exc
    headers = (
        (VERSION_HEADER, FORMAT_VERSION),
        (SEQ_HEADER, str(record.seq).encode("ascii")),
        (SRC_HEADER, str(record.src).encode("ascii")),
    )
    return KafkaRecord(key, value, headers)


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("a JSON object repeats a key")
    return out


def _loads(raw: bytes) -> Any:
    return json.loads(raw.decode("utf-8"), parse_constant=_reject_constant, object_pairs_hook=_object)


def decode_record(
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[tuple[str, bytes | None]],
    *,
    topic: str = "changelog",
) -> ChangelogRecord:
    """Step 5: the record stored at ``partition``/``offset``, checked completely (other headers
    than ``cr.*`` ones are left alone)."""
    where = f"{topic} partition {partition} offset {offset}"
    found: dict[str, bytes | None] = {}
    for name, raw in headers:
        if name.startswith("cr."):
            if name in found:
                raise ChangelogFormatError(f"{where}: header {name} appears twice")
            found[name] = raw
    unknown = sorted(set(found) - {VERSION_HEADER, SEQ_HEADER, SRC_HEADER})
    if unknown:
        raise ChangelogFormatError(f"{where}: unknown headers {unknown}")
    if found.get(VERSION_HEADER) != FORMAT_VERSION:
        raise ChangelogFormatError(
            f"{where}: format version {found.get(VERSION_HEADER)!r}, expected {FORMAT_VERSION!r}"
        )
    seq = _decimal(where, SEQ_HEADER, found)
    src = _decimal(where, SRC_HEADER, found)
    if key is None:
        raise ChangelogFormatError(f"{where}: no key")
    try:
        table_key = _loads(key)
        if isinstance(table_key, dict) or (isinstance(table_key, list) and _has_object(table_key)):
            raise ValueError("a key may not be or hold a JSON object")
        state = None if value is None else _loads(value)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ChangelogFormatError(f"{where}: not the JSON of a key and a state: {exc}") from exc
    if value is not None and state is None:
        raise ChangelogFormatError(f"{where}: a state of JSON null (a delete is a record without a value)")
    return ChangelogRecord(table_key, state, seq, src)


def _has_object(items: list[Any]) -> bool:
    return any(isinstance(i, dict) or (isinstance(i, list) and _has_object(i)) for i in items)


def _decimal(where: str, name: str, found: Mapping[str, bytes | None]) -> int:
    raw = found.get(name)
    if raw is None:
        raise ChangelogFormatError(f"{where}: no header {name}")
    if not _DECIMAL.fullmatch(raw) or int(raw) > MAX_INT:
        raise ChangelogFormatError(f"{where}: header {name} is {raw[:40]!r}, not a decimal in 0..2**63-1")
    return int(raw)


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
    "FORMAT_VERSION",
    "ChangelogFormatError",
    "ChangelogRecord",
    "ChangelogTopic",
    "ChangelogWriteError",
    "ChangelogWriter",
    "JsonKey",
    "JsonValue",
    "KafkaRecord",
    "changelog_topic",
    "decode_record",
    "encode_record",
    "ensure_changelog",
    "key_of",
    "validate_topic_name",
]
