"""The region controller's state machine under untimely faults (no I/O): a
member silent while the region waits, every way to FAILED carrying its reason,
a dropped member's checkpoint remembered for its return, and triggers that
cannot be served now answered at once."""

from __future__ import annotations

import pytest

from coordinator.protocol.region.commands import CommandKind
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.replies import RegionPhase, TriggerAnswer
from coordinator.region.machine import RegionCore
from coordinator.region.model import AbsentCheckpoints


class Harness:
    def __init__(self, doc=None, **cfg):
        self.sent: list[tuple[str, dict]] = []
        self.docs: list[dict] = []
        config = RegionConfig(name="r", **cfg)
        self.core = RegionCore(config, lambda m, c: self.sent.append((m, c.to_body())), self.docs.append, doc)

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
    h.ack_all(CommandKind.RESET, 0.1, attempt=h.core.resets.attempt)
    assert h.core.phase is RegionPhase.RUNNING
    h.take()
    return h


def checkpoint(h: Harness, now: float, offsets=None) -> int:
    h.core.tick(now)
    assert h.core.phase is RegionPhase.DRAINING
    seq = h.core.cycles.seq
    h.ack_all(CommandKind.DRAIN, now + 0.01, seq=seq)
    h.ack_all(CommandKind.CHECKPOINT, now + 0.02, seq=seq, offsets=offsets or {})
    assert h.core.phase is RegionPhase.RUNNING
    assert h.core.checkpoints.last_consistent == seq
    return seq


def test_only_waiting_member_going_silent_keeps_the_region_waiting():
    h = Harness(min_members=2, member_timeout_s=2.0, join_grace_s=60.0)
    h.core.join("m0", b"a", "i", 0.0)
    assert h.core.phase is RegionPhase.WAITING
    h.core.tick(2.5)  # m0 silent past member_timeout_s: dropped, the region still waits
    assert h.core.phase is RegionPhase.WAITING
    assert h.core.members == {}
    h.core.join("m0", b"a", "i2", 3.0)
    h.core.join("m1", b"b", "i", 3.1)
    assert h.core.phase is RegionPhase.RESETTING
    assert {m for m, _ in h.take()} == {"m0", "m1"}


def test_restored_region_whose_rejoined_member_goes_silent_keeps_waiting():
    h = started(2)
    checkpoint(h, 1.1)
    again = Harness(doc=h.docs[-1], min_members=2, member_timeout_s=2.0, join_grace_s=60.0)
    again.core.join("m0", b"a", "inc1", 5.0)
    again.core.tick(7.5)
    assert again.core.phase is RegionPhase.WAITING
    assert again.core.members == {}


def test_every_way_to_failed_says_why():
    # too many consecutive resets
    h = started(1, max_consecutive_resets=1)
    h.core.request_reset("m0", False, "sink raises", 1.0)
    h.ack_all(CommandKind.RESET, 1.1, attempt=h.core.resets.attempt)
    h.core.request_reset("m0", False, "sink raises again", 2.0)
    status = h.core.status(2.0)
    assert status.phase == "FAILED"
    assert "sink raises again" in status.failed_reason
    # an internal error the service turns into FAILED (a tick that raised)
    h = started(2)
    h.take()
    h.core.fail("tick raised ValueError: boom", 3.0)
    status = h.core.status(3.0)
    assert status.phase == "FAILED"
    assert status.failed_reason == "tick raised ValueError: boom"
    assert h.docs[-1]["failed"] is True
    assert h.docs[-1]["failed_reason"] == "tick raised ValueError: boom"
    assert sorted(m for m, b in h.take() if b == {"cmd": "failed", "reason": "tick raised ValueError: boom"}) == [
        "m0",
        "m1",
    ]
    h.core.fail("a second cause", 3.1)  # terminal: the first reason stays
    assert h.core.status(3.1).failed_reason == "tick raised ValueError: boom"
    # restored from a document that lost its reason
    doc = dict(h.docs[-1], failed_reason=None)
    again = Harness(doc=doc)
    assert again.core.phase is RegionPhase.FAILED
    assert again.core.status(4.0).failed_reason
    # a FAILED region tells a joiner why
    reply = again.core.join("m5", b"x", "i", 4.0)
    assert reply.phase is RegionPhase.FAILED
    assert reply.failed_reason


def resets(sent) -> dict[str, dict]:
    return {m: b for m, b in sent if b["cmd"] == "reset"}


