"""The envelope of the wire protocol: one frame <-> (version, id, type, body, epoch).

The frame format, its bounds and the error replies are described in
`coordinator.protocol.wire.protocol` (and docs/protocol.md); this module encodes frames
and checks a received one before any handler sees it (`decode`). Each bound
below says which failure it prevents.

Frames in the two directions differ in one field:

1. A request (client -> server) is ``{v, id, type, body}``; an ``epoch`` in it is
   ``MALFORMED``.
2. Every frame the server sends (a reply, an error reply, a push) also carries
   ``epoch``: the epoch of the leader that sent it (the Kafka log's producer epoch
   after its fence; 0 with the file log), or, from a process that does not lead,
   the epoch of the leader it knows (0 when it knows none). A receiver decodes it
   with ``decode(..., from_server=True)``, which requires it, and applies the drop
   rule (``coordinator.protocol.common.endpoints.EpochFence``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, TypeAlias, TypeGuard

import attrs

from coordinator.protocol.wire.errors import CoordinatorError, ErrorCode, Malformed, UnsupportedVersion
from coordinator.protocol.wire.fields import CONTROL_CHARS, LONE_SURROGATE, MAX_INT

#: The envelope version this side speaks (``v``).
PROTOCOL_VERSION = 1
#: Default largest frame the server parses; a larger one gets TOO_LARGE unread.
DEFAULT_MAX_FRAME_BYTES = 4 * 1024 * 1024
#: Range of a configured frame limit (``--max-frame-bytes``). Below the floor
#: ordinary requests no longer fit; above the ceiling the frames ZeroMQ takes in
#: before refusing them (``HARD_FRAME_FACTOR`` times the limit, per connection)
#: could exhaust the coordinator's memory.
MIN_FRAME_LIMIT_BYTES = 1024
MAX_FRAME_LIMIT_BYTES = 256 * 1024 * 1024
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
#: Type of an error reply; its body is ``{"code": CODE, "message": TEXT}`` (and
#: ``"leader": ENDPOINT`` with code NOT_LEADER).
ERROR_TYPE = "error"
#: Largest epoch a frame may carry (int32: Kafka's producer epoch is an int16, so
#: any real epoch fits; a larger one is a hostile or broken sender's).
MAX_EPOCH = (1 << 31) - 1

#: Every byte but brackets and quotes (deleted when measuring depth).
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')
#: A string literal once escapes are gone and only brackets and quotes are left.
_QUOTED = re.compile(rb'"[^"]*"')
#: A \uD800-\uDFFF escape somewhere in the text (then strings are checked one by one).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


#: A request id as a received envelope carries it and a reply echoes it: a string
#: of at most MAX_ID_LEN printable characters, an int64, or null (none, as in a
#: push). `decode` checks it (`request_id`) before anything else reads it.
RequestId: TypeAlias = str | int | None


@attrs.frozen
class Envelope:
    v: int
    id: RequestId
    type: str
    body: dict[str, Any]
    #: The sender's leader epoch: None on a request, an int in [0, MAX_EPOCH] on a
    #: frame from the server.
    epoch: int | None = None


class BadEnvelope(Exception):
    """A frame that is not a valid request envelope; ``error`` is the reply to send."""

    def __init__(self, error: CoordinatorError, request_id: RequestId = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.request_id = request_id


#: The encoder of every frame, built once (``json.dumps`` with these options builds
#: one per call): compact, UTF-8 text as is, no NaN or infinity.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
#: The C scanner behind ``json.loads``, without its per-call wrapper (see `_parse`).
_scan_once = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # set by JSONDecoder.__init__


def _dumps(obj: Any) -> bytes:
    return _ENCODER.encode(obj).encode("utf-8")


def _parse(text: str) -> Any:
    """``json.loads(text)``: the same value, the same errors. A text that starts with
    its value's first character and ends with its last (every frame a client of
    this package sends) is parsed by the scanner alone; any other text, and any
    text the scanner refuses, goes through ``json.loads`` for its whitespace, BOM
    and error handling."""
    if text[:1] in ("{", "["):
        try:
            obj, end = _scan_once(text, 0)
        except (StopIteration, ValueError):
            return json.loads(text)  # raises what json.loads raises
        if end == len(text):
            return obj
    return json.loads(text)


def encode(msg_type: str, body: Mapping[str, Any], request_id: RequestId, epoch: int | None = None) -> bytes:
    """One envelope as a frame: a request without ``epoch``, a server's frame with it."""
    if epoch is None:
        return _dumps({"v": PROTOCOL_VERSION, "id": request_id, "type": msg_type, "body": body})
    return _dumps({"v": PROTOCOL_VERSION, "id": request_id, "type": msg_type, "epoch": epoch, "body": body})


