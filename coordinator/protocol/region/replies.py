"""The region controller's replies to its members' requests (controller ->
member, envelope type ``<request>_reply``), as frozen attrs classes with
``to_body`` and a validating ``from_body``, and the error reply every request
may get instead (:class:`ErrorReply`).

Which reply answers which request (docs/protocol.md, "Region controller
messages"; :data:`REPLY_CLASSES`):

1. ``region_join``: :class:`RegionJoinReply`: the region's phase, last
   consistent checkpoint and settings, the ``predecessor`` a restarted process
   replaces, or ``refused`` with the name's live ``holder``.
2. ``region_heartbeat``, ``region_ack``, ``region_reset_request``:
   :class:`RegionPhaseReply` (the heartbeat's, :class:`RegionHeartbeatReply`,
   also names the last consistent checkpoint).
3. ``region_trigger``: :class:`RegionTriggerReply`: whether a drain of the
   asking member follows.
4. ``region_leave``: :class:`RegionLeaveReply`: the leaver's own last completed
   checkpoint, which it publishes before it exits.

The member decodes every answer with :func:`decode_reply` (by its envelope
type, ``<request>_reply`` or ``error``); one that does not
validate raises :class:`~coordinator.protocol.wire.errors.Invalid` naming the
field (the member logs and drops it, as for a reply lost on the way).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from typing import Any

import attrs

from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.messages import MAX_PID
from coordinator.protocol.wire import envelope
from coordinator.protocol.wire.errors import ErrorCode, Invalid
from coordinator.protocol.wire.fields import opt_int, opt_name, opt_text, req_enum, req_object, req_str


class RegionPhase(str, enum.Enum):
    """The region's phase: the controller's state (its transitions are
    ``coordinator/region/machine.py``'s) and what the replies name."""

    WAITING = "WAITING"  # not enough members yet (start-up, coordinator restart, everyone left)
    RUNNING = "RUNNING"  # members process tuples
    DRAINING = "DRAINING"  # DRAIN(seq) sent, waiting for every member
    CHECKPOINTING = "CHECKPOINTING"  # CHECKPOINT(seq) sent, waiting for every member
    RESETTING = "RESETTING"  # RESET / RESET_TO_INITIAL sent, waiting for every member
    BACKOFF = "BACKOFF"  # every member reset after a repeated failure; the RESUME waits (timing.py)
    FAILED = "FAILED"  # too many consecutive resets; terminal


class TriggerAnswer(str, enum.Enum):
    """The ``trigger`` field: does a drain of the asking member follow? Its
    source waits for its drain only when one does (else it would wait its
    whole drain timeout for nothing)."""

    STARTED = "started"  # a cycle started now: the member's drain follows
    DRAIN_COMING = "drain_coming"  # a cycle is draining and this member has not drained yet
    NOT_NOW = "not_now"  # no drain follows (resetting, waiting, drained already, failed)


def _seconds(body: Mapping[str, Any], name: str) -> float:
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise Invalid(f"field {name!r} must be a finite number of seconds >= 0, got {value!r:.40}")
    return float(value)


@attrs.frozen
class Predecessor:
    """The dead incarnation a restarted member replaces: the new process removes
    its Kafka consumer (``kafka_member_id``, None when unknown or withheld) from
    the group before its own joins."""

    incarnation: str
    pid: int | None
    kafka_member_id: str | None

    def to_body(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Predecessor:
        return cls(req_str(body, "incarnation"), opt_int(body, "pid", MAX_PID), opt_name(body, "kafka_member_id"))


@attrs.frozen
class NameHolder:
    """The live process holding a member name a join was refused for
    (docs/region.md, "Member names and restarted members")."""

    incarnation: str
    pid: int | None
    host: str | None
    #: Seconds since the controller last heard the holder.
    silent_s: float

    def to_body(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> NameHolder:
        return cls(
            req_str(body, "incarnation"),
            opt_int(body, "pid", MAX_PID),
            opt_text(body, "host"),
            _seconds(body, "silent_s"),
        )


@attrs.frozen
class JoinRefusal:
    """A refused join: why (the wire's ``refused``) and the name's live ``holder``."""

    reason: str
    holder: NameHolder


@attrs.frozen
class RegionJoinReply:
    """The answer to a join (step 1). ``refused``: the name is held by a live
    process and nothing changed; ``failed_reason``: the region is FAILED and why."""

    region: str
    phase: RegionPhase
    last_consistent: int | None
    config: RegionConfig
    predecessor: Predecessor | None = None
    failed_reason: str | None = None
    refused: JoinRefusal | None = None

    def to_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "region": self.region,
            "phase": self.phase.value,
            "last_consistent": self.last_consistent,
            "config": self.config.to_dict(),
            "predecessor": None if self.predecessor is None else self.predecessor.to_body(),
        }
        if self.failed_reason is not None:
            body["failed_reason"] = self.failed_reason
        if self.refused is not None:
            body["refused"] = self.refused.reason
            body["holder"] = self.refused.holder.to_body()
        return body

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RegionJoinReply:
        try:
            config = RegionConfig.from_dict(dict(req_object(body, "config")))
        except (TypeError, ValueError) as exc:
            raise Invalid(f"field 'config': {exc}") from None
        predecessor = (
            None if body.get("predecessor") is None else Predecessor.from_body(req_object(body, "predecessor"))
        )
        reason = opt_text(body, "refused")
        refused = None if reason is None else JoinRefusal(reason, NameHolder.from_body(req_object(body, "holder")))
        return cls(
            req_str(body, "region"),
            req_enum(RegionPhase, body, "phase"),
            opt_int(body, "last_consistent"),
            config,
            predecessor,
            opt_text(body, "failed_reason"),
            refused,
        )


@attrs.frozen
class RegionPhaseReply:
    """The answer to an ack or a reset request (step 2): the region's phase."""

    phase: RegionPhase
    last_consistent: int | None = None

    def to_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"phase": self.phase.value}
        if self.last_consistent is not None:
            body["last_consistent"] = self.last_consistent
        return body

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RegionPhaseReply:
        return cls(req_enum(RegionPhase, body, "phase"), opt_int(body, "last_consistent"))


@attrs.frozen
class RegionHeartbeatReply(RegionPhaseReply):
    """The answer to a heartbeat (step 2): it always names the last consistent
    checkpoint (null before the first)."""

    def to_body(self) -> dict[str, Any]:
        return {"phase": self.phase.value, "last_consistent": self.last_consistent}


@attrs.frozen
class RegionTriggerReply:
    """The answer to an operator-driven trigger (step 3)."""

    phase: RegionPhase
    trigger: TriggerAnswer
    reason: str = ""

    def to_body(self) -> dict[str, Any]:
        return {"phase": self.phase.value, "trigger": self.trigger.value, "reason": self.reason}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RegionTriggerReply:
        return cls(
            req_enum(RegionPhase, body, "phase"),
            req_enum(TriggerAnswer, body, "trigger"),
            opt_text(body, "reason") or "",
        )


@attrs.frozen
class RegionLeaveReply:
    """The answer to a graceful leave (step 4): ``complete`` is the leaver's own
    last completed checkpoint (None for a process the region already dropped,
    or a region the controller does not know)."""

    last_consistent: int | None
    complete: int | None

    def to_body(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RegionLeaveReply:
        return cls(opt_int(body, "last_consistent"), opt_int(body, "complete"))


@attrs.frozen
class ErrorReply:
    """An error reply (envelope type ``error``) to any request."""

    code: ErrorCode
    message: str

    def to_body(self) -> dict[str, Any]:
        return {"code": self.code.value, "message": self.message}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> ErrorReply:
        return cls(req_enum(ErrorCode, body, "code"), opt_text(body, "message") or "")


RegionReply = RegionJoinReply | RegionPhaseReply | RegionTriggerReply | RegionLeaveReply

#: The reply class of each member request type, by the reply's envelope type.
REPLY_CLASSES: dict[str, type[RegionReply]] = {
    envelope.reply_type(request): cls
    for request, cls in (
        ("region_join", RegionJoinReply),
        ("region_heartbeat", RegionHeartbeatReply),
        ("region_ack", RegionPhaseReply),
        ("region_reset_request", RegionPhaseReply),
        ("region_trigger", RegionTriggerReply),
        ("region_leave", RegionLeaveReply),
    )
}


def decode_reply(envelope_type: str, body: Mapping[str, Any]) -> RegionReply | ErrorReply:
    """An answer (envelope ``envelope_type``, ``body``) to a member's request,
    fully validated; raises Invalid naming the field, or for an envelope type
    that is no answer to a member's request."""
    if envelope_type == envelope.ERROR_TYPE:
        return ErrorReply.from_body(body)
    cls = REPLY_CLASSES.get(envelope_type)
    if cls is None:
        raise Invalid(f"a {envelope_type!r:.80} is no answer to a member's request")
    return cls.from_body(body)


__all__ = [
    "REPLY_CLASSES",
    "ErrorReply",
    "JoinRefusal",
    "NameHolder",
    "Predecessor",
    "RegionHeartbeatReply",
    "RegionJoinReply",
    "RegionLeaveReply",
    "RegionPhase",
    "RegionPhaseReply",
    "RegionReply",
    "RegionTriggerReply",
    "TriggerAnswer",
    "decode_reply",
]
