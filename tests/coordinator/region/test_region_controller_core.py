"""The region controller's state machine (no I/O): cycle, resets, failure, restart."""

from __future__ import annotations

import attrs
import pytest

from coordinator.protocol.common.transitions import IllegalTransition
from coordinator.protocol.region.commands import CommandKind
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.kafka_report import KafkaReport
from coordinator.protocol.region.replies import Predecessor, RegionPhase
from coordinator.region.events import RegionEvent
from coordinator.region.machine import TRANSITIONS, RegionCore
from coordinator.region.timing import HINT_SETTLE_S, POST_RESET_PERIOD_SHARE


class Harness:
    def __init__(self, doc=None, **cfg):
        self.sent: list[tuple[str, dict]] = []
        self.docs: list[dict] = []
        self.events: list[RegionEvent] = []
        config = RegionConfig(name="r", **cfg)
        self.core = RegionCore(
            config, lambda m, c: self.sent.append((m, c.to_body())), self.docs.append, doc, on_event=self.events.append
        )

    def take(self):
        out, self.sent = self.sent, []
        return out

    def ack_all(self, cmd, now, **kw):
        for name in sorted(self.core.waiting):
            self.core.ack(name, cmd, kw.get("seq"), kw.get("attempt"), True, None, now, kw.get("offsets", {}).get(name))


def started(n=2, **cfg) -> Harness:
    h = Harness(min_members=n, **cfg)
    for i in range(n):
        h.core.join(f"m{i}", b"id%d" % i, "inc1", 0.0)
    assert h.core.phase is RegionPhase.RESETTING
    sent = h.take()
    assert {b["cmd"] for _, b in sent} == {"reset_to_initial"}
    h.ack_all(CommandKind.RESET, 0.1, attempt=h.core.resets.attempt)
    assert h.core.phase is RegionPhase.RUNNING
    assert [b["cmd"] for _, b in h.take()] == ["resume"] * n
    return h


def test_full_cycle_persists_before_resume_and_retires_older():
    h = started(2, period_s=1.0)
    h.core.tick(0.5)
    assert h.take() == []
    h.core.tick(1.2)
    assert h.core.phase is RegionPhase.DRAINING
    assert [b for _, b in h.take()] == [{"cmd": "drain", "seq": 1}] * 2
    h.ack_all(CommandKind.DRAIN, 1.3, seq=1)
    assert h.core.phase is RegionPhase.CHECKPOINTING
    assert [b["cmd"] for _, b in h.take()] == ["checkpoint"] * 2
    n_docs = len(h.docs)
    h.ack_all(CommandKind.CHECKPOINT, 1.4, seq=1, offsets={"m0": [["t", 0, 0, 5]], "m1": [["t", 1, 0, 7]]})
    assert h.core.phase is RegionPhase.RUNNING
    assert h.docs[-1]["last_consistent"] == 1
    assert len(h.docs) == n_docs + 1
    assert h.docs[-1]["checkpoint_offsets"] == [["t", 0, 5], ["t", 1, 7]]
    assert [b for _, b in h.take()] == [{"cmd": "resume", "complete": 1, "offsets": [["t", 0, 5], ["t", 1, 7]]}] * 2
    # second cycle retires the first
    h.core.tick(2.5)
    h.ack_all(CommandKind.DRAIN, 2.6, seq=2)
    h.ack_all(CommandKind.CHECKPOINT, 2.7, seq=2)
    cmds = [b for _, b in h.take()]
    assert {"cmd": "retire", "seq": 1} in cmds


def test_answers_of_another_command_or_seq_are_stale():
    h = started(2, period_s=1.0)
    h.core.ack("m0", CommandKind.DRAIN, 1, None, True, None, 0.5)  # RUNNING: no answer is awaited
    assert h.core.phase is RegionPhase.RUNNING
    h.core.tick(1.2)
    h.ack_all(CommandKind.DRAIN, 1.3, seq=1)
    assert h.core.phase is RegionPhase.CHECKPOINTING
    h.core.ack("m0", CommandKind.DRAIN, 1, None, True, None, 1.31)  # the drain's answer is stale now
    h.core.ack("m0", CommandKind.CHECKPOINT, 0, None, True, None, 1.32)  # another cycle's
    assert h.core.waiting == {"m0", "m1"}
    h.core.ack("m0", CommandKind.CHECKPOINT, 1, None, True, None, 1.33)
    assert h.core.waiting == {"m1"}


