"""The region controller's status replies (``region_status``, and the regions
part of the coordinator's ``status``), as frozen attrs classes with
``to_body`` and a validating ``from_body``.

1. :class:`~coordinator.region.machine.RegionCore` builds a `RegionStatus`
   from its parts on request: the member table's `MemberStatus` rows
   (``coordinator/region/membership.py``), the reset drive's `ResetStatus`
   (``coordinator/region/reset.py``), the cycle drive's counters, the members'
   `ResolveStatus` entries (``coordinator/region/resolve.py``) and its phase.
2. The region controller service (``coordinator/region/service.py``) adds the
   recent checkpoints and reset rounds (`CheckpointMark`, `ResetMark`) and
   answers ``region_status`` with a `RegionReport` (one region and its recent
   `EventRecord`\\ s) or a `RegionsReport` (every region), encoded by
   ``coordinator.server.api.route``.
3. The client (``CoordinatorClient.region_status``, ``status``) decodes the
   body with ``from_body``: every field is type-checked, every count bounded
   (the ``MAX_STATUS_*`` constants); a body that does not validate raises
   :class:`~coordinator.protocol.wire.errors.Invalid` naming the field.
   ``crkafka status``, ``crkafka run``, the drills and the status page read the
   attributes.

docs/protocol.md has the reply's JSON keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from coordinator.protocol.region.config import MAX_INDEX, MODES
from coordinator.protocol.region.kafka_report import InvalidReport, KafkaReport
from coordinator.protocol.region.messages import MAX_PID
from coordinator.protocol.region.replies import RegionPhase
from coordinator.protocol.region.transactions import MAX_FENCE, MAX_PREPARED, MAX_RESOLVE, check_bootstrap
from coordinator.protocol.wire.errors import Invalid
from coordinator.protocol.wire.fields import (
    MAX_CONTRIBUTORS,
    MAX_INT,
    JsonValue,
    check_json,
    check_name,
    decode_list,
    decode_map,
    decode_names,
    decode_part,
    opt_int,
    opt_number,
    opt_text,
    req_enum,
    req_int,
    req_number,
    req_object,
    req_str,
)

#: Most regions one reply lists: bounds a client's work on a hostile reply (the
#: server holds at most ``Limits.max_regions``, 1,000 by default).
MAX_STATUS_REGIONS = 100_000
#: Most members one region's status lists (the join's own bound on a region's members).
MAX_STATUS_MEMBERS = MAX_CONTRIBUTORS
#: Most events a ``region_status`` reply carries (the service hands out its newest 50).
MAX_STATUS_EVENTS = 1_000
#: Most recent checkpoints / reset rounds per region (the service keeps 10).
MAX_STATUS_RECENT = 1_000
#: Most fields of one event, and how deep and how long its values may be: an
#: event is a flat record whose only nested field is the continuity fence's
#: first violations (a list of objects holding lists of claims, 4 levels).
MAX_EVENT_FIELDS = 32
MAX_EVENT_DEPTH = 6
MAX_EVENT_ITEMS = 1_000


def _event_field(value: Any, where: str) -> JsonValue:
    """An event's field value, at most MAX_EVENT_DEPTH deep."""
    return check_json(value, where, max_depth=MAX_EVENT_DEPTH, max_items=MAX_EVENT_ITEMS, max_fields=MAX_EVENT_FIELDS)


# --------------------------------------------------------------------------- parts


@attrs.frozen
class MemberStatus:
    """One member as the region's status shows it (``MemberTable.status``)."""

    pid: int | None
    incarnation: str
    #: Seconds since the controller last heard it.
    silent_s: float
    #: Its Kafka group state as its last valid heartbeat reported it.
    kafka: KafkaReport | None
    #: Why its last heartbeat's Kafka report was refused (None: it was valid).
    kafka_invalid: str | None
    #: Records its pipeline dead-lettered, as its last heartbeat said (None: no dead-letter sink).
    dead_letters: int | None

    def to_body(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "incarnation": self.incarnation,
            "silent_s": self.silent_s,
            "kafka": None if self.kafka is None else self.kafka.to_dict(),
            "kafka_invalid": self.kafka_invalid,
            "dead_letters": self.dead_letters,
        }

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> MemberStatus:
        try:
            kafka = KafkaReport.decode(body.get("kafka"))
        except InvalidReport as exc:
            raise Invalid(f"field 'kafka': {exc}") from None
        return cls(
            opt_int(body, "pid", MAX_PID),
            req_str(body, "incarnation"),
            req_number(body, "silent_s"),
            kafka,
            opt_text(body, "kafka_invalid"),
            opt_int(body, "dead_letters"),
        )


