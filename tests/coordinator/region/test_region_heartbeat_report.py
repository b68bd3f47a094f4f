"""The heartbeat's Kafka group report (coordinator/protocol/region/kafka_report.py): decoded
into a typed report at the wire seam; the cooperative fields are optional (an
eager member sends three) and carried only for a cooperative member; an invalid
report is ignored and logged, and the heartbeat carrying it still counts."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.protocol.region.commands import CommandKind
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.kafka_report import MAX_MEMBER_ID_LEN, MAX_REASON_LEN, KafkaReport
from coordinator.protocol.region.messages import RegionHeartbeat
from coordinator.protocol.region.replies import RegionPhase
from coordinator.protocol.wire.errors import Invalid
from coordinator.region.machine import RegionCore

BASE = {"region": "r", "member": "m0", "incarnation": "i1"}
EAGER = {"member_id": "k-m0", "generation": 4, "rebalancing": True}


def test_an_eager_members_report_is_unchanged():
    hb = RegionHeartbeat.from_body({**BASE, "kafka": EAGER})
    assert hb.kafka == KafkaReport("k-m0", 4, rebalancing=True)
    assert hb.kafka_invalid is None
    assert hb.kafka.to_dict() == EAGER
    assert hb.to_body() == {**BASE, "kafka": EAGER, "dead_letters": None}
    assert hb.kafka.holds_drains


def test_a_heartbeat_carries_its_dead_letter_count_checked():
    hb = RegionHeartbeat.from_body({**BASE, "kafka": EAGER, "dead_letters": 12})
    assert hb.dead_letters == 12
    assert RegionHeartbeat.from_body(hb.to_body()) == hb
    for bad in (-1, "3", 1.5, True, 1 << 64):
        with pytest.raises(Invalid, match="dead_letters"):
            RegionHeartbeat.from_body({**BASE, "dead_letters": bad})


def test_a_cooperative_report_carries_its_pending_reset():
    hb = RegionHeartbeat.from_body({**BASE, "kafka": {**EAGER, "cooperative": True, "reset_pending": True}})
    assert hb.kafka is not None
    assert hb.kafka.to_dict() == {**EAGER, "cooperative": True, "reset_pending": True}
    hb = RegionHeartbeat.from_body({**BASE, "kafka": {**EAGER, "cooperative": False, "reset_pending": True}})
    assert hb.kafka is not None
    assert hb.kafka.to_dict() == EAGER
    assert not hb.kafka.reset_pending
    # a cooperative member's rebalance alone holds no drain; its pending reset does
    assert not KafkaReport("k", 4, rebalancing=True, cooperative=True).holds_drains
    assert KafkaReport("k", 4, cooperative=True, reset_pending=True).holds_drains


def test_no_report_is_none():
    assert RegionHeartbeat.from_body(BASE).kafka is None
    assert RegionHeartbeat.from_body({**BASE, "kafka": None}).kafka_invalid is None


@pytest.mark.parametrize(
    ("kafka", "names"),
    [
        ({**EAGER, "cooperative": "yes"}, "cooperative"),
        ({**EAGER, "cooperative": True, "reset_pending": 1}, "reset_pending"),
        ({**EAGER, "rebalancing": None}, "rebalancing"),
        ({**EAGER, "generation": 1 << 31}, "generation"),
        ({**EAGER, "generation": True}, "generation"),
        ({**EAGER, "generation": 4.0}, "generation"),
        ({**EAGER, "member_id": 7}, "member_id"),
        ({**EAGER, "member_id": "k" * (MAX_MEMBER_ID_LEN + 1)}, "member_id"),
        ({**EAGER, "member_id": "k\nforged log line"}, "member_id"),
        ([1, 2], "object"),
        ("rebalancing", "object"),
    ],
)
def test_an_invalid_report_is_ignored_but_the_heartbeat_is_valid(kafka, names):
    hb = RegionHeartbeat.from_body({**BASE, "kafka": kafka})
    assert (hb.region, hb.member, hb.incarnation) == ("r", "m0", "i1")
    assert hb.kafka is None
    assert hb.kafka_invalid is not None
    assert names in hb.kafka_invalid
    assert len(hb.kafka_invalid) <= MAX_REASON_LEN


@given(
    st.dictionaries(
        st.sampled_from(["member_id", "generation", "rebalancing", "cooperative", "reset_pending", "other"]),
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats()
        | st.text(max_size=30)
        | st.lists(st.integers(), max_size=2),
    )
)
def test_any_report_decodes_or_is_refused_with_a_reason(kafka):
    hb = RegionHeartbeat.from_body({**BASE, "kafka": kafka})
    assert (hb.kafka is None) != (hb.kafka_invalid is None)
    if hb.kafka is not None:  # what was kept round-trips
        assert KafkaReport.decode(hb.kafka.to_dict()) == hb.kafka


def test_the_core_drops_a_member_report_that_turns_invalid_and_logs_it_once(caplog):
    core = RegionCore(RegionConfig(name="r", min_members=2, member_timeout_s=60.0), lambda m, c: None, lambda d: None)
    for name in ("m0", "m1"):
        core.join(name, name.encode(), "i1", 0.0)
    for name in ("m0", "m1"):
        core.ack(name, CommandKind.RESET, None, core.resets.attempt, True, None, 0.1)
    assert core.phase is RegionPhase.RUNNING
    rebalancing = KafkaReport("k", 4, rebalancing=True)
    core.members.heartbeat("m0", b"m0", "i1", 0.5, KafkaReport("k0", 4))
    core.members.heartbeat("m1", b"m1", "i1", 0.5, rebalancing)
    core.tick(1.2)
    assert core.phase is RegionPhase.RUNNING  # m1's rebalance holds the due drain
    with caplog.at_level(logging.INFO, logger="coordinator.region.membership"):
        for now in (1.3, 1.4, 1.5):  # m1's reports turn invalid: it counts as not reporting
            assert core.members.heartbeat("m1", b"m1", "i1", now, None, "kafka.generation must be an int32 or null")
        assert caplog.text.count("invalid Kafka group report") == 1
        assert core.members["m1"].kafka is None
        assert core.members["m1"].last_seen == 1.5
        assert core.status(1.5).members["m1"].kafka_invalid.startswith("kafka.generation")
        core.tick(1.6)
        assert core.phase is RegionPhase.DRAINING  # no stale "rebalancing" holds drains back
        assert core.members.heartbeat("m1", b"m1", "i1", 1.7, rebalancing)
        assert "reports its Kafka group state again" in caplog.text
    assert core.members["m1"].kafka == rebalancing
    assert core.members["m1"].kafka_invalid is None
    assert core.status(1.7).members["m1"].kafka == rebalancing
