"""The changelog of a partition-scoped keyed table: its topic's name and its record format.

One changelog topic per (group, operator, input topic), named by :func:`changelog_topic`, with
the input's partition count: changelog partition p holds the table of input partition p. The
partitioned aggregate (``cr_consumer/runtime/pipeline/partitioned_aggregate.py``) writes it, in
the region's transactions, and restores tables from its committed records;
``cr_consumer/kafka/kafka_python/changelog.py`` creates the topic.

1. **Record: a change set.** One Kafka record holds changes of one checkpoint to one partition's
   table: no Kafka key; value = compact JSON array of entries ``[key, src, state]``: ``key`` the
   JSON of the table key, ``src`` the source offset of the last input record that changed it,
   ``state`` the key's whole state after the change, or ``null`` when the key was deleted.
   Headers: ``cr.v`` (format version ``2``), ``cr.seq`` (the checkpoint the changes belong to)
   and ``cr.n`` (the entry count), ASCII decimals; ``cr.base`` = ``1`` on the change sets of a
   *base*: the whole table at checkpoint ``cr.seq`` (its entries' ``src`` the partition's last
   source offset then), consecutive records of one transaction, which replaces every change
   before it (a reader that meets a base starts the table again from it). A checkpoint's changes to a partition are as
   many records as :data:`CHUNK_BYTES` needs (at least one entry each). One record per change set
   rather than per key: the checkpoint pays one JSON encoding and a handful of sends instead of
   a send per key (BENCHMARKS.md, "Keyed state on Kafka"); the topic is never compacted
   (``cr_consumer/kafka/kafka_python/changelog.py``), so nothing needs a key per record.
2. **Writing.** :func:`encode_changes` checks every state (JSON, object keys strings: ``json``
   would turn ``1`` into ``"1"`` and the restored state would differ) and refuses what is not
   JSON with ``ValueError`` naming the key, before anything is sent.
3. **Reading.** :func:`decode_changes` checks a stored record completely and raises
   :class:`ChangelogFormatError` (a ``ValueError``) naming its topic, partition and offset;
   applying a partition's change sets in log order gives its table.
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
FORMAT_VERSION = b"2"
VERSION_HEADER = "cr.v"
SEQ_HEADER = "cr.seq"
COUNT_HEADER = "cr.n"
BASE_HEADER = "cr.base"
#: Largest seq and source offset (Kafka offsets are signed 64-bit).
MAX_INT = 2**63 - 1
#: Bound on one change set's value (step 1): half of the default ``max.message.bytes`` and of
#: kafka-python's ``max_request_size``, so a change set is never refused for its size by a
#: broker or producer with the defaults. A single entry larger than this is a record alone.
CHUNK_BYTES = 512 * 1024
#: Entries encoded together before the size is checked (a larger encoding is halved).
CHUNK_ENTRIES = 4096
#: A writer's floor for bases by default (its ``materialize_after``): a partition with few live
#: keys gets a base only after this many changes since its last one, so small tables are not
#: rewritten at every checkpoint (``runtime/pipeline/partitioned_tables.py``, step 3).
MATERIALIZE_MIN_CHANGES = 10_000
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


#: One change as :func:`encode_changes` takes it and :func:`decode_changes` gives it back:
#: (key, src, state), the state None for a delete.
Change: TypeAlias = tuple[JsonKey, int, Any]


@attrs.frozen
class ChangeSet:
    """One stored change set (step 3): its checkpoint and its changes in write order."""

    seq: int = attrs.field(validator=_seq_like)
    changes: tuple[Change, ...]
    #: A base's change set: the table is the base's entries, nothing before them (step 1).
    base: bool = False


@attrs.frozen
class KafkaRecord:
    """A change set as Kafka stores it (step 1)."""

    value: bytes
    headers: tuple[tuple[str, bytes], ...]


_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


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


def _entry_error(change: Change) -> str | None:
    """Why ``change`` cannot be written (its key named), or None."""
    key, src, state = change
    if type(src) is not int or not 0 <= src <= MAX_INT:
        return f"the change of key {key!r}: src {src!r} is not an offset"
    try:
        key_of(key)
        _check_object_keys(state)
        _ENCODE(change)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"the change of key {key!r} is not JSON: {exc}"
    return None


def _encoded(changes: Sequence[Change]) -> bytes:
    """The JSON array of ``changes``' entries; ``ValueError`` naming the first bad change."""
    try:
        _check_object_keys(changes)
        if not all(type(c[1]) is int and 0 <= c[1] <= MAX_INT for c in changes):
            raise ValueError("a src is not an offset")
        return _ENCODE(changes).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        for change in changes:
            error = _entry_error(change)
            if error is not None:
                raise ValueError(error) from exc
        raise


