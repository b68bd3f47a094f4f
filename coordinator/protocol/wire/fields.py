"""Field checks of the wire protocol: names, integers, numbers, free text, offset maps,
and bounded lists, maps and tables of them.

Every message's ``from_body`` (`coordinator.protocol.wire.protocol`,
`coordinator.protocol.region.messages`) and every status reply's
(`coordinator.protocol.wire.status`, `coordinator.protocol.region.status`) validates its
body with these. Each check raises :class:`~coordinator.protocol.wire.errors.Invalid`
naming the field. Each bound below says which failure it prevents.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs

from coordinator.protocol.wire.errors import Invalid

E = TypeVar("E", bound=enum.Enum)
T = TypeVar("T")

#: Longest group id / operator name / topic accepted (a sanity bound, not Kafka's).
MAX_NAME_LEN = 1024
#: Kafka's bounds: offsets are int64, partitions int32.
MAX_OFFSET = (1 << 63) - 1
MAX_PARTITION = (1 << 31) - 1
#: Bound of the other integers (sequence ids, attempts, region indexes): int64.
MAX_INT = (1 << 63) - 1
#: Longest merge wait a request may ask for (10 minutes): a longer one would keep
#: the contribution in memory for ever (and a huge value would not fit a timer).
MAX_TIMEOUT_MS = 600_000
#: Longest free-text field (an error text, a reason, a host name) kept; the rest is cut.
MAX_TEXT_LEN = 2000
#: Most entries in one checkpoint answer's ``offsets`` (one per partition the
#: member's source holds): bounds the controller's work and memory per answer
#: (a frame of DEFAULT_MAX_FRAME_BYTES holds at most ~200,000 short entries).
MAX_CLAIMS = 100_000
#: Most contributors a merge may name (the server's members-per-group limit is
#: checked as well; this bounds the field itself).
MAX_CONTRIBUTORS = 1_000_000

#: Characters no name may hold: C0/C1 controls, DEL and the Unicode line and
#: paragraph separators (a name with a newline could forge a log line).
CONTROL_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
#: Lone UTF-16 surrogates cannot be encoded as UTF-8 (replies, log records).
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
#: Either of the two above: one search clears a good name (the checks that name the
#: problem run only when it finds something).
_BAD_NAME_CHAR = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")

OffsetMap = dict[tuple[str, int], int]
#: A JSON value as :func:`check_json` returns it.
JsonValue = str | int | float | bool | None | list["JsonValue"] | dict[str, "JsonValue"]
#: A checkpoint answer's entry: ``[topic, partition, from, to]``.
OffsetClaim = list[Any]


def check_name(value: Any, what: str) -> str:
    """A name (group, operator, topic, region, member, incarnation): a non-empty
    string of at most MAX_NAME_LEN characters without control characters."""
    if isinstance(value, str) and value and len(value) <= MAX_NAME_LEN and _BAD_NAME_CHAR.search(value) is None:
        return value
    if not isinstance(value, str) or not value:
        raise Invalid(f"{what} must be a non-empty string, got {value!r:.80}")
    if len(value) > MAX_NAME_LEN:
        raise Invalid(f"{what} is longer than {MAX_NAME_LEN} characters")
    bad = CONTROL_CHARS.search(value)
    if bad is not None:
        raise Invalid(f"{what} holds the control character U+{ord(bad.group()):04X} at {bad.start()}")
    if LONE_SURROGATE.search(value):
        raise Invalid(f"{what} holds a lone UTF-16 surrogate")
    return value


def req_str(body: Mapping[str, Any], name: str) -> str:
    value = body.get(name)
    if type(value) is str and value and len(value) <= MAX_NAME_LEN and _BAD_NAME_CHAR.search(value) is None:
        return value  # a good name: the field's label is built only for a bad one
    return check_name(value, f"field '{name}'")


def check_int(value: Any, what: str, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"{what} must be an integer, got {value!r:.80}")
    if not minimum <= value <= maximum:
        raise Invalid(f"{what} must be in [{minimum}, {maximum}], got {str(value)[:40]}")
    return value


def req_int(body: Mapping[str, Any], name: str, minimum: int = 0, maximum: int = MAX_INT) -> int:
    value = body.get(name)
    if type(value) is int and minimum <= value <= maximum:
        return value  # a good value: the field's label is built only for a bad one
    return check_int(value, f"field '{name}'", minimum, maximum)


def opt_name(body: Mapping[str, Any], name: str) -> str | None:
    """A name field that may be absent or null (None)."""
    return None if body.get(name) is None else req_str(body, name)


def opt_int(body: Mapping[str, Any], name: str, maximum: int = MAX_INT) -> int | None:
    """An integer field in [0, maximum] that may be absent or null (None)."""
    return None if body.get(name) is None else req_int(body, name, 0, maximum)


def req_enum(kind: type[E], body: Mapping[str, Any], name: str) -> E:
    """A field holding one of ``kind``'s values."""
    value = body.get(name)
    try:
        return kind(value)
    except ValueError:
        raise Invalid(f"field {name!r} must be one of {[k.value for k in kind]}, got {value!r:.40}") from None