def encode_body(body: Mapping[str, Any]) -> bytes:
    """A body encoded once, for replies sent to many requests (see encode_prepared)."""
    return _dumps(body)


def encode_prepared(msg_type: str, body_json: bytes, request_id: RequestId, epoch: int) -> bytes:
    """Same bytes as ``encode`` would give (a server's frame), from an already encoded body."""
    head = _dumps({"v": PROTOCOL_VERSION, "id": request_id, "type": msg_type, "epoch": epoch, "body": None})
    return head[: -len(b"null}")] + body_json + b"}"


def encode_error(code: ErrorCode, message: str, request_id: RequestId, epoch: int, leader: str | None = None) -> bytes:
    """An error reply; ``leader``: the endpoint a NOT_LEADER reply names."""
    body: dict[str, Any] = {"code": code.value, "message": message}
    if leader is not None:
        body["leader"] = leader
    return encode(ERROR_TYPE, body, request_id, epoch)


def reply_type(request_type: str) -> str:
    return f"{request_type}_reply"


def json_depth_exceeds(frame: bytes, max_depth: int) -> bool:
    """True when the JSON text nests arrays/objects deeper than ``max_depth``.

    Measured without parsing, in passes of C-speed byte operations (a frame
    of 10^5 entries is measured in a small fraction of its parse time):

    1. Escape pairs that could hide a quote (``\\\\`` then ``\\"``) are
       removed, so every quote left opens or closes a string.
    2. Everything but brackets and quotes is deleted. A text with at most
       ``max_depth`` brackets left cannot nest deeper: False.
    3. The strings (a pair of quotes and the brackets between them) are
       removed: the empty ones with one replace, the rest with a regex.
    4. The innermost ``[]`` and ``{}`` pairs are removed one level per pass,
       at most ``max_depth`` passes; pairs left after that nest deeper. A text
       whose brackets do not balance is left to the parser to reject.
    """
    text = frame
    if b"\\" in text:  # one memchr: most frames hold no escape at all
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    text = text.translate(None, _NOT_STRUCTURE)
    if len(text) - text.count(b'"') <= max_depth:
        return False
    # Adjacent quotes are an empty string, or the end of one string and the start of
    # the next with nothing between them: removing them keeps every bracket outside
    # strings and leaves the others inside a pair of quotes.
    text = text.replace(b'""', b"")
    if b'"' in text:
        text = _QUOTED.sub(b"", text).replace(b'"', b"")  # a quote left: an unterminated string
    brackets = text
    for _ in range(max_depth):
        if not brackets:
            return False
        # Both kinds in one pass: a removed [] must not let {[]} lose its {} too.
        stripped = brackets.replace(b"[]", b"\0").replace(b"{}", b"\0").translate(None, b"\0")
        if len(stripped) == len(brackets):
            return False  # unbalanced: not JSON, the parser says so
        brackets = stripped
    return b"[]" in brackets or b"{}" in brackets


def _has_lone_surrogate(obj: Any) -> bool:
    """True if any string (key or value) in the parsed JSON holds a lone surrogate."""
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if LONE_SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def valid_id(rid: object) -> TypeGuard[str | int]:
    """True for a request id this side echoes: an int64 (not a bool), or a string of at
    most MAX_ID_LEN characters without control characters."""
    if isinstance(rid, bool):
        return False
    if isinstance(rid, int):
        return -MAX_INT - 1 <= rid <= MAX_INT
    return isinstance(rid, str) and len(rid) <= MAX_ID_LEN and not CONTROL_CHARS.search(rid)