def test_member_dropped_after_a_checkpoint_is_reset_to_its_own_checkpoint_when_it_returns():
    """m1 took part in checkpoint 1, then stayed away past member_timeout_s;
    checkpoint 2 completed without it. On its return its reset names its own
    last completed checkpoint (1): its sink publishes the intervals it sealed
    there instead of deleting them, its other operators load their data of 1."""
    h = started(2, member_timeout_s=2.0)
    assert checkpoint(h, 1.1) == 1
    h.core.members.heartbeat("m0", b"id0", "inc1", 2.0)
    h.core.tick(3.5)  # m1 silent since 1.12: dropped
    assert "m1" not in h.core.members
    assert resets(h.take())["m0"]["own"] == 1
    h.ack_all(CommandKind.RESET, 3.6, attempt=h.core.resets.attempt)
    assert checkpoint(h, 4.7) == 2
    assert h.docs[-1]["checkpoint_members"] == ["m0"]
    assert h.docs[-1]["absent_checkpoints"] == {"m1": 1}
    h.take()
    h.core.join("m1", b"id1b", "inc2", 5.0)  # the returning process (a new incarnation)
    sent = resets(h.take())
    assert sent["m1"]["seq"] == 2
    assert sent["m1"]["members"] == ["m0"]
    assert sent["m1"]["own"] == 1
    assert sent["m0"]["own"] == 2
    # the region's restart keeps what it knows about the absent member
    again = Harness(doc=h.docs[-1], min_members=1)
    again.core.join("m1", b"id1", "inc3", 9.0)
    again.core.join("m0", b"id0", "inc3", 9.0)
    assert resets(again.take())["m1"]["own"] == 1
    # once m1 takes part in a checkpoint again, that one is its own
    h.ack_all(CommandKind.RESET, 5.1, attempt=h.core.resets.attempt)
    assert checkpoint(h, 6.2) == 3
    assert h.docs[-1]["absent_checkpoints"] == {}
    h.core.request_reset("m0", True, "revoked", 7.0)
    assert {m: b["own"] for m, b in resets(h.take()).items()} == {"m0": 3, "m1": 3}


def test_a_new_member_has_no_own_checkpoint():
    h = started(1)
    checkpoint(h, 1.1)
    h.core.join("m7", b"x", "i", 2.0)
    sent = resets(h.take())
    assert sent["m7"]["own"] is None
    assert sent["m0"]["own"] == 1


def test_leave_reply_names_only_what_the_leaving_incarnation_took_part_in():
    h = started(2, member_timeout_s=2.0)
    checkpoint(h, 1.1)
    assert h.core.leave_reply("m0", "inc1") == 1
    h.core.members.heartbeat("m0", b"id0", "inc1", 2.0)
    h.core.tick(3.5)  # m1 dropped while it may still be alive (a network blip)
    h.ack_all(CommandKind.RESET, 3.6, attempt=h.core.resets.attempt)
    checkpoint(h, 4.7)
    # m1's process was dropped: what it sealed after checkpoint 1 may belong to a
    # checkpoint that never completed, so it publishes nothing; its next process
    # is reset to its checkpoint 1
    assert h.core.leave_reply("m1", "inc1") is None
    assert h.core.leave_reply("m0", "inc1") == 2
    assert h.core.leave_reply("m9", "inc1") is None


def test_trigger_is_answered_with_whether_a_drain_will_come():
    h = started(2, mode="operator_driven")
    answer = h.core.trigger("m0", 1.0)
    assert answer.trigger is TriggerAnswer.STARTED
    assert h.core.phase is RegionPhase.DRAINING
    assert h.core.trigger("m1", 1.01).trigger is TriggerAnswer.DRAIN_COMING  # m1 has not drained yet
    h.core.ack("m0", CommandKind.DRAIN, h.core.cycles.seq, None, True, None, 1.02)
    late = h.core.trigger("m0", 1.03)  # m0 drained already: the running cycle covers what it submitted
    assert late.trigger is TriggerAnswer.NOT_NOW
    assert late.reason == "checkpoint 1 is running and m0 already drained for it"
    h.core.ack("m1", CommandKind.DRAIN, h.core.cycles.seq, None, True, None, 1.04)
    assert h.core.trigger("m1", 1.05).trigger is TriggerAnswer.NOT_NOW  # checkpointing
    h.ack_all(CommandKind.CHECKPOINT, 1.1, seq=h.core.cycles.seq)
    h.core.request_reset("m0", True, "revoked", 2.0)
    resetting = h.core.trigger("m1", 2.1)
    assert resetting.trigger is TriggerAnswer.NOT_NOW
    assert resetting.reason == "the region is RESETTING; trigger again after the next RESUME"
    assert h.core.phase is RegionPhase.RESETTING
    waiting = Harness(min_members=2, mode="operator_driven")
    waiting.core.join("m0", b"a", "i", 0.0)
    assert waiting.core.trigger("m0", 0.1).trigger is TriggerAnswer.NOT_NOW


def test_absent_members_are_bounded_oldest_forgotten():
    absent = AbsentCheckpoints(kept=2)
    assert absent.checkpoint_completed(None, [], ["a", "b", "c"]) == []
    assert absent.checkpoint_completed(1, ["a", "b", "c"], ["b", "c"]) == []  # a away since 1
    assert absent.checkpoint_completed(2, ["b", "c"], ["c"]) == []  # b away since 2
    assert absent.checkpoint_completed(3, ["c"], ["x"]) == [("a", 1)]  # c away since 3: a forgotten
    assert absent.seqs == {"b": 2, "c": 3}
    assert absent.checkpoint_completed(4, ["x"], ["x", "b"]) == []
    assert absent.seqs == {"c": 3}
    with pytest.raises(ValueError, match="absent_checkpoints"):
        AbsentCheckpoints.from_doc({"a": "1"})
