"""The region controller's replies as the member decodes them
(coordinator/protocol/region/replies.py): every reply survives its own wire
form, and a bad one is Invalid naming the field."""

from __future__ import annotations

import pytest

from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.replies import (
    ErrorReply,
    JoinRefusal,
    NameHolder,
    Predecessor,
    RegionHeartbeatReply,
    RegionJoinReply,
    RegionLeaveReply,
    RegionPhase,
    RegionPhaseReply,
    RegionTriggerReply,
    TriggerAnswer,
    decode_reply,
)
from coordinator.protocol.wire.errors import ErrorCode, Invalid

CONFIG = RegionConfig(name="r", period_s=2.0, mode="operator_driven")

REPLIES = [
    ("region_join_reply", RegionJoinReply("r", RegionPhase.RUNNING, 4, CONFIG, Predecessor("i0", 17, "consumer-1"))),
    ("region_join_reply", RegionJoinReply("r", RegionPhase.FAILED, None, CONFIG, failed_reason="too many resets")),
    (
        "region_join_reply",
        RegionJoinReply(
            "r",
            RegionPhase.RESETTING,
            2,
            CONFIG,
            refused=JoinRefusal("member name 'm0' is in use", NameHolder("i1", None, "host-a", 0.25)),
        ),
    ),
    ("region_heartbeat_reply", RegionHeartbeatReply(RegionPhase.BACKOFF, 3)),
    ("region_heartbeat_reply", RegionHeartbeatReply(RegionPhase.WAITING, None)),
    ("region_ack_reply", RegionPhaseReply(RegionPhase.DRAINING)),
    ("region_trigger_reply", RegionTriggerReply(RegionPhase.RUNNING, TriggerAnswer.NOT_NOW, "resetting")),
    ("region_leave_reply", RegionLeaveReply(5, 4)),
    ("region_leave_reply", RegionLeaveReply(None, None)),
    ("error", ErrorReply(ErrorCode.NOT_REGISTERED, "join again")),
]


@pytest.mark.parametrize(("envelope_type", "reply"), REPLIES)
def test_every_reply_decodes_from_its_wire_form(envelope_type, reply):
    assert decode_reply(envelope_type, reply.to_body()) == reply


@pytest.mark.parametrize(
    ("envelope_type", "body", "field"),
    [
        ("region_ack_reply", {"phase": "SLEEPING"}, "phase"),
        ("region_trigger_reply", {"phase": "RUNNING", "trigger": "maybe"}, "trigger"),
        ("region_leave_reply", {"last_consistent": -1, "complete": None}, "last_consistent"),
        (
            "region_join_reply",
            {"region": "r", "phase": "RUNNING", "last_consistent": None, "config": {"name": "r", "period_s": -1}},
            "config",
        ),
        (
            "region_join_reply",
            {"region": "r", "phase": "RUNNING", "last_consistent": None, "config": {"name": "r"}, "refused": "in use"},
            "holder",
        ),
        (
            "region_join_reply",
            {
                "region": "r",
                "phase": "RUNNING",
                "last_consistent": None,
                "config": {"name": "r"},
                "predecessor": {"pid": 3},
            },
            "incarnation",
        ),
        ("error", {"code": "NO_SUCH_CODE", "message": "?"}, "code"),
        ("register_reply", {"members": []}, "register_reply"),
    ],
)
def test_a_bad_reply_is_invalid_naming_the_field(envelope_type, body, field):
    with pytest.raises(Invalid, match=field):
        decode_reply(envelope_type, body)
