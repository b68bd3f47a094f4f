"""Wire protocol of the coordinator: the envelope, the messages, their validation.

Transport: ZeroMQ. The server has one ROUTER socket; each client thread has a
DEALER socket. A message is exactly ONE ZeroMQ frame holding one UTF-8 JSON
object, the *envelope*::

    {"v": 1, "id": "a1b2-17", "type": "register", "body": {...}}

* ``v``    protocol version (int). The server speaks :data:`PROTOCOL_VERSION`;
  any other value gets an ``UNSUPPORTED_VERSION`` error reply.
* ``id``   request id chosen by the client (string or int, unique per logical
  request; a retry of the same request reuses it). Replies echo it; a reply
  to a request whose id could not be read carries ``"id": null``.
  Unsolicited pushes from the server also carry ``"id": null``.
* ``type`` message type. A successful reply's type is the request's type with
  ``_reply`` appended (``register`` -> ``register_reply``); an error reply's type
  is ``error`` with body ``{"code": CODE, "message": TEXT}`` (codes in
  :mod:`coordinator.wire.errors`).
* ``body`` a JSON object with the message's fields (below).

Offset maps: JSON objects only have string keys, so a map
``{(topic, partition): offset}`` travels as a list of triples
``[[topic, partition, offset], ...]`` (:func:`encode_offsets`,
:func:`decode_offsets`); a (topic, partition) may appear only once.

Each message is a frozen attrs class with ``TYPE``, ``to_body()`` and
``from_body(body)``; ``from_body`` validates every field and raises
:class:`coordinator.wire.errors.Invalid` naming the field.

Bounds (each constant below says which failure it prevents): a frame must be
strict UTF-8, nest at most ``MAX_REQUEST_DEPTH`` levels and hold no lone
UTF-16 surrogate (:func:`decode`, ``MALFORMED``), so no string that reaches a
handler, a reply or a log record fails to encode; names are at most
``MAX_NAME_LEN`` characters without control characters (:func:`check_name`);
integers are bounded (offsets int64, partitions int32, ids int64,
``timeout_ms`` at most ``MAX_TIMEOUT_MS``); free text is cut and escaped
(:func:`safe_text`). The full reference of
every message, reply and failure behaviour is docs/protocol.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from coordinator.wire.errors import CoordinatorError, ErrorCode, Invalid, Malformed, UnsupportedVersion

PROTOCOL_VERSION = 1
#: Default largest frame the server parses; a larger one gets TOO_LARGE unread.
DEFAULT_MAX_FRAME_BYTES = 4 * 1024 * 1024
#: Longest group id / operator name / topic accepted (a sanity bound, not Kafka's).
MAX_NAME_LEN = 1024
#: Longest request id (characters): ids are echoed and kept in the retry-dedup
#: cache, so a long id must not cost memory or reply bytes.
MAX_ID_LEN = 128
#: Longest message type (characters): unknown types are echoed in the error.
MAX_TYPE_LEN = 64
#: Deepest JSON nesting of a request (the envelope counts as 1; real requests
#: need at most 4). Prevents a deeply nested frame from exhausting the parser's
#: recursion (RecursionError) or a later serialisation of a stored value.
MAX_REQUEST_DEPTH = 8
#: Deepest nesting of a reply or push the client accepts (status replies nest more).
MAX_REPLY_DEPTH = 64
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
#: Most contributors a merge may name (the server's members-per-group limit is
#: checked as well; this bounds the field itself).
MAX_CONTRIBUTORS = 1_000_000

#: Characters no name may hold: C0/C1 controls, DEL and the Unicode line and
#: paragraph separators (a name with a newline could forge a log line).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
#: Lone UTF-16 surrogates cannot be encoded as UTF-8 (replies, log records).
_SURROGATE = re.compile("[\ud800-\udfff]")
#: A JSON string literal (to skip brackets inside strings when measuring depth).
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*+"', re.DOTALL)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
_INNERMOST = re.compile(rb"\[\]|\{\}")
#: A \uD800-\uDFFF escape somewhere in the text (then strings are checked one by one).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")

OffsetMap = dict[tuple[str, int], int]


# --------------------------------------------------------------------------- envelope


@attrs.frozen
class Envelope:
    v: int
    id: str | int | None
    type: str
    body: dict[str, Any]


class BadEnvelope(Exception):
    """A frame that is not a valid request envelope; ``error`` is the reply to send."""

    def __init__(self, error: CoordinatorError, request_id: str | int | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.request_id = request_id


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def encode(msg_type: str, body: Mapping[str, Any], request_id: str | int | None) -> bytes:
    """One envelope as a frame."""
    return _dumps({"v": PROTOCOL_VERSION, "id": request_id, "type": msg_type, "body": body})


def encode_body(body: Mapping[str, Any]) -> bytes:
    """A body encoded once, for replies sent to many requests (see encode_prepared)."""
    return _dumps(body)


def encode_prepared(msg_type: str, body_json: bytes, request_id: str | int | None) -> bytes:
    """Same bytes as ``encode`` would give, from an already encoded body."""
    head = _dumps({"v": PROTOCOL_VERSION, "id": request_id, "type": msg_type, "body": None})
    return head[: -len(b"null}")] + body_json + b"}"


def encode_error(code: ErrorCode, message: str, request_id: str | int | None) -> bytes:
    return encode("error", {"code": code.value, "message": message}, request_id)


def reply_type(request_type: str) -> str:
    return f"{request_type}_reply"


def json_depth_exceeds(frame: bytes, max_depth: int) -> bool:
    """True when the JSON text nests arrays/objects deeper than ``max_depth``.

    Measured without parsing (C-speed passes): string literals are removed,
    everything but brackets is deleted, then innermost ``[]``/``{}`` pairs are
    removed one level per pass. A text whose brackets do not balance is left
    to the parser to reject.
    """
    brackets = _JSON_STRING.sub(b"", frame).translate(None, _NOT_BRACKET)
    for _ in range(max_depth):
        if not brackets:
            return False
        stripped = _INNERMOST.sub(b"", brackets)
        if stripped == brackets:
            return False  # unbalanced: not JSON, the parser says so
        brackets = stripped
    return bool(brackets) and _INNERMOST.search(brackets) is not None


def _has_lone_surrogate(obj: Any) -> bool:
    """True if any string (key or value) in the parsed JSON holds a lone surrogate."""
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _valid_id(rid: Any) -> bool:
    if isinstance(rid, bool):
        return False
    if isinstance(rid, int):
        return -MAX_INT - 1 <= rid <= MAX_INT
    return isinstance(rid, str) and len(rid) <= MAX_ID_LEN and not _CONTROL.search(rid)


def decode(frame: bytes, max_depth: int = MAX_REQUEST_DEPTH) -> Envelope:
    """Parse and check an envelope (requests and replies alike).

    1. The frame must be strict UTF-8 (no encoded surrogates such as ED A0 80).
    2. Its nesting must not exceed ``max_depth`` (measured before parsing).
    3. It must parse as JSON; no string in it may hold a lone surrogate
       (a ``\\ud800`` escape), so nothing downstream meets a string that
       cannot be encoded again.
    4. The envelope fields are checked; ``id`` is echoed only if it is valid.

    Raises :class:`BadEnvelope` carrying the error to reply with, and the
    request id when it could be read.
    """
    try:
        text = frame.decode("utf-8") if isinstance(frame, bytes | bytearray | memoryview) else frame
    except UnicodeDecodeError as exc:
        raise BadEnvelope(Malformed(f"frame is not valid UTF-8 (byte {exc.start}: {exc.reason})")) from None
    raw = frame if isinstance(frame, bytes | bytearray) else text.encode("utf-8", "surrogatepass")
    if json_depth_exceeds(bytes(raw), max_depth):
        raise BadEnvelope(Malformed(f"frame nests JSON deeper than {max_depth} levels"))
    try:
        obj = json.loads(text)
    except RecursionError:
        raise BadEnvelope(Malformed(f"frame nests JSON deeper than {max_depth} levels")) from None
    except ValueError as exc:
        raise BadEnvelope(Malformed(f"frame is not JSON: {str(exc)[:200]}")) from None
    if _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(obj):
        raise BadEnvelope(Malformed("frame holds a lone UTF-16 surrogate (\\ud800-\\udfff escape); strings must be valid Unicode"))
    if not isinstance(obj, dict):
        raise BadEnvelope(Malformed(f"envelope must be a JSON object, got {type(obj).__name__}"))
    rid = obj.get("id")
    if rid is not None and not _valid_id(rid):
        raise BadEnvelope(
            Malformed(f"envelope field 'id' must be a string of at most {MAX_ID_LEN} printable characters, "
                      "an int64 or null")
        )
    v = obj.get("v")
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadEnvelope(Malformed("envelope field 'v' (protocol version, int) is missing"), rid)
    if v != PROTOCOL_VERSION:
        raise BadEnvelope(
            UnsupportedVersion(f"protocol version {str(v)[:20]} is not supported; this server speaks {PROTOCOL_VERSION}"),
            rid,
        )
    msg_type = obj.get("type")
    if not isinstance(msg_type, str) or not msg_type or len(msg_type) > MAX_TYPE_LEN or _CONTROL.search(msg_type):
        raise BadEnvelope(
            Malformed(f"envelope field 'type' must be a non-empty string of at most {MAX_TYPE_LEN} printable characters"),
            rid,
        )
    body = obj.get("body", {})
    if not isinstance(body, dict):
        raise BadEnvelope(Malformed("envelope field 'body' must be a JSON object"), rid)
    extra = set(obj) - {"v", "id", "type", "body"}
    if extra:
        raise BadEnvelope(Malformed(f"unknown envelope fields {sorted(extra)[:10]!r:.200}"), rid)
    return Envelope(v=v, id=rid, type=msg_type, body=body)


# --------------------------------------------------------------------------- field checks


def check_name(value: Any, what: str) -> str:
    """A name (group, operator, topic, region, member, incarnation): a non-empty
    string of at most MAX_NAME_LEN characters without control characters."""
    if not isinstance(value, str) or not value:
        raise Invalid(f"{what} must be a non-empty string, got {value!r:.80}")
    if len(value) > MAX_NAME_LEN:
        raise Invalid(f"{what} is longer than {MAX_NAME_LEN} characters")
    bad = _CONTROL.search(value)
    if bad is not None:
        raise Invalid(f"{what} holds the control character U+{ord(bad.group()):04X} at {bad.start()}")
    if _SURROGATE.search(value):
        raise Invalid(f"{what} holds a lone UTF-16 surrogate")
    return value


def req_str(body: Mapping[str, Any], name: str) -> str:
    return check_name(body.get(name), f"field '{name}'")


def check_int(value: Any, what: str, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"{what} must be an integer, got {value!r:.80}")
    if not minimum <= value <= maximum:
        raise Invalid(f"{what} must be in [{minimum}, {maximum}], got {str(value)[:40]}")
    return value


def req_int(body: Mapping[str, Any], name: str, minimum: int = 0, maximum: int = MAX_INT) -> int:
    return check_int(body.get(name), f"field '{name}'", minimum, maximum)


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
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", cut)


def opt_text(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise Invalid(f"field '{name}' must be a string or null, got {type(value).__name__}")
    return safe_text(value)


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
    """Validate a caller's map before it is sent (same rules as decode_offsets)."""
    return decode_offsets([[t, p, o] for (t, p), o in dict(offsets).items()], name)


