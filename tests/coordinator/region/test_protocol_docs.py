"""docs/protocol.md's region tables say what the code speaks: each request's body
fields are the message class's wire fields, each reply's fields its reply
class's, and the region config table lists every setting of RegionConfig. A
change to either side without the other fails."""

from __future__ import annotations

import re
from pathlib import Path

import attrs

from coordinator.protocol.region.commands import CommandKind
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.messages import (
    RegionAck,
    RegionHeartbeat,
    RegionJoin,
    RegionLeave,
    RegionResetRequest,
    RegionStatusRequest,
    RegionTrigger,
)
from coordinator.protocol.region.replies import (
    REPLY_CLASSES,
    JoinRefusal,
    NameHolder,
    RegionHeartbeatReply,
    RegionJoinReply,
    RegionLeaveReply,
    RegionPhase,
    RegionPhaseReply,
    RegionTriggerReply,
    TriggerAnswer,
)
from coordinator.protocol.wire import envelope

DOC = Path(__file__).resolve().parents[3] / "docs" / "protocol.md"

#: One instance of each request (values do not matter: the wire fields are its body's keys).
SAMPLES = {
    "region_join": RegionJoin("r", "m", "i", 1, {}, "h", False),
    "region_heartbeat": RegionHeartbeat("r", "m", "i"),
    "region_ack": RegionAck("r", "m", "i", CommandKind.DRAIN, 1, 0, True, None, None),
    "region_reset_request": RegionResetRequest("r", "m", "i", False, ""),
    "region_trigger": RegionTrigger("r", "m", "i"),
    "region_leave": RegionLeave("r", "m", "i"),
    "region_status": RegionStatusRequest(None),
}

#: One reply to each request, as the table's reply cell spells it first (a
#: heartbeat's names the last consistent checkpoint, an ack's does not).
REPLY_SAMPLES = {
    "region_join": RegionJoinReply("r", RegionPhase.RUNNING, 1, RegionConfig(name="r")),
    "region_heartbeat": RegionHeartbeatReply(RegionPhase.RUNNING, 1),
    "region_ack": RegionPhaseReply(RegionPhase.RUNNING),
    "region_reset_request": RegionPhaseReply(RegionPhase.RUNNING),
    "region_trigger": RegionTriggerReply(RegionPhase.RUNNING, TriggerAnswer.STARTED),
    "region_leave": RegionLeaveReply(1, 1),
}


def _section(title: str) -> str:
    text = DOC.read_text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def _documented(cell: int) -> dict[str, list[str]]:
    """request type -> the fields its table row names in ``cell`` (1: the body,
    2: the reply; the cell's first `...`, braces stripped)."""
    rows = {}
    for line in _section("Region controller messages").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`(region_\w+)`", cells[0]) if len(cells) >= 4 else None
        if match:
            fields = re.match(r"`([^`]*)`", cells[cell])
            assert fields, line
            rows[match.group(1)] = [f.strip() for f in fields.group(1).strip("{}").split(",")]
    return rows


def test_every_region_request_is_documented_with_its_wire_fields():
    documented = _documented(1)
    assert set(documented) == set(SAMPLES)
    for msg_type, sample in SAMPLES.items():
        assert sorted(documented[msg_type]) == sorted(sample.to_body()), msg_type
    assert {type(s).TYPE for s in SAMPLES.values()} <= set(SAMPLES)


def test_every_region_reply_is_documented_with_its_wire_fields():
    documented = _documented(2)
    assert set(REPLY_SAMPLES) <= set(documented)
    for msg_type, sample in REPLY_SAMPLES.items():
        assert sorted(documented[msg_type]) == sorted(sample.to_body()), msg_type
        assert REPLY_CLASSES[envelope.reply_type(msg_type)] is type(sample)
    refused = RegionJoinReply(
        "r", RegionPhase.RUNNING, 1, RegionConfig(name="r"), refused=JoinRefusal("in use", NameHolder("i", 1, "h", 0.5))
    )
    assert set(refused.to_body()) - set(REPLY_SAMPLES["region_join"].to_body()) == {"refused", "holder"}


def test_the_region_config_table_lists_every_setting():
    section = _section("Region controller messages")
    table = section[section.index("| setting | type | range |") :]
    documented = set(
        re.findall(r"`(\w+)`", "\n".join(line.split("|")[1] for line in table.splitlines() if line.startswith("| `")))
    )
    settings = {f.name for f in attrs.fields(RegionConfig)} - {"name"}  # the join's `region` names it
    assert documented == settings
