"""The region controller's wire messages (member -> controller; the commands the
controller pushes back are in ``commands.py``), as frozen attrs
classes with ``from_body`` validation: a bad field is an ``INVALID`` error reply
naming it. Every field is bounded: names as in :func:`coordinator.protocol.wire.fields.check_name`,
integers to their ranges, free text cut and escaped (:func:`coordinator.protocol.wire.fields.opt_text`),
and every region config setting to its type and range (`RegionConfig`). The protocol itself (who sends what, when) is described in
``coordinator/region/service.py`` and docs/region.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from coordinator.protocol.region.commands import CommandKind
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.kafka_report import KafkaReport, decode_or_reason
from coordinator.protocol.region.transactions import Transactions
from coordinator.protocol.wire import fields
from coordinator.protocol.wire.errors import Invalid

#: Kafka's generation id is an int32 (-1 before the first join).
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
#: Largest process id accepted (Linux pid_max is at most 2^22).
MAX_PID = _INT32_MAX


def _speaker(body: Mapping[str, Any]) -> tuple[str, str, str]:
    """Who speaks: the region, the member and its incarnation, every member request's first fields."""
    return fields.req_str(body, "region"), fields.req_str(body, "member"), fields.req_str(body, "incarnation")


def check_region_config(value: Any) -> dict[str, Any]:
    """A join's ``config``: an object of `RegionConfig`'s settings, each optional
    and checked by it (``name`` is accepted and ignored: the region name is the
    join's). Returns a clean dict holding only checked values."""
    if not isinstance(value, dict):
        raise Invalid("field 'config' must be an object with the region settings")
    settings = {key: setting for key, setting in value.items() if key != "name"}
    try:
        config = RegionConfig.from_dict({**settings, "name": "-"})
    except (TypeError, ValueError) as exc:
        raise Invalid(str(exc)) from None
    return {key: setting for key, setting in config.to_dict().items() if key in settings}


@attrs.frozen
class RegionJoin:
    TYPE: ClassVar[str] = "region_join"
    region: str
    member: str
    incarnation: str
    pid: int | None
    config: dict[str, Any]
    host: str | None = None
    replace: bool = False

    def to_body(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RegionJoin:
        config = check_region_config(body.get("config"))
        return cls(
            *_speaker(body),
            fields.opt_int(body, "pid", MAX_PID),
            config,
            fields.opt_text(body, "host"),
            fields.opt_bool(body, "replace"),
        )


@attrs.frozen
class RegionMemberMessage:
    """A request whose body is only who is speaking (:class:`RegionTrigger`,
    :class:`RegionLeave`)."""

    region: str
    member: str
    incarnation: str

    def to_body(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RegionMemberMessage:
        return cls(*_speaker(body))


@attrs.frozen
class RegionTrigger(RegionMemberMessage):
    """Operator-driven mode: the member asks for a checkpoint."""

    TYPE: ClassVar[str] = "region_trigger"


@attrs.frozen
class RegionLeave(RegionMemberMessage):
    """A graceful leave."""

    TYPE: ClassVar[str] = "region_leave"


@attrs.frozen
class RegionHeartbeat:
    TYPE: ClassVar[str] = "region_heartbeat"
    region: str
    member: str
    incarnation: str
    #: The member's Kafka group report (None: none, or an invalid one).
    kafka: KafkaReport | None = None
    #: Why the report was ignored (None: valid or absent). An invalid report does
    #: not make the heartbeat invalid (coordinator/protocol/region/kafka_report.py, step 3).
    kafka_invalid: str | None = None
    #: Records this process's pipeline sent to its dead-letter sink since it started (None:
    #: the pipeline has none); shown by ``region_status`` and ``crkafka status``.
    dead_letters: int | None = None

    def to_body(self) -> dict[str, Any]:
        return {
            "region": self.region,
            "member": self.member,
            "incarnation": self.incarnation,
            "kafka": self.kafka.to_dict() if self.kafka is not None else None,
            "dead_letters": self.dead_letters,
        }

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RegionHeartbeat:
        return cls(*_speaker(body), *decode_or_reason(body.get("kafka")), fields.opt_int(body, "dead_letters"))


@attrs.frozen
class RegionAck:
    TYPE: ClassVar[str] = "region_ack"
    region: str
    member: str
    incarnation: str
    command: CommandKind
    seq: int | None
    attempt: int | None
    ok: bool
    error: str | None
    #: A checkpoint answer's claims: ``[topic, partition, from, to]`` per partition its
    #: source holds (``fields.decode_offset_claims``; checked by coordinator/region/continuity.py).
    offsets: list[fields.OffsetClaim] | None
    rebalance: bool = False
    #: A checkpoint answer's Kafka transactions (``coordinator/protocol/region/transactions.py``,
    #: step 1); None: the member runs no transactional sink.
    transactions: Transactions | None = None

    #: The commands a member answers.
    ACKED: ClassVar[frozenset[CommandKind]] = frozenset({CommandKind.DRAIN, CommandKind.CHECKPOINT, CommandKind.RESET})

    def to_body(self) -> dict[str, Any]:
        body = {**attrs.asdict(self, recurse=False), "command": self.command.value}
        body["transactions"] = None if self.transactions is None else self.transactions.to_wire()
        return body

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RegionAck:
        name = fields.req_str(body, "command")
        command = next((kind for kind in cls.ACKED if kind.value == name), None)
        if command is None:
            raise Invalid(f"field 'command' must be drain, checkpoint or reset, got {name!r}")
        offsets = body.get("offsets")
        if offsets is not None:
            offsets = fields.decode_offset_claims(offsets)
        return cls(
            *_speaker(body),
            command,
            fields.opt_int(body, "seq"),
            fields.opt_int(body, "attempt"),
            fields.req_bool(body, "ok"),
            fields.opt_text(body, "error"),
            offsets,
            fields.opt_bool(body, "rebalance"),
            None if body.get("transactions") is None else Transactions.from_wire(body["transactions"]),
        )


@attrs.frozen
class RegionResetRequest:
    TYPE: ClassVar[str] = "region_reset_request"
    region: str
    member: str
    incarnation: str
    force: bool
    reason: str

    def to_body(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RegionResetRequest:
        return cls(
            *_speaker(body),
            fields.req_bool(body, "force"),
            fields.opt_text(body, "reason") or "",
        )


@attrs.frozen
class RegionStatusRequest:
    TYPE: ClassVar[str] = "region_status"
    region: str | None

    def to_body(self) -> dict[str, Any]:
        return {"region": self.region}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RegionStatusRequest:
        return cls(fields.opt_name(body, "region"))


#: What a member sends its region controller (over its control channel, ``cr_consumer/runtime/member/control.py``).
MemberRequest = RegionJoin | RegionHeartbeat | RegionAck | RegionResetRequest | RegionTrigger | RegionLeave