@attrs.frozen
class ResolveStatus:
    """One member's Kafka transactions still to resolve (``coordinator/region/resolve.py``)."""

    #: The completed checkpoint the transactions were prepared for.
    seq: int
    #: Prepared transactions not yet known to be committed.
    prepared: int
    #: Transactional ids its sinks write with (fenced at a reset).
    fence: int
    #: The cluster they are on (None: only a member can resolve them).
    bootstrap: str | None = None
    #: Why the coordinator's last attempt to resolve them itself failed (None: none failed
    #: since the entry was recorded; ``coordinator/region/abandoned.py``).
    error: str | None = None

    def to_body(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> ResolveStatus:
        bootstrap = body.get("bootstrap")
        return cls(
            req_int(body, "seq"),
            req_int(body, "prepared", 0, MAX_PREPARED),
            req_int(body, "fence", 0, MAX_FENCE),
            None if bootstrap is None else check_bootstrap(bootstrap, "field 'bootstrap'"),
            opt_text(body, "error"),
        )


@attrs.frozen
class ResetStatus:
    """The reset rounds' part of the status (``coordinator/region/reset.py``)."""

    #: Attempt of the running (or last) reset round; None before the first.
    attempt: int | None
    #: Failure resets since the last progress (coordinator/region/reset.py).
    consecutive_resets: int
    #: Past it the region goes FAILED.
    max_consecutive_resets: int
    #: Reset rounds started since the coordinator started.
    resets: int
    #: The length of the backoff hold in force after a repeated failure
    #: (coordinator/region/timing.py, the backoff); None: none.
    backoff_s: float | None = None
    #: Seconds until the held RESUME may be sent; None: not held.
    backoff_left_s: float | None = None
    #: Failure resets in a row, each less than failure_memory_s after the previous,
    #: whatever progress was made between them: the backoff's count
    #: (coordinator/region/timing.py, the backoff).
    failure_streak: int = 0

    def to_body(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> ResetStatus:
        return cls(
            opt_int(body, "attempt"),
            req_int(body, "consecutive_resets"),
            req_int(body, "max_consecutive_resets"),
            req_int(body, "resets"),
            opt_number(body, "backoff_s"),
            opt_number(body, "backoff_left_s"),
            req_int(body, "failure_streak"),
        )


@attrs.frozen
class CheckpointMark:
    """A recently completed checkpoint: ``t`` wall clock (Unix seconds), ``seq`` its id."""

    t: float
    seq: int

    def to_body(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> CheckpointMark:
        return cls(req_number(body, "t"), req_int(body, "seq"))


@attrs.frozen
class ResetMark:
    """A recently started reset: ``t`` wall clock (Unix seconds), ``why`` its cause."""

    t: float
    why: str

    def to_body(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> ResetMark:
        return cls(req_number(body, "t"), opt_text(body, "why") or "")


@attrs.frozen
class EventRecord:
    """One of the controller's recent events (``coordinator/region/events.py``):
    ``t`` wall clock (Unix seconds), ``kind`` (the event class's ``KIND``) and the
    event's own fields, enums by value. On the wire: ``{t, kind, **fields}``."""

    t: float
    kind: str
    fields: dict[str, JsonValue]

    def to_body(self) -> dict[str, Any]:
        return {"t": self.t, "kind": self.kind, **self.fields}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> EventRecord:
        if len(body) > MAX_EVENT_FIELDS + 2:
            raise Invalid(f"an event has more than {MAX_EVENT_FIELDS} fields")
        rest = {
            check_name(k, "an event's field name"): _event_field(v, f"field {k!r:.80}")
            for k, v in body.items()
            if k not in ("t", "kind")
        }
        return cls(req_number(body, "t"), req_str(body, "kind"), rest)


@attrs.frozen
class RegionStatus:
    """One region as the controller shows it."""

    name: str
    index: int
    phase: RegionPhase
    #: ``periodic`` or ``operator_driven`` (``RegionConfig.mode``).
    mode: str
    period_s: float
    #: Member name -> its row, sorted by name.
    members: dict[str, MemberStatus]
    last_consistent: int | None
    #: Sequence id of the running (or last) cycle.
    seq: int | None
    #: Members whose answer the current phase awaits, sorted.
    waiting_for: tuple[str, ...]
    reset: ResetStatus
    #: Checkpoints completed, cycles failed since the coordinator started.
    checkpoints: int
    failed_cycles: int
    failed_reason: str | None
    #: Member name (live or absent) -> its Kafka transactions still to resolve.
    transactions: dict[str, ResolveStatus]
    #: Recently completed checkpoints and started resets, newest first (the
    #: service's; ``RegionCore`` leaves them empty).
    recent_checkpoints: tuple[CheckpointMark, ...] = ()
    recent_resets: tuple[ResetMark, ...] = ()

    def to_body(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "index": self.index,
            "phase": self.phase.value,
            "mode": self.mode,
            "period_s": self.period_s,
            "members": {n: m.to_body() for n, m in self.members.items()},
            "last_consistent": self.last_consistent,
            "seq": self.seq,
            "waiting_for": list(self.waiting_for),
            "reset": self.reset.to_body(),
            "checkpoints": self.checkpoints,
            "failed_cycles": self.failed_cycles,
            "failed_reason": self.failed_reason,
            "transactions": {n: t.to_body() for n, t in self.transactions.items()},
            "recent_checkpoints": [c.to_body() for c in self.recent_checkpoints],
            "recent_resets": [r.to_body() for r in self.recent_resets],
        }

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RegionStatus:
        mode = req_str(body, "mode")
        if mode not in MODES:
            raise Invalid(f"field 'mode' must be one of {list(MODES)}, got {mode!r:.40}")
        return cls(
            name=req_str(body, "name"),
            index=req_int(body, "index", 0, MAX_INDEX),
            phase=req_enum(RegionPhase, body, "phase"),
            mode=mode,
            period_s=req_number(body, "period_s"),
            members=decode_map(body, "members", MAX_STATUS_MEMBERS, MemberStatus.from_body),
            last_consistent=opt_int(body, "last_consistent"),
            seq=opt_int(body, "seq"),
            waiting_for=decode_names(body, "waiting_for", MAX_STATUS_MEMBERS),
            reset=decode_part("reset", ResetStatus.from_body, req_object(body, "reset")),
            checkpoints=req_int(body, "checkpoints", 0, MAX_INT),
            failed_cycles=req_int(body, "failed_cycles", 0, MAX_INT),
            failed_reason=opt_text(body, "failed_reason"),
            transactions=decode_map(body, "transactions", MAX_RESOLVE, ResolveStatus.from_body),
            recent_checkpoints=tuple(
                decode_list(body, "recent_checkpoints", MAX_STATUS_RECENT, CheckpointMark.from_body)
            ),
            recent_resets=tuple(decode_list(body, "recent_resets", MAX_STATUS_RECENT, ResetMark.from_body)),
        )


# --------------------------------------------------------------------------- replies


@attrs.frozen
class RegionReport:
    """``region_status_reply`` to a request naming a region: its status and the
    controller's recent events about it, oldest first."""

    region: RegionStatus
    events: tuple[EventRecord, ...]

    def to_body(self) -> dict[str, Any]:
        return {"region": self.region.to_body(), "events": [e.to_body() for e in self.events]}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RegionReport:
        region = decode_part("region", RegionStatus.from_body, req_object(body, "region"))
        return cls(region, tuple(decode_list(body, "events", MAX_STATUS_EVENTS, EventRecord.from_body)))


@attrs.frozen
class RegionsReport:
    """``region_status_reply`` to a request naming no region: every region by name."""

    regions: dict[str, RegionStatus]

    def to_body(self) -> dict[str, Any]:
        return {"regions": encode_regions(self.regions)}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RegionsReport:
        return cls(decode_regions(body))


def encode_regions(regions: Mapping[str, RegionStatus]) -> dict[str, Any]:
    return {n: r.to_body() for n, r in regions.items()}


def decode_regions(body: Mapping[str, Any]) -> dict[str, RegionStatus]:
    """The ``regions`` field: region name -> its status (the key is its ``name``)."""
    regions = decode_map(body, "regions", MAX_STATUS_REGIONS, RegionStatus.from_body)
    for key, r in regions.items():
        if r.name != key:
            raise Invalid(f"regions[{key!r:.80}] holds the status of region {r.name!r:.80}")
    return regions


__all__ = [
    "MAX_STATUS_EVENTS",
    "MAX_STATUS_MEMBERS",
    "MAX_STATUS_RECENT",
    "MAX_STATUS_REGIONS",
    "CheckpointMark",
    "EventRecord",
    "JsonValue",
    "MemberStatus",
    "RegionReport",
    "RegionStatus",
    "RegionsReport",
    "ResetMark",
    "ResetStatus",
    "ResolveStatus",
    "decode_regions",
    "encode_regions",
]