def test_drain_timeout_fails_cycle_and_resets_to_last_consistent():
    h = started(2, period_s=1.0, drain_timeout_s=2.0)
    h.core.tick(1.1)
    h.ack_all(CommandKind.DRAIN, 1.2, seq=1)
    h.ack_all(CommandKind.CHECKPOINT, 1.3, seq=1, offsets={"m0": [["t", 0, 0, 3]]})
    h.take()
    h.core.tick(2.4)
    h.core.ack("m0", CommandKind.DRAIN, 2, None, True, None, 2.5)
    h.core.members.heartbeat("m1", b"id1", "inc1", 3.0)
    h.core.members.heartbeat("m0", b"id0", "inc1", 3.0)
    h.core.tick(4.5)  # m1 never drained
    assert h.core.phase is RegionPhase.RESETTING
    resets = [b for _, b in h.take() if b["cmd"] == "reset"]
    assert len(resets) == 2
    assert resets[0]["seq"] == 1
    assert resets[0]["offsets"] == [["t", 0, 3]]
    assert h.core.resets.consecutive == 1
    assert h.core.cycles.failures == 1


def test_requests_during_reset_do_not_stack_and_force_clears_counter():
    h = started(2)
    h.core.request_reset("m0", False, "sink error", 1.0)
    attempt = h.core.resets.attempt
    h.take()
    h.core.request_reset("m1", False, "sink error too", 1.1)
    h.core.request_reset("m0", True, "rebalance", 1.1)
    assert h.core.resets.attempt == attempt
    assert h.take() == []
    assert h.core.resets.consecutive == 0  # the forced request cleared the counter without stacking
    h.ack_all(CommandKind.RESET, 1.2, attempt=attempt)
    h.core.request_reset("m1", True, "rebalance", 1.5)
    assert h.core.resets.consecutive == 0


def test_too_many_consecutive_resets_fail_the_region():
    h = started(1, max_consecutive_resets=3)
    for i in range(3):
        h.core.request_reset("m0", False, "sink raises", 1.0 + i)
        assert h.core.phase is RegionPhase.RESETTING
        h.ack_all(CommandKind.RESET, 1.1 + i, attempt=h.core.resets.attempt)
    h.core.request_reset("m0", False, "sink raises", 5.0)
    assert h.core.phase is RegionPhase.FAILED
    assert h.docs[-1]["failed"] is True
    assert ("m0", {"cmd": "failed", "reason": h.core.failed_reason}) in h.take()
    h.core.request_reset("m0", True, "rebalance", 6.0)  # FAILED is terminal
    assert h.core.phase is RegionPhase.FAILED


#: The counting tests below hold a repeated failure's RESUME only briefly (the
#: backoff itself: test_region_backoff.py).
SHORT_BACKOFF = {"reset_backoff_s": 0.01, "reset_backoff_max_s": 0.01}


def fail_then_checkpoint(h: Harness, now: float, offsets: list | None) -> None:
    """One member failure and its reset (and its backoff hold), then a periodic
    checkpoint that completes before the member fails again, with ``offsets``
    (m0's claims)."""
    h.core.request_reset("m0", False, "sink raises on record 5", now)
    h.ack_all(CommandKind.RESET, now + 0.01, attempt=h.core.resets.attempt)
    if h.core.phase is RegionPhase.BACKOFF:
        h.core.tick(now + 0.02)
    h.core.tick(now + 0.5)
    assert h.core.phase is RegionPhase.DRAINING
    h.ack_all(CommandKind.DRAIN, now + 0.51, seq=h.core.cycles.seq)
    h.ack_all(CommandKind.CHECKPOINT, now + 0.52, seq=h.core.cycles.seq, offsets={"m0": offsets} if offsets else {})
    assert h.core.phase is RegionPhase.RUNNING


