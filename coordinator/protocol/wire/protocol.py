"""Wire protocol of the coordinator: the request messages and reply bodies.

The envelope (framing, bounds, encode/decode) is
`coordinator.protocol.wire.envelope`, the field checks
`coordinator.protocol.wire.fields`, the error codes
`coordinator.protocol.wire.errors`; this module re-exports the first two so
that callers use one name, ``protocol``. Each message is a frozen attrs class
with ``TYPE``, ``to_body()`` and ``from_body(body)``; ``from_body`` validates
every field and raises :class:`coordinator.protocol.wire.errors.Invalid` naming
it. docs/protocol.md is the reference of the envelope, every message, reply,
bound and failure behaviour.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from coordinator.protocol.wire.envelope import (
    DEFAULT_MAX_FRAME_BYTES,
    ERROR_TYPE,
    MAX_ID_LEN,
    MAX_REPLY_DEPTH,
    MAX_REQUEST_DEPTH,
    MAX_TYPE_LEN,
    PROTOCOL_VERSION,
    BadEnvelope,
    Envelope,
    RequestId,
    decode,
    encode,
    encode_body,
    encode_error,
    encode_prepared,
    json_depth_exceeds,
    reply_type,
    request_id,
    valid_id,
)
from coordinator.protocol.wire.fields import (
    MAX_CLAIMS,
    MAX_CONTRIBUTORS,
    MAX_INT,
    MAX_NAME_LEN,
    MAX_OFFSET,
    MAX_PARTITION,
    MAX_TEXT_LEN,
    MAX_TIMEOUT_MS,
    FieldsBody,
    OffsetClaim,
    OffsetMap,
    check_int,
    check_name,
    check_offsets,
    decode_offset_claims,
    decode_offsets,
    encode_offsets,
    opt_bool,
    opt_int,
    opt_name,
    opt_text,
    req_bool,
    req_int,
    req_str,
    safe_text,
)

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "ERROR_TYPE",
    "MAX_CLAIMS",
    "MAX_CONTRIBUTORS",
    "MAX_ID_LEN",
    "MAX_INT",
    "MAX_NAME_LEN",
    "MAX_OFFSET",
    "MAX_PARTITION",
    "MAX_REPLY_DEPTH",
    "MAX_REQUEST_DEPTH",
    "MAX_TEXT_LEN",
    "MAX_TIMEOUT_MS",
    "MAX_TYPE_LEN",
    "PROTOCOL_VERSION",
    "REQUESTS",
    "BadEnvelope",
    "Envelope",
    "FieldsBody",
    "GetInitialOffsets",
    "Members",
    "MergeCheckpoint",
    "OffsetClaim",
    "OffsetMap",
    "Ping",
    "PutInitialOffsets",
    "Register",
    "RequestId",
    "RetireCheckpoint",
    "SetResetPending",
    "Status",
    "Unregister",
    "check_int",
    "check_name",
    "check_offsets",
    "decode",
    "decode_offset_claims",
    "decode_offsets",
    "encode",
    "encode_body",
    "encode_error",
    "encode_offsets",
    "encode_prepared",
    "json_depth_exceeds",
    "members_reply",
    "merge_reply",
    "offsets_reply",
    "opt_bool",
    "opt_int",
    "opt_name",
    "opt_text",
    "reply_type",
    "req_bool",
    "req_int",
    "req_str",
    "request_id",
    "safe_text",
    "valid_id",
]


# --------------------------------------------------------------------------- requests


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
    offsets: OffsetMap

    def to_body(self) -> dict[str, Any]:
        return {**super().to_body(), "offsets": encode_offsets(self.offsets)}

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
    offsets: OffsetMap
    timeout_ms: int

    def to_body(self) -> dict[str, Any]:
        return {**super().to_body(), "offsets": encode_offsets(self.offsets)}

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
