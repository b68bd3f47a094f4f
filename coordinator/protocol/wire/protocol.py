"""Wire protocol of the coordinator: the request messages and their replies.

The envelope (framing, bounds, encode/decode) is
`coordinator.protocol.wire.envelope`, the field checks
`coordinator.protocol.wire.fields`, the error codes
`coordinator.protocol.wire.errors`. Each message is a frozen attrs class
with ``TYPE``, ``to_body()`` and ``from_body(body)``; ``from_body`` validates
every field and raises :class:`coordinator.protocol.wire.errors.Invalid` naming
it. docs/protocol.md is the reference of the envelope, every message, reply,
bound and failure behaviour.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Protocol, TypeVar

import attrs

from coordinator.protocol.wire.errors import Invalid
from coordinator.protocol.wire.fields import (
    MAX_CONTRIBUTORS,
    MAX_INT,
    MAX_TIMEOUT_MS,
    FieldsBody,
    OffsetMap,
    check_name,
    decode_offsets,
    encode_offsets,
    encoded,
    opt_int,
    opt_name,
    req_bool,
    req_int,
    req_str,
)

__all__ = [
    "REQUESTS",
    "GetInitialOffsets",
    "Members",
    "MembersReply",
    "MergeCheckpoint",
    "MergeReply",
    "MessageClass",
    "OffsetsReply",
    "Ping",
    "PingReply",
    "PutInitialOffsets",
    "Register",
    "ResetPendingReply",
    "RetireCheckpoint",
    "RetireReply",
    "SetResetPending",
    "Status",
    "Unregister",
]


# --------------------------------------------------------------------------- requests

M_co = TypeVar("M_co", covariant=True)


class MessageClass(Protocol[M_co]):
    """A message class (a request's, decoded by the server; a reply's, decoded
    by the client): ``from_body`` validates every field of a received body and
    returns the message, or raises `coordinator.protocol.wire.errors.Invalid`
    naming the bad field."""

    def from_body(self, body: Mapping[str, Any], /) -> M_co: ...


@attrs.frozen
class Ping(FieldsBody):
    TYPE: ClassVar[str] = "ping"

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Ping:
        return cls()


@attrs.frozen
class Status(FieldsBody):
    TYPE: ClassVar[str] = "status"

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Status:
        return cls()


@attrs.frozen
class Register(FieldsBody):
    TYPE: ClassVar[str] = "register"
    group: str
    region_index: int
    operator: str

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Register:
        return cls(req_str(body, "group"), req_int(body, "region_index", 0, MAX_INT), req_str(body, "operator"))


@attrs.frozen
class Unregister(FieldsBody):
    TYPE: ClassVar[str] = "unregister"
    group: str
    operator: str

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Unregister:
        return cls(req_str(body, "group"), req_str(body, "operator"))


@attrs.frozen
class Members(FieldsBody):
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

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Members:
        return cls(req_str(body, "group"), opt_name(body, "operator"), opt_int(body, "seq"))


@attrs.frozen
class PutInitialOffsets(FieldsBody):
    TYPE: ClassVar[str] = "put_initial_offsets"
    group: str
    offsets: OffsetMap = attrs.field(metadata=encoded(encode_offsets))

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> PutInitialOffsets:
        return cls(req_str(body, "group"), decode_offsets(body.get("offsets")))


@attrs.frozen
class GetInitialOffsets(FieldsBody):
    TYPE: ClassVar[str] = "get_initial_offsets"
    group: str

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> GetInitialOffsets:
        return cls(req_str(body, "group"))


@attrs.frozen
class MergeCheckpoint(FieldsBody):
    TYPE: ClassVar[str] = "merge_checkpoint"
    group: str
    seq: int
    attempt: int
    n_contributors: int
    operator: str
    offsets: OffsetMap = attrs.field(metadata=encoded(encode_offsets))
    timeout_ms: int

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
class RetireCheckpoint(FieldsBody):
    TYPE: ClassVar[str] = "retire_checkpoint"
    group: str
    seq: int

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RetireCheckpoint:
        return cls(req_str(body, "group"), req_int(body, "seq", 0))


@attrs.frozen
class SetResetPending(FieldsBody):
    TYPE: ClassVar[str] = "set_reset_pending"
    group: str
    value: bool

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> SetResetPending:
        return cls(req_str(body, "group"), req_bool(body, "value"))


# --------------------------------------------------------------------------- replies
# Each reply is built by its service, encoded with ``to_body`` at the wire
# boundary (`coordinator.server.api.route`) and decoded by the client with
# ``from_body``, which validates every field like a request's.


def _names(body: Mapping[str, Any], name: str) -> list[str]:
    value = body.get(name)
    if not isinstance(value, list):
        raise Invalid(f"field {name!r} must be a list of names")
    return [check_name(n, f"{name}[{i}]") for i, n in enumerate(value)]


@attrs.frozen
class PingReply(FieldsBody):
    """``ping_reply``: the server's wall clock and the protocol version it speaks."""

    time: float
    version: int

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> PingReply:
        value = body.get("time")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Invalid(f"field 'time' must be a number, got {value!r:.40}")
        return cls(float(value), req_int(body, "version"))


@attrs.frozen
class MembersReply(FieldsBody):
    """The reply to ``register``, ``unregister`` and ``members``: the group's
    registered names and its region index."""

    members: list[str]
    region_index: int | None

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> MembersReply:
        return cls(_names(body, "members"), opt_int(body, "region_index"))


@attrs.frozen
class OffsetsReply(FieldsBody):
    """The reply to ``put_initial_offsets`` and ``get_initial_offsets``: the
    effective control variables."""

    offsets: OffsetMap = attrs.field(metadata=encoded(encode_offsets))

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> OffsetsReply:
        return cls(decode_offsets(body.get("offsets")))


@attrs.frozen
class MergeReply(FieldsBody):
    """``merge_checkpoint_reply``: the merged map and who contributed (sorted)."""

    offsets: OffsetMap = attrs.field(metadata=encoded(encode_offsets))
    contributors: list[str] = attrs.field(metadata=encoded(sorted))

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> MergeReply:
        return cls(decode_offsets(body.get("offsets")), _names(body, "contributors"))


@attrs.frozen
class RetireReply(FieldsBody):
    """``retire_checkpoint_reply``: how many merges were dropped."""

    dropped: int

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RetireReply:
        return cls(req_int(body, "dropped"))


@attrs.frozen
class ResetPendingReply(FieldsBody):
    """``set_reset_pending_reply``: the flag's value before this request set it."""

    previous: bool

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> ResetPendingReply:
        return cls(req_bool(body, "previous"))


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