def test_checkpoints_between_failures_that_move_no_offset_do_not_clear_the_counter():
    """A record that fails every attempt: after each reset, a checkpoint completes
    before the member reaches the record again. Such checkpoints moved no offset,
    so they are not progress: the region fails after max_consecutive_resets
    instead of resetting for ever."""
    h = started(1, max_consecutive_resets=3, period_s=0.4, **SHORT_BACKOFF)
    fail_then_checkpoint(h, 1.0, [["t", 0, 0, 5]])  # the first checkpoint: offset 5 is new
    assert h.core.resets.consecutive == 0
    for i in range(3):
        fail_then_checkpoint(h, 2.0 + i, [["t", 0, 5, 5]])
        assert h.core.resets.consecutive == i + 1
    h.core.request_reset("m0", False, "sink raises on record 5", 6.0)
    assert h.core.phase is RegionPhase.FAILED
    assert "3 consecutive resets" in h.core.failed_reason


def test_a_checkpoint_that_moves_an_offset_clears_the_counter():
    h = started(1, max_consecutive_resets=3, period_s=0.4, **SHORT_BACKOFF)
    fail_then_checkpoint(h, 1.0, [["t", 0, 0, 5]])
    fail_then_checkpoint(h, 2.0, [["t", 0, 5, 5]])
    assert h.core.resets.consecutive == 1
    fail_then_checkpoint(h, 3.0, [["t", 0, 5, 9]])  # records 5-8 got through this time
    assert h.core.resets.consecutive == 0


def test_a_checkpoint_long_after_the_last_failure_clears_the_counter():
    """Rare failures of an idle region (no offset moves) never add up to FAILED."""
    h = started(
        1, max_consecutive_resets=2, period_s=0.4, failure_memory_s=10.0, member_timeout_s=60.0, **SHORT_BACKOFF
    )
    fail_then_checkpoint(h, 1.0, [["t", 0, 0, 5]])
    fail_then_checkpoint(h, 2.0, [["t", 0, 5, 5]])
    assert h.core.resets.consecutive == 1
    fail_then_checkpoint(h, 3.0, [["t", 0, 5, 5]])
    assert h.core.resets.consecutive == 2
    h.core.tick(13.5)  # 10.5 s after the last failure: an idle checkpoint
    h.ack_all(CommandKind.DRAIN, 13.51, seq=h.core.cycles.seq)
    h.ack_all(CommandKind.CHECKPOINT, 13.52, seq=h.core.cycles.seq)
    assert h.core.resets.consecutive == 0
    fail_then_checkpoint(h, 14.0, None)
    assert h.core.phase is RegionPhase.RUNNING
    assert h.core.resets.consecutive == 1


def test_a_restored_counter_is_not_cleared_by_the_first_checkpoint_after_a_restart():
    h = started(
        1, max_consecutive_resets=3, period_s=0.4, failure_memory_s=10.0, member_timeout_s=60.0, **SHORT_BACKOFF
    )
    fail_then_checkpoint(h, 1.0, [["t", 0, 0, 5]])
    fail_then_checkpoint(h, 2.0, [["t", 0, 5, 5]])
    fail_then_checkpoint(h, 3.0, [["t", 0, 5, 5]])
    h2 = Harness(
        doc=h.docs[-1],
        min_members=1,
        max_consecutive_resets=3,
        period_s=0.4,
        failure_memory_s=10.0,
        member_timeout_s=60.0,
        **SHORT_BACKOFF,
    )
    assert h2.core.resets.consecutive == 2
    h2.core.join("m0", b"id0", "inc2", 100.0)
    h2.ack_all(CommandKind.RESET, 100.1, attempt=h2.core.resets.attempt)
    h2.core.tick(100.6)
    h2.ack_all(CommandKind.DRAIN, 100.61, seq=h2.core.cycles.seq)
    h2.ack_all(CommandKind.CHECKPOINT, 100.62, seq=h2.core.cycles.seq, offsets={"m0": [["t", 0, 5, 5]]})
    assert h2.core.resets.consecutive == 2  # the clock started at this checkpoint
    h2.core.tick(111.0)
    h2.ack_all(CommandKind.DRAIN, 111.01, seq=h2.core.cycles.seq)
    h2.ack_all(CommandKind.CHECKPOINT, 111.02, seq=h2.core.cycles.seq, offsets={"m0": [["t", 0, 5, 5]]})
    assert h2.core.resets.consecutive == 0


