"""A member's Kafka group report: the ``kafka`` field of its ``region_heartbeat``,
decoded and validated once, at the wire seam (``coordinator/protocol/region/messages.py``).

Who sends what, when:

1. Every heartbeat (``HEARTBEAT_S``, member side,
   ``cr_consumer/runtime/member/group_state.py``) carries ``kafka: {member_id,
   generation, rebalancing}`` once the member's consumer exists (null before),
   plus ``cooperative: true, reset_pending`` when it rebalances incrementally.
2. The controller keeps the member's last report (``MemberInfo.kafka``) for the
   checkpoint pacing (``coordinator/region/timing.py``: whether a due drain
   waits for the group) and for its successor's join (the Kafka member id a
   restarted process removes from the group, ``coordinator/region/membership.py``).
3. A report that fails validation is not a bad heartbeat: the heartbeat still
   proves the member alive (refusing it would drop a live member after
   ``member_timeout_s``). The report is ignored: the member counts as not
   reporting (its last report is dropped, so a stale "rebalancing" cannot hold
   drains back), and the controller logs why once per member, when its
   reports turn invalid (``MemberTable.heartbeat``, members.py). Nothing a member sends stops
   the loop.

Bounds: ``member_id`` a string of at most ``MAX_MEMBER_ID_LEN`` characters
without control characters (it is sent back to another member, which asks the
broker to remove that consumer: it is refused, never cut); ``generation`` an
int32 (Kafka's, -1 before the first join); the flags booleans.
"""

from __future__ import annotations

from typing import Any

import attrs

from coordinator.protocol.wire.fields import CONTROL_CHARS, LONE_SURROGATE

#: Kafka's generation id is an int32 (-1 before the first join).
GENERATION_MIN, GENERATION_MAX = -(1 << 31), (1 << 31) - 1
#: Longest Kafka member id accepted (client id + "-" + a UUID; the broker bounds
#: client ids far below it). Bounds what a report keeps in memory per member.
MAX_MEMBER_ID_LEN = 1024
#: Longest reason kept and logged for an invalid report.
MAX_REASON_LEN = 200


class InvalidReport(ValueError):
    """The ``kafka`` field of a heartbeat is not a valid report (the reason)."""


def _flag(value: dict[str, Any], name: str) -> bool:
    flag = value.get(name, False)
    if not isinstance(flag, bool):
        raise InvalidReport(f"kafka.{name} must be true or false, got {type(flag).__name__}")
    return flag


@attrs.frozen
class KafkaReport:
    """One member's Kafka group state as its last valid heartbeat reported it."""

    #: The consumer's group member id (None before it joined the group).
    member_id: str | None = None
    #: Its group generation (None before the first join).
    generation: int | None = None
    #: Not in a stable generation, revoked and not assigned again, or waiting for a reset.
    rebalancing: bool = False
    #: It rebalances incrementally (cooperative-sticky).
    cooperative: bool = False
    #: Cooperative only: revoked after it fetched; a forced reset follows.
    reset_pending: bool = False

    @property
    def holds_drains(self) -> bool:
        """Whether a due periodic drain waits for this member (pacing.py): an eager
        member's rebalance, a cooperative member's pending reset (its drain would
        fail; its rebalance alone does not stop its partitions)."""
        return self.reset_pending if self.cooperative else self.rebalancing

    @classmethod
    def decode(cls, value: Any) -> KafkaReport | None:
        """The report in a heartbeat's ``kafka`` field; None for null (no consumer
        yet). Raises InvalidReport naming the first bad field. A non-cooperative
        report's ``reset_pending`` is not kept (only the cooperative pacing reads it)."""
        if value is None:
            return None
        if not isinstance(value, dict):
            raise InvalidReport(
                f"kafka must be an object {{member_id, generation, rebalancing}} or null, got {type(value).__name__}"
            )
        member_id = value.get("member_id")
        if member_id is not None:
            if not isinstance(member_id, str):
                raise InvalidReport(f"kafka.member_id must be a string or null, got {type(member_id).__name__}")
            if len(member_id) > MAX_MEMBER_ID_LEN:
                raise InvalidReport(f"kafka.member_id is longer than {MAX_MEMBER_ID_LEN} characters")
            if CONTROL_CHARS.search(member_id) or LONE_SURROGATE.search(member_id):
                raise InvalidReport("kafka.member_id holds a control character or a lone surrogate")
        generation = value.get("generation")
        if generation is not None and (
            isinstance(generation, bool)
            or not isinstance(generation, int)
            or not GENERATION_MIN <= generation <= GENERATION_MAX
        ):
            raise InvalidReport(f"kafka.generation must be an int32 or null, got {str(generation)[:40]}")
        rebalancing = _flag(value, "rebalancing")
        cooperative = _flag(value, "cooperative")
        reset_pending = _flag(value, "reset_pending")
        return cls(member_id, generation, rebalancing, cooperative, reset_pending and cooperative)

    def to_dict(self) -> dict[str, Any]:
        """The wire shape (status replies, ``crkafka status``): the three fields,
        plus ``cooperative`` and ``reset_pending`` for a cooperative member."""
        out: dict[str, Any] = {
            "member_id": self.member_id,
            "generation": self.generation,
            "rebalancing": self.rebalancing,
        }
        if self.cooperative:
            out.update(cooperative=True, reset_pending=self.reset_pending)
        return out


def decode_or_reason(value: Any) -> tuple[KafkaReport | None, str | None]:
    """The seam's decode: (report, None), or (None, why) for an invalid one, the
    reason cut to MAX_REASON_LEN. The heartbeat carrying it stays valid (step 3)."""
    try:
        return KafkaReport.decode(value), None
    except InvalidReport as exc:
        return None, str(exc)[:MAX_REASON_LEN]
