"""The region controller's wire messages (member -> controller), as frozen attrs
classes with ``from_body`` validation: a bad field is an ``INVALID`` error reply
naming it. The protocol itself (who sends what, when) is described in
``region_controller.py`` and docs/region.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from coordinator import protocol
from coordinator.errors import Invalid


def _opt_int(body: Mapping[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    return protocol.req_int(body, name, 0)


def _opt_str(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise Invalid(f"field '{name}' must be a string or null")
    return value[:2000]


@attrs.frozen
class RegionJoin:
    TYPE: ClassVar[str] = "region_join"
    region: str
    member: str
    incarnation: str
    pid: int | None
    config: dict
    host: str | None = None
    replace: bool = False

    def to_body(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RegionJoin:
        config = body.get("config")
        if not isinstance(config, dict):
            raise Invalid("field 'config' must be an object with the region settings")
        replace = body.get("replace", False)
        if not isinstance(replace, bool):
            raise Invalid(f"field 'replace' must be a boolean, got {replace!r}")
        return cls(protocol.req_str(body, "region"), protocol.req_str(body, "member"),
                   protocol.req_str(body, "incarnation"), _opt_int(body, "pid"), dict(config),
                   _opt_str(body, "host"), replace)


@attrs.frozen
class RegionMemberMessage:
    """region_trigger, region_leave: who is speaking."""

    TYPE: ClassVar[str] = "region_trigger"
    region: str
    member: str
    incarnation: str

    def to_body(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RegionMemberMessage:
        return cls(protocol.req_str(body, "region"), protocol.req_str(body, "member"),
                   protocol.req_str(body, "incarnation"))


def _kafka_report(value: Any) -> dict | None:
    """A heartbeat's ``kafka`` field: {member_id: str|null, generation: int|null, rebalancing: bool}."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise Invalid("field 'kafka' must be an object {member_id, generation, rebalancing} or null")
    member_id = _opt_str(value, "member_id")
    generation = value.get("generation")
    if generation is not None and (not isinstance(generation, int) or isinstance(generation, bool)):
        raise Invalid(f"field 'kafka.generation' must be an integer or null, got {generation!r}")
    rebalancing = value.get("rebalancing", False)
    if not isinstance(rebalancing, bool):
        raise Invalid(f"field 'kafka.rebalancing' must be a boolean, got {rebalancing!r}")
    return {"member_id": member_id, "generation": generation, "rebalancing": rebalancing}


@attrs.frozen
class RegionHeartbeat:
    TYPE: ClassVar[str] = "region_heartbeat"
    region: str
    member: str
    incarnation: str
    kafka: dict | None = None

    def to_body(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RegionHeartbeat:
        return cls(protocol.req_str(body, "region"), protocol.req_str(body, "member"),
                   protocol.req_str(body, "incarnation"), _kafka_report(body.get("kafka")))


@attrs.frozen
class RegionAck:
    TYPE: ClassVar[str] = "region_ack"
    region: str
    member: str
    incarnation: str
    command: str
    seq: int | None
    attempt: int | None
    ok: bool
    error: str | None
    offsets: list | None
    rebalance: bool = False

    def to_body(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RegionAck:
        command = protocol.req_str(body, "command")
        if command not in ("drain", "checkpoint", "reset"):
            raise Invalid(f"field 'command' must be drain, checkpoint or reset, got {command!r}")
        offsets = body.get("offsets")
        if offsets is not None:
            offsets = protocol.encode_offsets(protocol.decode_offsets(offsets))
        return cls(protocol.req_str(body, "region"), protocol.req_str(body, "member"),
                   protocol.req_str(body, "incarnation"), command, _opt_int(body, "seq"),
                   _opt_int(body, "attempt"), protocol.req_bool(body, "ok"), _opt_str(body, "error"), offsets,
                   bool(body.get("rebalance", False)))


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
        return cls(protocol.req_str(body, "region"), protocol.req_str(body, "member"),
                   protocol.req_str(body, "incarnation"), protocol.req_bool(body, "force"),
                   _opt_str(body, "reason") or "")


@attrs.frozen
class RegionStatusRequest:
    TYPE: ClassVar[str] = "region_status"
    region: str | None

    def to_body(self) -> dict[str, Any]:
        return {"region": self.region}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RegionStatusRequest:
        return cls(_opt_str(body, "region"))