def test_reset_failure_answer_retries_with_new_attempt():
    h = started(2)
    h.core.request_reset("m0", True, "rebalance", 1.0)
    a1 = h.core.resets.attempt
    h.core.ack("m0", CommandKind.RESET, None, a1, False, "merge timed out", 1.1)
    assert h.core.phase is RegionPhase.RESETTING
    assert h.core.resets.attempt == a1 + 1
    h.core.ack("m1", CommandKind.RESET, None, a1, True, None, 1.2)  # stale attempt: ignored
    assert h.core.waiting == {"m0", "m1"}


def test_member_silence_and_restart():
    h = started(2, member_timeout_s=2.0)
    h.core.members.heartbeat("m0", b"id0", "inc1", 1.9)
    h.core.tick(2.5)  # m1 silent since 0.1
    assert "m1" not in h.core.members
    assert h.core.phase is RegionPhase.RESETTING
    h.ack_all(CommandKind.RESET, 2.6, attempt=h.core.resets.attempt)
    h.take()
    # the runner restarts m1: a new incarnation joins -> membership reset, counter unchanged
    before = h.core.resets.consecutive
    h.core.join("m1", b"id1b", "inc2", 3.0)
    assert h.core.phase is RegionPhase.RESETTING
    assert h.core.resets.consecutive == before
    assert {m for m, _ in h.take()} == {"m0", "m1"}


def test_join_during_reset_restarts_round_including_joiner():
    h = started(1)
    h.core.request_reset("m0", True, "rebalance", 1.0)
    a1 = h.core.resets.attempt
    h.take()
    h.core.join("m9", b"x", "i", 1.1)
    assert h.core.resets.attempt == a1 + 1
    assert h.core.waiting == {"m0", "m9"}


def test_restart_from_document_waits_for_known_members_then_resets_to_checkpoint():
    h = started(2)
    h.core.tick(1.1)
    h.ack_all(CommandKind.DRAIN, 1.2, seq=1)
    h.ack_all(CommandKind.CHECKPOINT, 1.3, seq=1)
    doc = h.docs[-1]
    again = Harness(doc=doc, min_members=1)
    assert again.core.phase is RegionPhase.WAITING
    assert again.core.cycles.next_seq == 2
    assert again.core.members.heartbeat("m0", b"id0", "inc1", 5.0) is False  # unknown: must join
    again.core.join("m0", b"id0", "inc1", 5.0)
    assert again.core.phase is RegionPhase.WAITING  # m1 was a member: wait for it (or the grace)
    again.core.join("m1", b"id1", "inc1", 5.1)
    assert again.core.phase is RegionPhase.RESETTING
    assert {b["cmd"] for _, b in again.take()} == {"reset"}
    assert again.core.resets.attempt > h.core.resets.attempt - 1


def test_grace_starts_region_without_a_lost_member():
    h = Harness(min_members=3, join_grace_s=1.0)
    h.core.join("m0", b"a", "i", 0.0)
    h.core.tick(0.5)
    assert h.core.phase is RegionPhase.WAITING
    h.core.members.heartbeat("m0", b"a", "i", 1.0)
    h.core.tick(1.01)
    assert h.core.phase is RegionPhase.RESETTING


