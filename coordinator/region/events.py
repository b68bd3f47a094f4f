"""The region controller's events: what ``RegionCore`` (``coordinator/region/machine.py``)
reports through its ``on_event`` callback, as frozen attrs classes. The service
keeps the recent ones for the status reply (`event_record`) and feeds the
duration histograms from them. No I/O here.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar

import attrs

from coordinator.protocol.region.replies import RegionPhase
from coordinator.protocol.region.status import EventRecord
from coordinator.region.model import ResetKind


@attrs.frozen
class PhaseChanged:
    """Every transition, with its reason."""

    KIND: ClassVar[str] = "phase"
    phase: RegionPhase
    why: str


@attrs.frozen
class RegionFailed:
    """The region went FAILED (step 6)."""

    KIND: ClassVar[str] = "failed"
    reason: str


@attrs.frozen
class MemberJoined:
    """A new or restarted member was admitted."""

    KIND: ClassVar[str] = "join"
    member: str
    pid: int | None


@attrs.frozen
class MemberLeft:
    """A member was removed (``reason`` "left": gracefully)."""

    KIND: ClassVar[str] = "leave"
    member: str
    reason: str


@attrs.frozen
class CheckpointCompleted:
    """A checkpoint became consistent and was persisted."""

    KIND: ClassVar[str] = "checkpoint"
    seq: int
    #: From the drain's start to the completion, rounded to 0.1 ms.
    checkpoint_ms: float
    next_drain_in_s: float


@attrs.frozen
class ContinuityRefused:
    """A checkpoint failed the continuity fence (a failure reset follows)."""

    KIND: ClassVar[str] = "continuity"
    seq: int | None
    violations: int
    #: The first violations, as the status shows them.
    partitions: list[dict[str, Any]]


@attrs.frozen
class ResetStarted:
    """A reset round started."""

    KIND: ClassVar[str] = "reset"
    attempt: int
    cause: ResetKind
    why: str
    #: The checkpoint the round resets to (None: the initial state).
    seq: int | None


@attrs.frozen
class BackoffHeld:
    """Every member answered the round; its RESUME waits for the hold."""

    KIND: ClassVar[str] = "backoff"
    attempt: int | None
    backoff_s: float | None
    resume_in_s: float
    failure_streak: int


@attrs.frozen
class ResetResumed:
    """The RESUME after a reset round (and its hold, if any)."""

    KIND: ClassVar[str] = "resume"
    attempt: int | None
    #: From the first cause to the last answer, rounded to 0.1 ms.
    reset_ms: float
    next_drain_in_s: float
    #: The hold that ended (None: none).
    held_s: float | None


@attrs.frozen
class MemberForgotten:
    """An absent member's own checkpoint was forgotten past the bound."""

    KIND: ClassVar[str] = "forgotten"
    member: str
    seq: int


RegionEvent = (
    PhaseChanged
    | RegionFailed
    | MemberJoined
    | MemberLeft
    | CheckpointCompleted
    | ContinuityRefused
    | ResetStarted
    | BackoffHeld
    | ResetResumed
    | MemberForgotten
)


def _plain(_instance: object, _field: object, value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


def event_record(event: RegionEvent, t: float) -> EventRecord:
    """``event`` as the status reply's ``events`` list shows it: ``t`` (wall
    clock), ``kind`` and its fields, enums by value; a resume without a hold
    has no ``held_s``."""
    fields = attrs.asdict(event, value_serializer=_plain, filter=lambda a, v: not (a.name == "held_s" and v is None))
    return EventRecord(t, event.KIND, fields)


__all__ = [
    "BackoffHeld",
    "CheckpointCompleted",
    "ContinuityRefused",
    "MemberForgotten",
    "MemberJoined",
    "MemberLeft",
    "PhaseChanged",
    "RegionEvent",
    "RegionFailed",
    "ResetResumed",
    "ResetStarted",
    "event_record",
]
