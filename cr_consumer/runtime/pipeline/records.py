"""The record that flows through a pipeline, and its JSON form for sinks.

A pipeline moves :class:`Record` objects (or any object with the same
attributes, such as the consumer operator's own record type) in batches. Every
record keeps its provenance (topic, partition, offset) through map / filter /
flat_map / aggregate, so a sink can write it and a verifier can check that every
input offset appears exactly once.

JSON form of keys and values (used by the file and console sinks):

* ``bytes`` that are valid UTF-8 become a JSON string;
* other ``bytes`` become ``{"base64": "<standard base64>"}`` (the marker object),
  so no byte string is ever lost or mangled;
* ``None`` becomes ``null``; ``str``, numbers, booleans, lists and dicts are
  written as JSON as they are; anything else raises ``TypeError`` naming the
  record's topic/partition/offset (map it to a JSON type first).

A record with headers gets a ``"headers"`` field after its value: a list of
``[name, value]`` pairs in record order, each value as a key or value above
(UTF-8 bytes as a string, other bytes as the marker object, ``None`` as
``null``); a record without headers has no such field.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from itertools import islice
from operator import attrgetter
from typing import Any

import attrs

from cr_consumer.kafka.client import Header, KafkaRecord
from cr_consumer.kafka.kafka_python.records import ConsumerRecord

#: The key of the marker object that holds non-UTF-8 bytes as base64.
BASE64_MARKER = "base64"

encode_str = json.encoder.encode_basestring_ascii  # C implementation: fast
#: Bytes that stand for themselves inside a JSON string (printable ASCII but '"'
#: and '\\'): a byte string made of them only is written as '"' + its text + '"'.
_JSON_SAFE_BYTES = bytes(b for b in range(0x20, 0x7F) if b not in (0x22, 0x5C))


@attrs.frozen(slots=True)
class Record:
    """One tuple: its provenance and its (possibly transformed) key and value."""

    topic: str
    partition: int
    offset: int
    timestamp: int | None = None
    key: Any = None
    value: Any = None
    headers: tuple[Header, ...] = ()


def replace(record: Any, **changes: Any) -> Any:
    """A copy of ``record`` with ``changes``; works for attrs classes and namedtuples."""
    if attrs.has(type(record)):
        return attrs.evolve(record, **changes)
    if hasattr(record, "_replace"):
        return record._replace(**changes)
    fields = {
        name: getattr(record, name) for name in ("topic", "partition", "offset", "timestamp", "key", "value", "headers")
    }
    fields.update(changes)
    return Record(**fields)


def json_value(value: Any) -> Any:
    """A JSON-ready form of a key or value (see the module docstring)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return {BASE64_MARKER: base64.b64encode(raw).decode("ascii")}
    return value


def decode_json_value(value: Any) -> Any:
    """Inverse of :func:`json_value` for byte strings: marker objects become bytes."""
    if isinstance(value, dict) and len(value) == 1 and BASE64_MARKER in value:
        return base64.b64decode(value[BASE64_MARKER])
    return value


def field_json(value: Any) -> str:
    """JSON text of a key/value: a fast path for the common str/bytes/None/int cases."""
    if value is None:
        return "null"
    if isinstance(value, bytes):
        try:
            return encode_str(value.decode("utf-8"))
        except UnicodeDecodeError:
            return '{"base64":"' + base64.b64encode(value).decode("ascii") + '"}'
    if isinstance(value, str):
        return encode_str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(json_value(value), separators=(",", ":"), default=_reject)


def _reject(obj: Any) -> Any:
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return json_value(obj)
    if isinstance(obj, (tuple, set, frozenset)):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def to_json_line(record: Any, extra: str = "") -> str:
    """One JSON line (with trailing newline) carrying topic, partition, offset,
    timestamp, key and value; ``extra`` is pre-encoded ``,"name":value`` text."""
    try:
        ts = record.timestamp
        return (
            '{"topic":'
            + encode_str(record.topic)
            + ',"partition":'
            + str(int(record.partition))
            + ',"offset":'
            + str(int(record.offset))
            + ',"timestamp":'
            + ("null" if ts is None else str(int(ts)))
            + ',"key":'
            + field_json(record.key)
            + ',"value":'
            + field_json(record.value)
            + _headers_json(record)
            + extra
            + "}\n"
        )
    except (TypeError, ValueError) as exc:
        where = f"{getattr(record, 'topic', '?')}/{getattr(record, 'partition', '?')}@{getattr(record, 'offset', '?')}"
        raise TypeError(f"record {where} cannot be written as JSON: {exc}") from exc