def test_transition_table_is_enforced():
    h = Harness()
    assert RegionPhase.RUNNING not in TRANSITIONS[RegionPhase.WAITING]
    with pytest.raises(IllegalTransition, match="illegal transition WAITING -> RUNNING"):
        h.core._goto(RegionPhase.RUNNING, "test")
    assert TRANSITIONS[RegionPhase.FAILED] == frozenset()


def test_config_validation():
    with pytest.raises(ValueError, match="mode"):
        RegionConfig(name="r", mode="sometimes")
    with pytest.raises(ValueError, match="period_s"):
        RegionConfig(name="r", period_s=0)
    with pytest.raises(ValueError, match="unknown settings"):
        RegionConfig.from_dict({"name": "r", "perid_s": 1})


def test_rebalance_caused_failure_forces_the_reset():
    h = started(2, max_consecutive_resets=1)
    h.core.request_reset("m0", False, "sink error", 0.5)  # consecutive 1
    h.ack_all(CommandKind.RESET, 0.6, attempt=h.core.resets.attempt)
    h.core.tick(1.7)
    h.core.ack("m0", CommandKind.DRAIN, h.core.cycles.seq, None, False, "RebalanceInProgressError", 1.8, rebalance=True)
    assert h.core.phase is RegionPhase.RESETTING
    assert h.core.resets.consecutive == 0


def test_unreported_partitions_keep_the_previous_checkpoint_offset():
    """A partition nobody owns at checkpoint N (its owner was killed, not yet
    reassigned) must keep its offset of N-1, not vanish (else the next owner
    starts it from its initial offset and duplicates published records)."""
    h = started(2)
    h.core.tick(1.1)
    h.ack_all(CommandKind.DRAIN, 1.2, seq=1)
    h.ack_all(
        CommandKind.CHECKPOINT, 1.3, seq=1, offsets={"m0": [["t", 0, 0, 10], ["t", 1, 0, 20]], "m1": [["t", 2, 0, 30]]}
    )
    h.core.tick(2.4)
    h.ack_all(CommandKind.DRAIN, 2.5, seq=2)
    h.ack_all(CommandKind.CHECKPOINT, 2.6, seq=2, offsets={"m0": [["t", 0, 10, 15]], "m1": [["t", 2, 30, 35]]})
    assert h.core.checkpoints.offsets == [["t", 0, 15], ["t", 1, 20], ["t", 2, 35]]
    h.core.request_reset("m0", True, "rebalance", 3.0)
    reset = next(b for _, b in h.take() if b["cmd"] == "reset")
    assert reset["offsets"] == [["t", 0, 15], ["t", 1, 20], ["t", 2, 35]]


def test_request_after_own_reset_answer_restarts_the_round():
    """A member revoked after it answered the running reset needs a new round; one
    that has not answered yet is covered by the reset it is about to do."""
    h = started(2)
    h.core.request_reset("m0", True, "revoked 2 partitions", 1.0)
    a1 = h.core.resets.attempt
    h.take()
    h.core.request_reset("m1", True, "revoked 2 partitions", 1.05)  # m1 has not answered a1: covered
    assert h.core.resets.attempt == a1
    assert h.take() == []
    h.core.ack("m0", CommandKind.RESET, None, a1, True, None, 1.1)
    h.core.request_reset("m0", True, "revoked 2 partitions", 1.2)  # after its answer: new round
    assert h.core.phase is RegionPhase.RESETTING
    assert h.core.resets.attempt == a1 + 1
    assert h.core.waiting == {"m0", "m1"}
    assert {m for m, b in h.take() if b["cmd"] == "reset_to_initial" and b["attempt"] == a1 + 1} == {"m0", "m1"}
    h.ack_all(CommandKind.RESET, 1.3, attempt=a1 + 1)
    assert h.core.phase is RegionPhase.RUNNING
    assert h.core.resets.consecutive == 0