def request_id(raw: object) -> RequestId:
    """The envelope field ``id``, checked (`valid_id`) or absent (None); BadEnvelope
    (MALFORMED, without an id to echo) for anything else."""
    if raw is None or valid_id(raw):
        return raw
    raise BadEnvelope(
        Malformed(
            f"envelope field 'id' must be a string of at most {MAX_ID_LEN} printable characters, an int64 or null"
        )
    )


def decode(frame: bytes, max_depth: int = MAX_REQUEST_DEPTH, *, from_server: bool = False) -> Envelope:
    """Parse and check an envelope: a request, or (``from_server``) a frame from the server.

    1. The frame must be strict UTF-8 (no encoded surrogates such as ED A0 80).
    2. Its nesting must not exceed ``max_depth`` (measured before parsing).
    3. It must parse as JSON; no string in it may hold a lone surrogate
       (a ``\\ud800`` escape), so nothing downstream meets a string that
       cannot be encoded again.
    4. The envelope fields are checked; ``id`` is echoed only if it is valid;
       ``epoch`` is required from the server (an int in [0, MAX_EPOCH]) and
       refused in a request.

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
        obj = _parse(text)
    except RecursionError:
        raise BadEnvelope(Malformed(f"frame nests JSON deeper than {max_depth} levels")) from None
    except ValueError as exc:
        raise BadEnvelope(Malformed(f"frame is not JSON: {str(exc)[:200]}")) from None
    # A lone surrogate in a parsed string can only come from a \u escape (the bytes are
    # strict UTF-8): without a backslash in the frame (one memchr) there is none.
    if b"\\" in raw and _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(obj):
        raise BadEnvelope(
            Malformed("frame holds a lone UTF-16 surrogate (\\ud800-\\udfff escape); strings must be valid Unicode")
        )
    if not isinstance(obj, dict):
        raise BadEnvelope(Malformed(f"envelope must be a JSON object, got {type(obj).__name__}"))
    rid = request_id(obj.get("id"))
    v = obj.get("v")
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadEnvelope(Malformed("envelope field 'v' (protocol version, int) is missing"), rid)
    if v != PROTOCOL_VERSION:
        raise BadEnvelope(
            UnsupportedVersion(
                f"protocol version {str(v)[:20]} is not supported; this server speaks {PROTOCOL_VERSION}"
            ),
            rid,
        )
    msg_type = obj.get("type")
    if not isinstance(msg_type, str) or not msg_type or len(msg_type) > MAX_TYPE_LEN or CONTROL_CHARS.search(msg_type):
        raise BadEnvelope(
            Malformed(
                f"envelope field 'type' must be a non-empty string of at most {MAX_TYPE_LEN} printable characters"
            ),
            rid,
        )
    body = obj.get("body", {})
    if not isinstance(body, dict):
        raise BadEnvelope(Malformed("envelope field 'body' must be a JSON object"), rid)
    extra = set(obj) - (_SERVER_FIELDS if from_server else _REQUEST_FIELDS)
    if extra:
        raise BadEnvelope(Malformed(f"unknown envelope fields {sorted(extra)[:10]!r:.200}"), rid)
    return Envelope(v=v, id=rid, type=msg_type, body=body, epoch=_epoch(obj, rid) if from_server else None)


def _epoch(obj: Mapping[str, Any], rid: RequestId) -> int:
    """The envelope field ``epoch`` of a frame from the server, checked (step 4)."""
    epoch = obj.get("epoch")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch <= MAX_EPOCH:
        raise BadEnvelope(Malformed(f"envelope field 'epoch' must be an int in [0, {MAX_EPOCH}]"), rid)
    return epoch


#: The envelope fields of a request, and of a frame from the server.
_REQUEST_FIELDS = frozenset({"v", "id", "type", "body"})
_SERVER_FIELDS = _REQUEST_FIELDS | {"epoch"}