# --------------------------------------------------------------------------- requests


@attrs.frozen
class Ping:
    TYPE: ClassVar[str] = "ping"

    def to_body(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Ping:
        return cls()


@attrs.frozen
class Status:
    TYPE: ClassVar[str] = "status"

    def to_body(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Status:
        return cls()


@attrs.frozen
class Register:
    TYPE: ClassVar[str] = "register"
    group: str
    region_index: int
    operator: str

    def to_body(self) -> dict[str, Any]:
        return {"group": self.group, "region_index": self.region_index, "operator": self.operator}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Register:
        return cls(req_str(body, "group"), req_int(body, "region_index", 0, MAX_INT), req_str(body, "operator"))


@attrs.frozen
class Unregister:
    TYPE: ClassVar[str] = "unregister"
    group: str
    operator: str

    def to_body(self) -> dict[str, Any]:
        return {"group": self.group, "operator": self.operator}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Unregister:
        return cls(req_str(body, "group"), req_str(body, "operator"))


@attrs.frozen
class Members:
    """``members {group, operator?, seq?}``: the registered names.

    ``operator`` (optional): the caller's own name; renews its registration
    lease. ``seq`` (optional): a checkpoint id; the first call naming it fixes
    the member list answered to every later call naming it, so every member's
    checkpoint of ``seq`` records the same members (the same N at the merge).
    """

    TYPE: ClassVar[str] = "members"
    group: str
    operator: str | None = None
    seq: int | None = None

    def to_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"group": self.group}
        if self.operator is not None:
            body["operator"] = self.operator
        if self.seq is not None:
            body["seq"] = self.seq
        return body

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Members:
        operator = None if body.get("operator") is None else req_str(body, "operator")
        seq = None if body.get("seq") is None else req_int(body, "seq", 0)
        return cls(req_str(body, "group"), operator, seq)


@attrs.frozen
class PutInitialOffsets:
    TYPE: ClassVar[str] = "put_initial_offsets"
    group: str
    offsets: OffsetMap

    def to_body(self) -> dict[str, Any]:
        return {"group": self.group, "offsets": encode_offsets(self.offsets)}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> PutInitialOffsets:
        return cls(req_str(body, "group"), decode_offsets(body.get("offsets")))


@attrs.frozen
class GetInitialOffsets:
    TYPE: ClassVar[str] = "get_initial_offsets"
    group: str

    def to_body(self) -> dict[str, Any]:
        return {"group": self.group}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> GetInitialOffsets:
        return cls(req_str(body, "group"))


@attrs.frozen
class MergeCheckpoint:
    TYPE: ClassVar[str] = "merge_checkpoint"
    group: str
    seq: int
    attempt: int
    n_contributors: int
    operator: str
    offsets: OffsetMap
    timeout_ms: int

    def to_body(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "seq": self.seq,
            "attempt": self.attempt,
            "n_contributors": self.n_contributors,
            "operator": self.operator,
            "offsets": encode_offsets(self.offsets),
            "timeout_ms": self.timeout_ms,
        }

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> MergeCheckpoint:
        return cls(
            group=req_str(body, "group"),
            seq=req_int(body, "seq", 0),
            attempt=req_int(body, "attempt", 0),
            n_contributors=req_int(body, "n_contributors", 1, MAX_CONTRIBUTORS),
            operator=req_str(body, "operator"),
            offsets=decode_offsets(body.get("offsets")),
            timeout_ms=req_int(body, "timeout_ms", 1, MAX_TIMEOUT_MS),
        )


@attrs.frozen
class RetireCheckpoint:
    TYPE: ClassVar[str] = "retire_checkpoint"
    group: str
    seq: int

    def to_body(self) -> dict[str, Any]:
        return {"group": self.group, "seq": self.seq}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RetireCheckpoint:
        return cls(req_str(body, "group"), req_int(body, "seq", 0))


@attrs.frozen
class SetResetPending:
    TYPE: ClassVar[str] = "set_reset_pending"
    group: str
    value: bool

    def to_body(self) -> dict[str, Any]:
        return {"group": self.group, "value": self.value}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> SetResetPending:
        return cls(req_str(body, "group"), req_bool(body, "value"))


# --------------------------------------------------------------------------- replies
# Reply bodies are small; they are built and read with these helpers so both
# sides agree on the field names.


def members_reply(members: list[str], region_index: int | None) -> dict[str, Any]:
    return {"members": list(members), "region_index": region_index}


def offsets_reply(offsets: Mapping[tuple[str, int], int]) -> dict[str, Any]:
    return {"offsets": encode_offsets(offsets)}


def merge_reply(offsets: Mapping[tuple[str, int], int], contributors: list[str]) -> dict[str, Any]:
    return {"offsets": encode_offsets(offsets), "contributors": sorted(contributors)}


#: Built-in request types (services register their own handlers for them).
REQUESTS: dict[str, type] = {
    cls.TYPE: cls
    for cls in (
        Ping,
        Status,
        Register,
        Unregister,
        Members,
        PutInitialOffsets,
        GetInitialOffsets,
        MergeCheckpoint,
        RetireCheckpoint,
        SetResetPending,
    )
}