def test_restarted_member_learns_its_predecessors_kafka_member_id():
    h = started(2)
    assert h.core.members.heartbeat("m1", b"id1", "inc1", 0.5, KafkaReport("cr-m1-abc", 3, rebalancing=False))
    reply = h.core.join("m1", b"id1b", "inc2", 1.0, pid=42, replace=True)  # its predecessor's pid is gone
    assert reply.predecessor == Predecessor("inc1", None, "cr-m1-abc")
    assert h.core.join("m1", b"id1b", "inc2", 1.1).predecessor.kafka_member_id == "cr-m1-abc"  # retry
    assert h.core.join("m2", b"id2", "inc1", 1.2).predecessor is None


def test_no_eviction_while_the_group_may_be_rebalancing():
    """Removing a consumer during a rebalance can leave a tansu group leaderless:
    a restarted member is not told its predecessor's Kafka member id right after
    a rejoin hint that the others have not answered with a settled report, nor
    while another member reports a rebalance."""
    settled = KafkaReport("cr-m0-x", 3, rebalancing=False)
    h = started(2)
    assert h.core.members.heartbeat("m1", b"id1", "inc1", 0.5, attrs.evolve(settled, member_id="cr-m1-abc"))
    h.core.join("m2", b"id2", "inc1", 1.0)  # a member added: a reset with the rejoin hint
    assert h.core.members.heartbeat("m0", b"id0", "inc1", 1.2, settled)  # sent before its consumer acted on the hint
    reply = h.core.join("m1", b"id1b", "inc2", 1.3, pid=42, replace=True)
    assert reply.predecessor.incarnation == "inc1"
    assert reply.predecessor.kafka_member_id is None

    h = started(2)
    assert h.core.members.heartbeat("m1", b"id1", "inc1", 0.5, attrs.evolve(settled, member_id="cr-m1-abc"))
    h.core.join("m2", b"id2", "inc1", 1.0)
    for name in ("m0", "m2"):  # both settled well after the hint: the group has formed
        assert h.core.members.heartbeat(name, f"id-{name}".encode(), "inc1", 1.0 + HINT_SETTLE_S + 0.5, settled)
    reply = h.core.join("m1", b"id1b", "inc2", 2.6, pid=42, replace=True)
    assert reply.predecessor.kafka_member_id == "cr-m1-abc"

    h = started(2)
    assert h.core.members.heartbeat("m0", b"id0", "inc1", 0.5, attrs.evolve(settled, rebalancing=True))
    assert h.core.members.heartbeat("m1", b"id1", "inc1", 0.5, attrs.evolve(settled, member_id="cr-m1-abc"))
    reply = h.core.join("m1", b"id1b", "inc2", 1.0, pid=42, replace=True)
    assert reply.predecessor.kafka_member_id is None


def _report(h, now, **rebalancing):
    for name in sorted(h.core.members):
        h.core.members.heartbeat(name, b"id", "inc1", now, KafkaReport(f"k-{name}", 5, rebalancing.get(name, False)))


def test_periodic_drain_waits_while_a_member_reports_a_rebalance():
    h = started(2, period_s=1.0, rebalance_settle_max_s=4.0)
    _report(h, 1.0, m1=True)
    h.core.tick(1.2)
    assert h.core.phase is RegionPhase.RUNNING
    assert h.take() == []  # due, but m1's group is rebalancing
    _report(h, 1.5)
    h.core.tick(1.6)
    assert h.core.phase is RegionPhase.DRAINING
    h.ack_all(CommandKind.DRAIN, 1.7, seq=1)
    h.ack_all(CommandKind.CHECKPOINT, 1.8, seq=1)
    # bounded: a report that never settles delays the drain by rebalance_settle_max_s at most
    _report(h, 2.0, m0=True)
    h.core.tick(2.9)
    assert h.core.phase is RegionPhase.RUNNING
    h.core.tick(6.8)
    assert h.core.phase is RegionPhase.RUNNING
    h.core.tick(6.95)
    assert h.core.phase is RegionPhase.DRAINING