def _headers_json(record: Any) -> str:
    """``,"headers":[[name,value],...]`` for a record with headers, else "" (a record type
    without a ``headers`` field has none)."""
    headers = getattr(record, "headers", None)
    if not headers:
        return ""
    try:
        pairs = ",".join("[" + encode_str(name) + "," + field_json(value) + "]" for name, value in headers)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"headers must be (str, bytes or None) pairs, got {headers!r:.200}") from exc
    return ',"headers":[' + pairs + "]"


def to_json_bytes(records: list[Any], extra: str = "") -> bytes:
    """The UTF-8 bytes of :func:`to_json_lines`: the hot path of the file sink. A
    plain batch (:func:`_plain_batch_json`: the source's records as fetched, one
    partition) is formatted in C straight to bytes; any other batch is
    :func:`to_json_lines` encoded."""
    if records:
        data = _plain_batch_json(records, extra)
        if data is not None:
            return data
    return to_json_lines(records, extra).encode("utf-8")


def to_json_lines(records: list[Any], extra: str = "") -> str:
    """:func:`to_json_line` for a whole batch, as one string, record by record:
    the topic/partition prefix is built once per run of equal (topic,
    partition); str/bytes/None keys and values are encoded inline, anything
    else goes through :func:`field_json`; headers are looked at per record only
    in a batch where some record has any (one C pass finds out)."""
    out: list[str] = []
    append = out.append
    enc = encode_str
    last = None
    prefix = ""
    suffix = extra + "}\n"
    try:
        any_headers = any(map(_HEADERS, records))
    except AttributeError:  # a record type without headers
        any_headers = any(getattr(r, "headers", None) for r in records)
    for r in records:
        topic, partition = r.topic, r.partition
        if (topic, partition) != last:
            last = (topic, partition)
            if not isinstance(topic, str) or not isinstance(partition, int):
                return "".join(out) + "".join(to_json_line(x, extra) for x in records[len(out) :])
            prefix = '{"topic":' + enc(topic) + ',"partition":' + str(int(partition)) + ',"offset":'
        k, v, ts, off = r.key, r.value, r.timestamp, r.offset
        if type(v) is bytes:
            try:
                vj = enc(v.decode("utf-8"))
            except UnicodeDecodeError:
                vj = field_json(v)
        elif v is None:
            vj = "null"
        else:
            vj = _field_json_checked(r, v)
        if k is None:
            kj = "null"
        elif type(k) is bytes:
            try:
                kj = enc(k.decode("utf-8"))
            except UnicodeDecodeError:
                kj = field_json(k)
        else:
            kj = _field_json_checked(r, k)
        if type(off) is not int or (ts is not None and type(ts) is not int):
            append(to_json_line(r, extra))
            continue
        hj = _headers_json_checked(r) if any_headers else ""
        append(f'{prefix}{off},"timestamp":{"null" if ts is None else ts},"key":{kj},"value":{vj}{hj}{suffix}')
    return "".join(out)


_HEADERS = attrgetter("headers")
_COLUMNS = attrgetter("topic", "partition", "offset", "timestamp", "key", "value", "headers")
#: The positions of (topic, partition, offset, timestamp, key, value, headers) in the
#: source's tuple record types (zip(*batch) is one C pass); kafka-python's
#: ConsumerRecord is (topic, partition, leader_epoch, offset, timestamp, ..., key, value, headers, ...).
_TUPLE_COLUMNS: dict[type, tuple[int, ...]] = {
    KafkaRecord: (0, 1, 2, 3, 5, 6, 7),
    ConsumerRecord: (0, 1, 3, 4, 6, 7, 8),
}


