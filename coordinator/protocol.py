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
  :mod:`coordinator.errors`).
* ``body`` a JSON object with the message's fields (below).

Offset maps: JSON objects only have string keys, so a map
``{(topic, partition): offset}`` travels as a list of triples
``[[topic, partition, offset], ...]`` (:func:`encode_offsets`,
:func:`decode_offsets`); a (topic, partition) may appear only once.

Each message is a frozen attrs class with ``TYPE``, ``to_body()`` and
``from_body(body)``; ``from_body`` validates every field and raises
:class:`coordinator.errors.Invalid` naming the field. The full reference of
every message, reply and failure behaviour is docs/protocol.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from coordinator.errors import CoordinatorError, ErrorCode, Invalid, Malformed, UnsupportedVersion

PROTOCOL_VERSION = 1
#: Default largest frame the server parses; a larger one gets TOO_LARGE unread.
DEFAULT_MAX_FRAME_BYTES = 4 * 1024 * 1024
#: Longest group id / operator name / topic accepted (a sanity bound, not Kafka's).
MAX_NAME_LEN = 1024

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
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


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


def decode(frame: bytes) -> Envelope:
    """Parse and check an envelope (requests and replies alike).

    Raises :class:`BadEnvelope` carrying the error to reply with, and the
    request id when it could be read.
    """
    try:
        obj = json.loads(frame)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadEnvelope(Malformed(f"frame is not UTF-8 JSON: {exc}")) from None
    if not isinstance(obj, dict):
        raise BadEnvelope(Malformed(f"envelope must be a JSON object, got {type(obj).__name__}"))
    rid = obj.get("id")
    if rid is not None and (isinstance(rid, bool) or not isinstance(rid, str | int)):
        raise BadEnvelope(Malformed("envelope field 'id' must be a string, an int or null"))
    v = obj.get("v")
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadEnvelope(Malformed("envelope field 'v' (protocol version, int) is missing"), rid)
    if v != PROTOCOL_VERSION:
        raise BadEnvelope(
            UnsupportedVersion(f"protocol version {v} is not supported; this server speaks {PROTOCOL_VERSION}"), rid
        )
    msg_type = obj.get("type")
    if not isinstance(msg_type, str) or not msg_type:
        raise BadEnvelope(Malformed("envelope field 'type' (non-empty string) is missing"), rid)
    body = obj.get("body", {})
    if not isinstance(body, dict):
        raise BadEnvelope(Malformed("envelope field 'body' must be a JSON object"), rid)
    extra = set(obj) - {"v", "id", "type", "body"}
    if extra:
        raise BadEnvelope(Malformed(f"unknown envelope fields {sorted(extra)}"), rid)
    return Envelope(v=v, id=rid, type=msg_type, body=body)


# --------------------------------------------------------------------------- field checks


def req_str(body: Mapping[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise Invalid(f"field '{name}' must be a non-empty string, got {value!r:.80}")
    if len(value) > MAX_NAME_LEN:
        raise Invalid(f"field '{name}' is longer than {MAX_NAME_LEN} characters")
    return value


def req_int(body: Mapping[str, Any], name: str, minimum: int | None = None) -> int:
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise Invalid(f"field '{name}' must be an integer, got {value!r:.80}")
    if minimum is not None and value < minimum:
        raise Invalid(f"field '{name}' must be >= {minimum}, got {value}")
    return value


def req_bool(body: Mapping[str, Any], name: str) -> bool:
    value = body.get(name)
    if not isinstance(value, bool):
        raise Invalid(f"field '{name}' must be true or false, got {value!r:.80}")
    return value


def encode_offsets(offsets: Mapping[tuple[str, int], int]) -> list[list[Any]]:
    return [[t, p, o] for (t, p), o in offsets.items()]


def decode_offsets(value: Any, name: str = "offsets") -> OffsetMap:
    """``[[topic, partition, offset], ...]`` -> ``{(topic, partition): offset}``, validated."""
    if not isinstance(value, list):
        raise Invalid(f"field '{name}' must be a list of [topic, partition, offset]")
    out: OffsetMap = {}
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
            or not t
            or len(t) > MAX_NAME_LEN
        ):
            _explain_entry(name, i, t, p, o)
        out[(t, p)] = o
    if len(out) != len(value):
        seen: set[tuple[str, int]] = set()
        for t, p, _ in value:
            if (t, p) in seen:
                raise Invalid(f"{name}: ({t}, {p}) appears twice")
            seen.add((t, p))
    return out


def _explain_entry(name: str, i: int, t: Any, p: Any, o: Any) -> None:
    if not isinstance(t, str) or not t or len(t) > MAX_NAME_LEN:
        raise Invalid(f"{name}[{i}]: topic must be a non-empty string of at most {MAX_NAME_LEN} characters")
    if type(p) is not int or p < 0:
        raise Invalid(f"{name}[{i}]: partition must be an integer >= 0, got {p!r}")
    raise Invalid(f"{name}[{i}]: offset must be an integer >= 0, got {o!r}")


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
        return cls(req_str(body, "group"), req_int(body, "region_index", 0), req_str(body, "operator"))


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
    TYPE: ClassVar[str] = "members"
    group: str

    def to_body(self) -> dict[str, Any]:
        return {"group": self.group}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Members:
        return cls(req_str(body, "group"))


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
            n_contributors=req_int(body, "n_contributors", 1),
            operator=req_str(body, "operator"),
            offsets=decode_offsets(body.get("offsets")),
            timeout_ms=req_int(body, "timeout_ms", 1),
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