def test_a_cooperative_rebalance_does_not_defer_checkpoints_a_pending_reset_does():
    h = started(2, period_s=1.0, rebalance_settle_max_s=4.0)

    def report(now, m1_generation, **flags):
        for name in sorted(h.core.members):
            h.core.members.heartbeat(
                name,
                b"id",
                "inc1",
                now,
                KafkaReport(
                    f"k-{name}",
                    m1_generation if name == "m1" else 5,
                    flags.get(f"{name}_rebalancing", False),
                    cooperative=True,
                    reset_pending=flags.get(f"{name}_reset_pending", False),
                ),
            )

    # m1 rebalances (and is a generation ahead): its partitions keep flowing, so the drain runs when due
    report(1.0, 6, m1_rebalancing=True)
    h.core.tick(1.2)
    assert h.core.phase is RegionPhase.DRAINING
    h.ack_all(CommandKind.DRAIN, 1.3, seq=1)
    h.ack_all(CommandKind.CHECKPOINT, 1.4, seq=1)
    h.take()
    # m0 was revoked after fetching: its reset is coming and its drain would fail, so the drain waits
    report(1.5, 6, m0_rebalancing=True, m0_reset_pending=True)
    h.core.tick(2.5)
    assert h.core.phase is RegionPhase.RUNNING
    assert h.take() == []
    report(2.6, 6)
    h.core.tick(2.7)
    assert h.core.phase is RegionPhase.DRAINING


def test_cooperative_members_checkpoint_early_after_a_reset():
    h = started(2, period_s=1.0)
    for name in sorted(h.core.members):
        h.core.members.heartbeat(name, b"id", "inc1", 1.0, KafkaReport(f"k-{name}", 5, cooperative=True))
    h.core.request_reset("m0", True, "rebalance", 1.1)
    h.ack_all(CommandKind.RESET, 1.2, attempt=h.core.resets.attempt)
    assert h.core.cycles.next_at == pytest.approx(1.2 + POST_RESET_PERIOD_SHARE)
    assert POST_RESET_PERIOD_SHARE == 0.1  # the floor after any RESUME (timing.py, the cadence)
    # a restarted member has not reported yet (no consumer): still early
    h.core.join("m1", b"id1b", "inc2", 1.3, pid=42, replace=True)
    h.ack_all(CommandKind.RESET, 1.4, attempt=h.core.resets.attempt)
    assert h.core.cycles.next_at == pytest.approx(1.4 + POST_RESET_PERIOD_SHARE)


def _cooperative_reports(h, now):
    for name in sorted(h.core.members):
        h.core.members.heartbeat(name, b"id", "inc1", now, KafkaReport(f"k-{name}", 5, cooperative=True))


def test_a_graceful_leave_of_a_cooperative_member_while_running_resets_nobody():
    h = started(3, period_s=1.0)
    _cooperative_reports(h, 0.5)
    h.core.leave("m2", 0.6)
    assert h.core.phase is RegionPhase.RUNNING
    assert h.take() == []
    h.core.tick(1.2)  # the next checkpoint goes on without the leaver
    assert h.core.phase is RegionPhase.DRAINING
    assert sorted(m for m, b in h.take() if b["cmd"] == "drain") == ["m0", "m1"]


def test_a_cooperative_cycle_goes_on_without_a_leaver_that_has_not_answered_its_checkpoint():
    h = started(3, period_s=1.0)
    _cooperative_reports(h, 0.5)
    h.core.tick(1.2)
    assert h.core.phase is RegionPhase.DRAINING
    h.take()
    h.core.ack("m0", CommandKind.DRAIN, h.core.cycles.seq, None, True, None, 1.25)
    h.core.ack("m1", CommandKind.DRAIN, h.core.cycles.seq, None, True, None, 1.25)
    h.core.leave("m2", 1.3)  # the last one awaited: the cycle moves on
    assert h.core.phase is RegionPhase.CHECKPOINTING
    assert sorted(m for m, b in h.take() if b["cmd"] == "checkpoint") == ["m0", "m1"]
    h.ack_all(CommandKind.CHECKPOINT, 1.4, seq=h.core.cycles.seq)
    assert h.core.phase is RegionPhase.RUNNING
    assert h.core.checkpoints.members == ["m0", "m1"]