def req_object(body: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = body.get(name)
    if not isinstance(value, Mapping):
        raise Invalid(f"field {name!r} must be an object")
    return value


def req_bool(body: Mapping[str, Any], name: str) -> bool:
    value = body.get(name)
    if not isinstance(value, bool):
        raise Invalid(f"field '{name}' must be true or false, got {value!r:.80}")
    return value


def opt_bool(body: Mapping[str, Any], name: str, default: bool = False) -> bool:
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise Invalid(f"field '{name}' must be true or false, got {value!r:.80}")
    return value


def safe_text(value: str, limit: int = MAX_TEXT_LEN) -> str:
    """Free text (an error message, a reason, a host) cut to ``limit`` characters,
    control characters escaped as ``\\xNN`` so it cannot forge log lines."""
    cut = value[:limit]
    return CONTROL_CHARS.sub(lambda m: f"\\x{ord(m.group()):02x}", cut)


def opt_text(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise Invalid(f"field '{name}' must be a string or null, got {type(value).__name__}")
    return safe_text(value)


def check_json(value: Any, where: str, *, max_depth: int, max_items: int, max_fields: int, depth: int = 0) -> JsonValue:
    """An untrusted JSON value: scalars (text cut and escaped like any free text,
    numbers finite), lists of at most ``max_items`` and objects of at most
    ``max_fields`` keyed by names, nested at most ``max_depth`` deep."""
    if isinstance(value, str):
        return safe_text(value)
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Invalid(f"{where} must be finite")
        return value
    if depth >= max_depth:
        raise Invalid(f"{where} is nested more than {max_depth} deep")

    def inner(v: Any, at: str) -> JsonValue:
        return check_json(v, at, max_depth=max_depth, max_items=max_items, max_fields=max_fields, depth=depth + 1)

    if isinstance(value, list):
        if len(value) > max_items:
            raise Invalid(f"{where} has more than {max_items} entries")
        return [inner(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        if len(value) > max_fields:
            raise Invalid(f"{where} has more than {max_fields} fields")
        return {check_name(k, f"a key of {where}"): inner(v, f"{where}.{k}") for k, v in value.items()}
    raise Invalid(f"{where} is not a JSON value")


def req_number(body: Mapping[str, Any], name: str) -> float:
    """A finite number >= 0 (seconds, milliseconds), int or float on the wire."""
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise Invalid(f"field {name!r} must be a finite number >= 0, got {value!r:.40}")
    return float(value)


def opt_number(body: Mapping[str, Any], name: str) -> float | None:
    """A number as :func:`req_number` that may be absent or null (None)."""
    return None if body.get(name) is None else req_number(body, name)


def decode_part(where: str, decode: Callable[[Mapping[str, Any]], T], value: Mapping[str, Any]) -> T:
    """``decode(value)``, its failure prefixed with ``where`` (a nested object's place)."""
    try:
        return decode(value)
    except Invalid as exc:
        raise Invalid(f"{where}: {exc.message}") from None


def _items(body: Mapping[str, Any], name: str, limit: int) -> list[Any]:
    value = body.get(name)
    if not isinstance(value, list):
        raise Invalid(f"field {name!r} must be a list")
    if len(value) > limit:
        raise Invalid(f"field {name!r} has {len(value)} entries, more than {limit}")
    return value


def decode_list(body: Mapping[str, Any], name: str, limit: int, item: Callable[[Mapping[str, Any]], T]) -> list[T]:
    """A list of at most ``limit`` objects, each decoded by ``item``."""
    out = []
    for i, v in enumerate(_items(body, name, limit)):
        if not isinstance(v, Mapping):
            raise Invalid(f"{name}[{i}] must be an object")
        out.append(decode_part(f"{name}[{i}]", item, v))
    return out


def decode_names(body: Mapping[str, Any], name: str, limit: int) -> tuple[str, ...]:
    """A list of at most ``limit`` names."""
    return tuple(check_name(v, f"{name}[{i}]") for i, v in enumerate(_items(body, name, limit)))


def decode_map(body: Mapping[str, Any], name: str, limit: int, item: Callable[[Mapping[str, Any]], T]) -> dict[str, T]:
    """An object of at most ``limit`` entries keyed by names, each value an object decoded by ``item``."""
    value = _entries(body, name, limit)
    out = {}
    for key, v in value.items():
        check_name(key, f"a key of {name!r}")
        if not isinstance(v, Mapping):
            raise Invalid(f"{name}[{key!r:.80}] must be an object")
        out[key] = decode_part(f"{name}[{key!r:.80}]", item, v)
    return out


def decode_number_table(body: Mapping[str, Any], name: str, limit: int) -> dict[str, float]:
    """An object of at most ``limit`` entries keyed by names, each a number as
    :func:`req_number` (an int stays an int: a count limit)."""
    value = _entries(body, name, limit)
    out: dict[str, float] = {}
    for k in value:
        req_number(value, k)
        out[check_name(k, f"a key of {name!r}")] = value[k]
    return out


def decode_count_table(body: Mapping[str, Any], name: str, limit: int) -> dict[str, int]:
    """An object of at most ``limit`` entries keyed by names, each an integer >= 0."""
    value = _entries(body, name, limit)
    return {
        check_name(k, f"a key of {name!r}"): check_int(v, f"{name}[{k!r:.80}]", 0, MAX_INT) for k, v in value.items()
    }


def _entries(body: Mapping[str, Any], name: str, limit: int) -> Mapping[str, Any]:
    value = req_object(body, name)
    if len(value) > limit:
        raise Invalid(f"field {name!r} has {len(value)} entries, more than {limit}")
    return value


def encode_offsets(offsets: Mapping[tuple[str, int], int]) -> list[list[Any]]:
    return [[t, p, o] for (t, p), o in offsets.items()]


def decode_offsets(value: Any, name: str = "offsets") -> OffsetMap:
    """``[[topic, partition, offset], ...]`` -> ``{(topic, partition): offset}``, validated.

    Topics are names (see :func:`check_name`), partitions int32 >= 0, offsets
    int64 >= 0 (Kafka's types).
    """
    if not isinstance(value, list):
        raise Invalid(f"field '{name}' must be a list of [topic, partition, offset]")
    out: OffsetMap = {}
    topics: set[str] = set()  # topic names already checked (they repeat)
    # Fast path (batches of 10^4..10^5 entries): exact type checks, bool is not int.
    for i, item in enumerate(value):
        if type(item) is not list or len(item) != 3:
            raise Invalid(f"{name}[{i}] must be [topic, partition, offset], got {item!r:.80}")
        t, p, o = item
        if (
            type(t) is not str
            or type(p) is not int
            or type(o) is not int
            or p < 0
            or o < 0
            or p > MAX_PARTITION
            or o > MAX_OFFSET
        ):
            _explain_entry(name, i, t, p, o)
        if t not in topics:
            check_name(t, f"{name}[{i}]: topic")
            topics.add(t)
        out[(t, p)] = o
    if len(out) != len(value):
        seen: set[tuple[str, int]] = set()
        for t, p, _ in value:
            if (t, p) in seen:
                raise Invalid(f"{name}: ({t}, {p}) appears twice")
            seen.add((t, p))
    return out


def _explain_entry(name: str, i: int, t: Any, p: Any, o: Any) -> None:
    check_name(t, f"{name}[{i}]: topic")
    check_int(p, f"{name}[{i}]: partition", 0, MAX_PARTITION)
    check_int(o, f"{name}[{i}]: offset", 0, MAX_OFFSET)


def check_offsets(offsets: Mapping[tuple[str, int], int], name: str = "offsets") -> OffsetMap:
    """A caller's map validated whole before it is sent in chunks (same rules as decode_offsets)."""
    return decode_offsets([[t, p, o] for (t, p), o in dict(offsets).items()], name)


def decode_offset_claims(value: Any, name: str = "offsets") -> list[OffsetClaim]:
    """A checkpoint answer's offsets, validated: a list of at most MAX_CLAIMS
    entries, each ``[topic, partition, from, to]`` (``0 <= from <= to``, the
    interval the member processed, coordinator/region/continuity.py); topics are names,
    partitions int32 >= 0, offsets int64 >= 0; a (topic, partition) at most once.
    Returns clean copies of the entries."""
    if not isinstance(value, list):
        raise Invalid(f"field '{name}' must be a list of [topic, partition, from, to]")
    if len(value) > MAX_CLAIMS:
        raise Invalid(f"field '{name}' has {len(value)} entries, more than {MAX_CLAIMS}")
    out: list[OffsetClaim] = []
    seen: set[tuple[str, int]] = set()
    topics: set[str] = set()
    for i, item in enumerate(value):
        if type(item) is not list or len(item) != 4:
            raise Invalid(f"{name}[{i}] must be [topic, partition, from, to], got {item!r:.80}")
        t, p = item[0], item[1]
        if type(t) is not str or t not in topics:  # the type first: a list is not hashable
            check_name(t, f"{name}[{i}]: topic")
            topics.add(t)
        check_int(p, f"{name}[{i}]: partition", 0, MAX_PARTITION)
        start = check_int(item[2], f"{name}[{i}]: from", 0, MAX_OFFSET)
        end = check_int(item[3], f"{name}[{i}]: to", 0, MAX_OFFSET)
        if start > end:
            raise Invalid(f"{name}[{i}]: from {start} is after to {end}")
        if (t, p) in seen:
            raise Invalid(f"{name}: ({t}, {p}) appears twice")
        seen.add((t, p))
        out.append([t, p, start, end])
    return out


#: The metadata key under which `encoded` keeps a field's wire encoder.
_ENCODE = "wire_encode"


def encoded(encode: Callable[[Any], Any]) -> dict[str, Callable[[Any], Any]]:
    """The ``metadata`` of an attrs field that `FieldsBody` sends as ``encode(value)``
    (an offset map as its list of entries, a list sorted) instead of the value itself."""
    return {_ENCODE: encode}


def _sent(field: attrs.Attribute[Any], value: Any) -> bool:
    return field.default is attrs.NOTHING or value != field.default


def _wire_value(_instance: Any, field: attrs.Attribute[Any], value: Any) -> Any:
    encode = field.metadata.get(_ENCODE)
    return value if encode is None else encode(value)


@attrs.frozen
class FieldsBody:
    """A message whose wire body is its fields by name, in field order; a field left
    at its default (None, false, empty) is not sent, a field declared with
    ``metadata=encoded(fn)`` is sent as ``fn(value)``."""

    def to_body(self) -> dict[str, Any]:
        return attrs.asdict(self, recurse=False, filter=_sent, value_serializer=_wire_value)