def encode_changes(
    seq: int, changes: Sequence[Change], chunk_bytes: int = CHUNK_BYTES, *, base: bool = False
) -> list[KafkaRecord]:
    """Step 2: ``changes`` (keys already :func:`key_of` keys) as change-set records of at most
    ``chunk_bytes`` each (a larger single entry alone), a base's when ``base``; ``ValueError`` for
    a state that is not JSON."""
    if type(seq) is not int or not 0 <= seq <= MAX_INT:
        raise ValueError(f"seq must be an int in 0..2**63-1, not {seq!r}")
    seq_header = (SEQ_HEADER, str(seq).encode("ascii"))
    out: list[KafkaRecord] = []
    pending = [changes[i : i + CHUNK_ENTRIES] for i in range(0, len(changes), CHUNK_ENTRIES)][::-1]
    while pending:  # a stack, first chunk on top: records in the order of ``changes``
        chunk = pending.pop()
        value = _encoded(chunk)
        if len(value) > chunk_bytes and len(chunk) > 1:
            half = len(chunk) // 2
            pending += [chunk[half:], chunk[:half]]
            continue
        headers = ((VERSION_HEADER, FORMAT_VERSION), seq_header, (COUNT_HEADER, str(len(chunk)).encode("ascii")))
        out.append(KafkaRecord(value, (*headers, (BASE_HEADER, b"1")) if base else headers))
    return out


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("a JSON object repeats a key")
    return out


#: One decoder for every record (``json.loads`` with hooks builds one per call).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, object_pairs_hook=_object)


def decode_changes(
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[tuple[str, bytes | None]],
    *,
    topic: str = "changelog",
) -> ChangeSet:
    """Step 3: the change set stored at ``partition``/``offset``, checked completely (other
    headers than ``cr.*`` ones are left alone)."""
    where = f"{topic} partition {partition} offset {offset}"
    seq, count, base = _read_headers(where, headers)
    if key is not None:
        raise ChangelogFormatError(f"{where}: a change set has no key")
    if value is None:
        raise ChangelogFormatError(f"{where}: no value")
    try:
        entries = _DECODER.decode(value.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ChangelogFormatError(f"{where}: not the JSON of a change set: {exc}") from exc
    if type(entries) is not list or len(entries) != count or not count:
        raise ChangelogFormatError(f"{where}: not an array of {count} entries (header cr.n), at least one")
    return ChangeSet(seq, tuple(_change(where, n, entry) for n, entry in enumerate(entries)), base)


def _read_headers(where: str, headers: Iterable[tuple[str, bytes | None]]) -> tuple[int, int, bool]:
    """A change set's seq, entry count and base mark from its ``cr.*`` headers (others are left alone)."""
    found: dict[str, bytes | None] = {}
    for name, raw in headers:
        if name.startswith("cr."):
            if name in found:
                raise ChangelogFormatError(f"{where}: header {name} appears twice")
            found[name] = raw
    unknown = sorted(set(found) - {VERSION_HEADER, SEQ_HEADER, COUNT_HEADER, BASE_HEADER})
    if unknown:
        raise ChangelogFormatError(f"{where}: unknown headers {unknown}")
    if found.get(VERSION_HEADER) != FORMAT_VERSION:
        raise ChangelogFormatError(
            f"{where}: format version {found.get(VERSION_HEADER)!r}, expected {FORMAT_VERSION!r}"
        )
    if BASE_HEADER in found and found[BASE_HEADER] != b"1":
        raise ChangelogFormatError(f"{where}: header {BASE_HEADER} is {found[BASE_HEADER]!r}, not b'1'")
    return _decimal(where, SEQ_HEADER, found), _decimal(where, COUNT_HEADER, found), BASE_HEADER in found


def _change(where: str, n: int, entry: object) -> Change:
    """Entry ``n`` of a change set, checked."""
    if type(entry) is not list or len(entry) != 3:
        raise ChangelogFormatError(f"{where}: entry {n} is not [key, src, state]")
    raw_key, src, state = entry
    if type(src) is not int or not 0 <= src <= MAX_INT:
        raise ChangelogFormatError(f"{where}: entry {n}: src {src!r} is not an offset")
    if type(raw_key) is dict:
        raise ChangelogFormatError(f"{where}: entry {n}: a key may not be a JSON object")
    try:
        return (key_of(raw_key) if type(raw_key) is list else raw_key, src, state)
    except ValueError as exc:
        raise ChangelogFormatError(f"{where}: entry {n}: {exc}") from exc


def _decimal(where: str, name: str, found: Mapping[str, bytes | None]) -> int:
    raw = found.get(name)
    if raw is None:
        raise ChangelogFormatError(f"{where}: no header {name}")
    if not _DECIMAL.fullmatch(raw) or int(raw) > MAX_INT:
        raise ChangelogFormatError(f"{where}: header {name} is {raw[:40]!r}, not a decimal in 0..2**63-1")
    return int(raw)


__all__ = [
    "BASE_HEADER",
    "CHUNK_BYTES",
    "FORMAT_VERSION",
    "MATERIALIZE_MIN_CHANGES",
    "ChangeSet",
    "ChangelogFormatError",
    "KafkaRecord",
    "changelog_topic",
    "decode_changes",
    "encode_changes",
    "key_of",
    "validate_topic_name",
]
