"""The changelog of a partition-scoped keyed table: its topic's name and its record format.

One changelog topic per (group, operator, input topic), named by :func:`changelog_topic`, with
the input's partition count: changelog partition p holds the table of input partition p. The
partitioned aggregate (``cr_consumer/runtime/pipeline/partitioned_aggregate.py``) writes it, in
the region's transactions, and restores tables from its committed records;
``cr_consumer/kafka/kafka_python/changelog.py`` creates the topic.

1. **Record.** Kafka key = compact JSON of the table key, Kafka value = compact JSON of the key's
   whole state, or no value for a delete (a tombstone). Headers: ``cr.v`` (format version
   ``1``), ``cr.seq`` (the checkpoint the write belongs to) and ``cr.src`` (the source offset of
   the last input record that changed the key), both ASCII decimal in 0..2**63-1: what a reader
   of the topic needs to tell where a state came from.
2. **Reading.** :func:`decode_record` checks a stored record completely and raises
   :class:`ChangelogFormatError` (a ``ValueError``) naming its topic, partition and offset.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

import attrs

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
_TOPIC_CHARS = re.compile(r"[A-Za-z0-9._-]+")
_DECIMAL = re.compile(rb"0|[1-9][0-9]{0,18}")


class ChangelogFormatError(ValueError):
    """A stored changelog record that is not in the format of step 2 (named by partition and offset)."""


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


#: One decoder for every record (``json.loads`` with hooks builds one per call).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, object_pairs_hook=_object)


def _loads(raw: bytes) -> Any:
    return _DECODER.decode(raw.decode("utf-8"))


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


__all__ = [
    "FORMAT_VERSION",
    "ChangelogFormatError",
    "ChangelogRecord",
    "JsonKey",
    "JsonValue",
    "KafkaRecord",
    "changelog_topic",
    "decode_record",
    "encode_record",
    "key_of",
    "validate_topic_name",
]