def test_a_graceful_leave_after_its_checkpoint_answer_or_of_an_eager_region_still_resets():
    h = started(3, period_s=1.0)
    _cooperative_reports(h, 0.5)
    h.core.tick(1.2)
    h.ack_all(CommandKind.DRAIN, 1.25, seq=h.core.cycles.seq)
    h.core.ack("m2", CommandKind.CHECKPOINT, h.core.cycles.seq, None, True, None, 1.3, [["t", 2, 0, 40]])
    h.core.leave("m2", 1.35)  # its offsets are in the cycle, its interval is never published
    assert h.core.phase is RegionPhase.RESETTING
    h = started(3, period_s=1.0)
    _report(h, 0.5)  # eager reports
    h.core.leave("m2", 0.6)
    assert h.core.phase is RegionPhase.RESETTING


def test_forced_resets_pace_the_next_checkpoint_by_the_period():
    """The next checkpoint after a forced reset is a period after its RESUME, whether or not
    the members report their group state yet (a reported rebalance defers the due drain)."""
    h = started(2, period_s=1.0)
    h.core.request_reset("m0", True, "rebalance", 1.0)
    h.ack_all(CommandKind.RESET, 1.1, attempt=h.core.resets.attempt)
    assert h.core.cycles.next_at == pytest.approx(1.1 + 1.0)  # nobody reports yet
    h.core.request_reset("m0", True, "rebalance", 1.3)
    h.ack_all(CommandKind.RESET, 1.4, attempt=h.core.resets.attempt)
    assert h.core.cycles.next_at == pytest.approx(1.4 + 1.0)  # a second forced reset: no longer
    _report(h, 1.5)
    h.core.request_reset("m0", True, "rebalance", 1.6)
    h.ack_all(CommandKind.RESET, 1.7, attempt=h.core.resets.attempt)
    assert h.core.cycles.next_at == pytest.approx(1.7 + 1.0)


def test_member_name_held_by_a_live_incarnation_is_refused():
    h = started(2, member_timeout_s=2.0)
    h.core.members.heartbeat("m1", b"id1", "inc1", 1.0)
    reply = h.core.join("m1", b"dup", "inc9", 1.5, pid=77, host="h2")
    assert "m1" in reply.refused.reason
    assert reply.refused.holder.incarnation == "inc1"
    assert h.core.members["m1"].incarnation == "inc1"
    assert h.core.phase is RegionPhase.RUNNING
    assert h.take() == []
    # the joiner saw the holder's process is gone (same host, no such pid): accepted at once
    assert h.core.join("m1", b"new", "inc9", 1.6, pid=77, host="h2", replace=True).refused is None
    assert h.core.members["m1"].incarnation == "inc9"
    assert h.core.phase is RegionPhase.RESETTING
    # a holder silent for member_timeout_s no longer counts as alive
    h.core.members.heartbeat("m0", b"id0", "inc1", 1.0)
    assert h.core.join("m0", b"x", "inc2", 3.1, pid=5, host="h3").refused is None


def test_reset_for_a_joining_or_leaving_member_carries_the_rejoin_hint():
    h = started(2)
    h.core.join("m2", b"id2", "inc1", 1.0)  # a consumer joins the group: everyone rejoins at once
    assert all(b.get("rejoin") is True for _, b in h.take() if b["cmd"].startswith("reset"))
    h.ack_all(CommandKind.RESET, 1.1, attempt=h.core.resets.attempt)
    h.take()
    h.core.leave("m2", 1.2)  # graceful leave: its consumer left the group
    assert all(b.get("rejoin") is True for _, b in h.take() if b["cmd"].startswith("reset"))
    h.ack_all(CommandKind.RESET, 1.3, attempt=h.core.resets.attempt)
    h.take()
    h.core.request_reset("m0", True, "revoked", 1.4)  # a rebalance already under way: no hint
    assert [b.get("rejoin") for _, b in h.take()] == [None, None]