def _columns(records: list[Any]) -> tuple[Sequence[Any], ...]:
    """(topics, partitions, offsets, timestamps, keys, values, headers) of a batch, each a
    sequence; AttributeError when a record lacks a field."""
    layout = _TUPLE_COLUMNS.get(type(records[0]))
    if layout is not None and len(set(map(type, records))) == 1:
        transposed = tuple(islice(zip(*records), layout[-1] + 1))
        return tuple(transposed[i] for i in layout)
    return tuple(zip(*map(_COLUMNS, records)))


def _plain_bytes(column: Sequence[Any]) -> bool:
    """Every item is bytes-like, made of :data:`_JSON_SAFE_BYTES` only (two C calls;
    ``join`` refuses None and str with a TypeError, which the caller takes as
    "not plain")."""
    return not b"".join(column).translate(None, _JSON_SAFE_BYTES)


def _plain_batch_json(records: list[Any], extra: str) -> bytes | None:
    """UTF-8 JSON lines of a *plain* batch, or None for any other (the caller
    then takes the general path, which gives the same text for a plain batch).

    Plain: every record has the fields of :class:`Record` (a kafka-python
    ``ConsumerRecord``, the client seam's ``KafkaRecord``, a ``Record``), one
    ``str`` topic and one ``int`` partition, integer offsets and timestamps, no
    headers, keys all ``None`` or all plain bytes, values all plain bytes ("plain":
    printable ASCII without '"' and '\\', i.e. their JSON string is the bytes
    themselves in quotes). That is the source's records as fetched.

    The columns are read in C, and the batch is ONE ``bytes`` %-format of a
    line template repeated per record (``%d`` offset, ``%d`` timestamp,
    ``[%s key,] %s`` value bytes, copied as they are): no Python bytecode and
    no decode/encode per record. A ``%d`` of None or a str raises TypeError,
    which means "not plain" too. About 0.24 us per 100-byte record against 0.34
    for a list of f-strings, and the text file's encode is gone."""
    try:
        topics, partitions, offsets, timestamps, keys, values, headers = _columns(records)
        topic, partition = topics[0], partitions[0]
        if type(topic) is not str or type(partition) is not int or any(headers):
            return None
        n = len(records)
        if topics.count(topic) != n or partitions.count(partition) != n or not _plain_bytes(values):
            return None
        head = ('{"topic":' + encode_str(topic) + ',"partition":' + str(partition)).replace("%", "%%")
        tail = ('"' + extra + "}\n").replace("%", "%%")
        if keys.count(None) == n:
            line = head + ',"offset":%d,"timestamp":%d,"key":null,"value":"%s' + tail
            fields = _interleave(n, offsets, timestamps, values)
        elif _plain_bytes(keys):
            line = head + ',"offset":%d,"timestamp":%d,"key":"%s","value":"%s' + tail
            fields = _interleave(n, offsets, timestamps, keys, values)
        else:
            return None
        return (line.encode("ascii") * n) % fields
    except (AttributeError, TypeError, ValueError):  # not plain: a missing field, None, str, ...
        return None


def _interleave(n: int, *columns: Sequence[Any]) -> tuple[Any, ...]:
    """The columns' items record by record (``c0[0], c1[0], ..., c0[1], ...``), the
    %-format's arguments: one slice assignment per column (C), about a fifth of
    the cost of ``tuple(chain.from_iterable(zip(*columns)))``."""
    k = len(columns)
    out: list[Any] = [None] * (n * k)
    for i, column in enumerate(columns):
        out[i::k] = column  # ValueError unless len(column) == n: "not plain"
    return tuple(out)


def _headers_json_checked(record: Any) -> str:
    try:
        return _headers_json(record)
    except TypeError as exc:
        where = f"{getattr(record, 'topic', '?')}/{getattr(record, 'partition', '?')}@{getattr(record, 'offset', '?')}"
        raise TypeError(f"record {where} cannot be written as JSON: {exc}") from exc


def _field_json_checked(record: Any, value: Any) -> str:
    try:
        return field_json(value)
    except (TypeError, ValueError) as exc:
        where = f"{getattr(record, 'topic', '?')}/{getattr(record, 'partition', '?')}@{getattr(record, 'offset', '?')}"
        raise TypeError(f"record {where} cannot be written as JSON: {exc}") from exc
