"""The controller's answer to a join under a member name (coordinator/region/membership.py)."""

from __future__ import annotations

from coordinator.protocol.region.kafka_report import KafkaReport
from coordinator.protocol.region.replies import NameHolder, Predecessor
from coordinator.region.membership import JoinKind, admit
from coordinator.region.model import MemberInfo

TIMEOUT_S = 5.0


def _holder(**kw) -> MemberInfo:
    return MemberInfo("m0", b"id", "inc-1", last_seen=100.0, pid=11, host="h1", **kw)


def _admit(existing, incarnation="inc-2", now=101.0, *, replace=False, failed=False, blocked=None):
    return admit(
        existing,
        incarnation,
        now,
        replace=replace,
        region_failed=failed,
        member_timeout_s=TIMEOUT_S,
        eviction_blocked=lambda: blocked,
    )


def test_no_holder_is_a_new_member():
    assert _admit(None).kind is JoinKind.NEW


def test_same_incarnation_is_a_retry_with_the_first_predecessor():
    first = Predecessor("inc-0", 9, "k0")
    answer = _admit(_holder(predecessor=first), incarnation="inc-1")
    assert answer.kind is JoinKind.RETRY
    assert answer.predecessor == first


def test_live_holder_refuses_and_names_it():
    answer = _admit(_holder(), now=102.5)
    assert answer.kind is JoinKind.REFUSED
    assert answer.holder == NameHolder("inc-1", 11, "h1", 2.5)


def test_replace_silent_holder_or_failed_region_restarts_with_the_predecessor():
    for answer in (
        _admit(_holder(kafka=KafkaReport("k1")), replace=True),
        _admit(_holder(kafka=KafkaReport("k1")), now=100.0 + TIMEOUT_S),
        _admit(_holder(kafka=KafkaReport("k1")), failed=True),
    ):
        assert answer.kind is JoinKind.RESTART
        assert answer.withheld is None
        assert answer.predecessor == Predecessor("inc-1", 11, "k1")


def test_restart_while_the_group_rebalances_withholds_the_kafka_member_id():
    answer = _admit(_holder(kafka=KafkaReport("k1")), replace=True, blocked="members ['m1'] report a group rebalance")
    assert answer.kind is JoinKind.RESTART
    assert answer.withheld == "members ['m1'] report a group rebalance"
    assert answer.predecessor == Predecessor("inc-1", 11, None)
