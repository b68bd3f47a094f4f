"""The backoff between consecutive failure resets (the backoff of coordinator/region/timing.py),
on the region state machine with a fake clock (no I/O)."""

from __future__ import annotations

import re

import pytest

from coordinator.cli.status import build_document, format_document
from coordinator.protocol.region.commands import CommandKind
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.messages import check_region_config
from coordinator.protocol.region.replies import RegionPhase, TriggerAnswer
from coordinator.protocol.wire.errors import Invalid
from coordinator.protocol.wire.status import CoordinatorStatus
from coordinator.region.events import BackoffHeld, RegionEvent, ResetResumed
from coordinator.region.machine import RegionCore
from coordinator.region.timing import failure_backoff_s


class Harness:
    def __init__(self, doc: dict | None = None, **cfg) -> None:
        self.sent: list[tuple[str, dict]] = []
        self.docs: list[dict] = []
        self.events: list[RegionEvent] = []
        cfg.setdefault("member_timeout_s", 60.0)
        self.core = RegionCore(
            RegionConfig(name="r", **cfg),
            lambda m, c: self.sent.append((m, c.to_body())),
            self.docs.append,
            doc,
            on_event=self.events.append,
        )

    def take(self) -> list[tuple[str, str]]:
        out, self.sent = self.sent, []
        return [(m, b["cmd"]) for m, b in out]

    def join(self, name: str, now: float, incarnation: str = "inc1") -> None:
        self.core.join(name, name.encode(), incarnation, now)

    def answer_reset(self, now: float) -> None:
        assert self.core.phase is RegionPhase.RESETTING
        for name in sorted(self.core.waiting):
            self.core.ack(
                name,
                CommandKind.RESET,
                self.core.checkpoints.last_consistent,
                self.core.resets.attempt,
                True,
                None,
                now,
            )

    def fail(self, now: float, name: str = "m0") -> None:
        """A failure (a pipeline error) and every member's answer to its reset round
        (none when it failed the region)."""
        self.core.request_reset(name, False, "sink down", now)
        if self.core.phase is not RegionPhase.FAILED:
            self.answer_reset(now + 0.01)


def started(n: int = 2, **cfg) -> Harness:
    h = Harness(min_members=n, **cfg)
    for i in range(n):
        h.join(f"m{i}", 0.0)
    h.answer_reset(0.1)
    assert h.core.phase is RegionPhase.RUNNING
    h.take()
    return h


def resumes(sent: list[tuple[str, str]]) -> list[str]:
    return [m for m, cmd in sent if cmd == "resume"]


def test_schedule_doubles_from_the_second_failure_up_to_the_max():
    config = RegionConfig(name="r")
    assert [failure_backoff_s(k, config) for k in range(1, 10)] == [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert failure_backoff_s(10**6, config) == 30.0  # a bounded exponent: no overflow
    assert failure_backoff_s(3, RegionConfig(name="r", reset_backoff_s=2.0, reset_backoff_max_s=3.0)) == 3.0


def test_config_fields_are_optional_and_validated():
    assert check_region_config({}) == {}
    assert check_region_config({"reset_backoff_s": 0.25, "reset_backoff_max_s": 10}) == {
        "reset_backoff_s": 0.25,
        "reset_backoff_max_s": 10.0,
    }
    for bad in (0, -1, float("nan"), 1e9, "1", True):
        with pytest.raises(Invalid):
            check_region_config({"reset_backoff_s": bad})
    with pytest.raises(ValueError, match=r"reset_backoff_max_s must be a finite number in \[0.001, 86400.0\], got 0"):
        RegionConfig(name="r", reset_backoff_max_s=0)


def test_first_failure_forced_and_membership_resets_resume_at_once():
    h = started(2)
    h.fail(1.0)
    assert h.core.phase is RegionPhase.RUNNING
    assert h.core.resets.consecutive == 1
    assert resumes(h.take()) == ["m0", "m1"]
    h.core.request_reset("m0", True, "revoked", 2.0)  # forced: clears the count
    h.answer_reset(2.01)
    assert h.core.phase is RegionPhase.RUNNING
    assert resumes(h.take()) == ["m0", "m1"]
    h.fail(3.0)
    h.take()
    h.join("m2", 3.5)  # a membership reset with one failure counted
    h.answer_reset(3.51)
    assert h.core.phase is RegionPhase.RUNNING
    assert resumes(h.take()) == ["m0", "m1", "m2"]


def test_second_failure_holds_the_resume_until_its_due_time():
    h = started(2)
    h.fail(1.0)
    h.take()
    h.fail(2.0)  # the second in a row: RESUME at 2.5
    assert h.core.phase is RegionPhase.BACKOFF
    assert h.core.resets.consecutive == 2
    assert h.take() == [("m0", "reset_to_initial"), ("m1", "reset_to_initial")]  # the round ran at once
    assert h.core.wake_at == 2.5
    assert h.docs[-1]["backoff_s"] == 0.5
    status = h.core.status(2.2)
    assert status.phase == "BACKOFF"
    assert status.reset.backoff_s == 0.5
    assert status.reset.backoff_left_s == 0.3
    assert h.core.trigger("m0", 2.2).trigger is TriggerAnswer.NOT_NOW
    h.core.tick(2.49)
    assert h.core.phase is RegionPhase.BACKOFF
    assert h.take() == []
    h.core.tick(2.5)
    assert h.core.phase is RegionPhase.RUNNING
    assert resumes(h.take()) == ["m0", "m1"]
    assert h.docs[-1]["backoff_s"] is None  # the end of the hold is durable
    assert h.core.status(2.6).reset.backoff_left_s is None
    resume = [e for e in h.events if isinstance(e, ResetResumed)][-1]
    assert resume.held_s == 0.5
    assert [e.backoff_s for e in h.events if isinstance(e, BackoffHeld)] == [0.5]


def test_a_persistent_failure_fails_after_the_holds_and_a_five_second_one_survives():
    """Defaults: the holds are 0 + 0.5 + 1 + 2 + 4 s; the sixth failure in a row fails the region."""
    h = started(1)
    now, first = 1.0, 1.0
    while True:
        h.fail(now)
        if h.core.phase is RegionPhase.FAILED:
            break
        now = (h.core.wake_at or now) if h.core.phase is RegionPhase.BACKOFF else now + 0.01
        h.core.tick(now)  # the RESUME; the member fails again at once
    assert now - first == pytest.approx(7.5, abs=0.1)
    assert "5 consecutive resets" in (h.core.failed_reason or "")

    h = started(1, period_s=1.0)
    now = 1.0
    while now < 6.0:  # the sink is down for 5 s: the member fails at every RESUME
        h.fail(now)
        now = (h.core.wake_at or now) if h.core.phase is RegionPhase.BACKOFF else now + 0.01
        h.core.tick(now)
    assert h.core.phase is RegionPhase.RUNNING
    assert h.core.resets.consecutive == 5
    h.core.tick(now + 1.0)  # the sink is back: a checkpoint that moves an offset
    h.core.ack("m0", CommandKind.DRAIN, h.core.cycles.seq, None, True, None, now + 1.01)
    h.core.ack("m0", CommandKind.CHECKPOINT, h.core.cycles.seq, None, True, None, now + 1.02, [["t", 0, 0, 7]])
    assert h.core.phase is RegionPhase.RUNNING
    assert h.core.resets.consecutive == 0


def test_a_join_during_the_hold_restarts_the_round_and_keeps_the_due_time():
    h = started(2)
    h.fail(1.0)
    h.fail(2.0)
    h.take()
    h.join("m2", 2.2)
    assert h.core.phase is RegionPhase.RESETTING
    assert sorted(h.core.waiting) == ["m0", "m1", "m2"]
    assert {cmd for _, cmd in h.take()} == {"reset_to_initial"}
    h.answer_reset(2.3)
    assert h.core.phase is RegionPhase.BACKOFF
    assert h.core.wake_at == 2.5
    h.core.tick(2.5)
    assert h.core.phase is RegionPhase.RUNNING
    assert resumes(h.take()) == ["m0", "m1", "m2"]


def test_a_forced_reset_during_the_hold_clears_the_count_and_ends_the_hold():
    h = started(2)
    h.fail(1.0)
    h.fail(2.0)
    h.take()
    h.core.request_reset("m1", True, "revoked", 2.1)
    assert h.core.phase is RegionPhase.RESETTING
    assert h.core.resets.consecutive == 0
    h.answer_reset(2.2)
    assert h.core.phase is RegionPhase.RUNNING
    assert resumes(h.take()) == ["m0", "m1"]
    assert h.core.status(2.2).reset.backoff_s is None


def test_a_failure_during_the_hold_is_the_next_one_with_a_longer_hold():
    h = started(2)
    h.fail(1.0)
    h.fail(2.0)
    h.fail(2.2)  # a request during the hold (every member answered): a new round
    assert h.core.phase is RegionPhase.BACKOFF
    assert h.core.resets.consecutive == 3
    assert h.core.wake_at == pytest.approx(3.2)


def test_leave_and_silence_during_the_hold_drop_the_member_and_the_hold_goes_on():
    h = started(3, member_timeout_s=2.0)
    h.fail(1.0)
    h.fail(2.0)
    h.take()
    h.core.leave("m2", 2.1)
    assert h.core.phase is RegionPhase.BACKOFF
    assert "m2" not in h.core.members
    h.core.members.heartbeat("m0", b"m0", "inc1", 2.2)
    h.core.tick(2.3)  # m1 silent since 2.01 (its reset answer): not yet
    h.core.tick(2.49)
    assert h.core.phase is RegionPhase.BACKOFF
    h.core.members.heartbeat("m0", b"m0", "inc1", 4.0)
    h.core.tick(4.1)  # m1 silent for 2.09 s: dropped; the hold is long over
    assert "m1" not in h.core.members
    assert h.core.phase is RegionPhase.RUNNING
    assert resumes(h.take()) == ["m0"]


def test_everybody_leaving_during_the_hold_waits_and_the_hold_survives_the_rejoin():
    h = started(1)
    h.fail(1.0)
    h.fail(2.0)
    h.core.leave("m0", 2.1)
    assert h.core.phase is RegionPhase.WAITING
    h.join("m0", 2.2, "inc2")
    h.answer_reset(2.3)
    assert h.core.phase is RegionPhase.BACKOFF
    assert h.core.wake_at == 2.5


def test_a_coordinator_restarted_during_the_hold_holds_the_first_round_again():
    h = started(2)
    h.fail(1.0)
    h.fail(2.0)
    doc = h.docs[-1]
    assert doc["backoff_s"] == 0.5
    assert doc["consecutive_resets"] == 2
    h2 = Harness(doc, min_members=2)
    assert h2.core.phase is RegionPhase.WAITING
    assert h2.core.status(50.0).reset.backoff_s == 0.5
    h2.join("m0", 50.0, "inc2")
    h2.join("m1", 50.1, "inc2")
    h2.answer_reset(50.2)
    assert h2.core.phase is RegionPhase.BACKOFF
    assert h2.core.wake_at == pytest.approx(50.6)  # from the round's start
    h2.take()
    h2.core.tick(50.59)
    assert h2.take() == []
    h2.core.tick(50.6)
    assert h2.core.phase is RegionPhase.RUNNING
    assert resumes(h2.take()) == ["m0", "m1"]
    assert h2.docs[-1]["backoff_s"] is None
    h3 = Harness(h2.docs[-1], min_members=2)  # after the hold: no hold at the next restart
    h3.join("m0", 90.0, "inc3")
    h3.join("m1", 90.0, "inc3")
    h3.answer_reset(90.1)
    assert h3.core.phase is RegionPhase.RUNNING


def test_a_document_without_the_backoff_field_or_with_a_bad_one_is_refused():
    h = started(1)
    doc = h.docs[-1]
    assert doc["backoff_s"] is None
    assert Harness(doc).core.status(0.0).reset.backoff_s is None
    with pytest.raises(ValueError, match=r"lacks the fields \['backoff_s'\]"):
        Harness({k: v for k, v in doc.items() if k != "backoff_s"})
    with pytest.raises(ValueError, match=r"stored backoff_s -1 is not a number of seconds in \(0, "):
        Harness({**doc, "backoff_s": -1})


def test_crkafka_status_shows_the_hold():
    h = started(1)
    h.fail(1.0)
    h.fail(2.0)
    snap = CoordinatorStatus(
        endpoint="tcp://x",
        loaded=True,
        uptime_s=0.0,
        store=None,
        load=None,
        limits={},
        regions={"r": h.core.status(2.2)},
    )
    doc = build_document(snap, [], coordinator="tcp://x", bootstrap=None, errors=[])
    assert doc["regions"]["r"]["backoff_left_s"] == 0.3
    assert doc["regions"]["r"]["failure_streak"] == 2
    assert "BACKOFF (0.3s)" in format_document(doc)


# --------------------------------------------------------------------------- the failure streak
# A record that fails every time on one partition while the other partitions
# move: every checkpoint between two failures is progress (the consecutive count
# goes 1, 1, 1, ...), but the failures keep coming less than failure_memory_s
# apart, so the streak grows and the holds with it.


def poison_round(h: Harness, now: float, moved_to: int) -> tuple[float, float | None]:
    """m0 fails on its record t/0@5; every member resets (and waits out the hold);
    then a periodic checkpoint in which m1's partition t/1 moved to ``moved_to``
    and t/0 did not. Returns the time after the checkpoint and the hold (None: none)."""
    h.core.request_reset("m0", False, "sink raises on record t/0@5", now)
    if h.core.phase is RegionPhase.FAILED:
        return now, None
    h.answer_reset(now + 0.01)
    hold = None
    if h.core.phase is RegionPhase.BACKOFF:
        hold = h.core.status(now + 0.01).reset.backoff_s
        assert h.core.wake_at == pytest.approx(now + hold)
        now = h.core.wake_at or now
        h.core.tick(now)
    assert h.core.phase is RegionPhase.RUNNING
    for _ in range(50):  # the first periodic drain after the RESUME
        now += 0.1
        h.core.tick(now)
        if h.core.phase is RegionPhase.DRAINING:
            break
    seq = h.core.cycles.seq
    for name in ("m0", "m1"):
        h.core.ack(name, CommandKind.DRAIN, seq, None, True, None, now + 0.01)
    before = {(t, p): o for t, p, o in h.core.checkpoints.offsets}
    claims = {"m0": [["t", 0, before.get(("t", 0), 0), 5]], "m1": [["t", 1, before.get(("t", 1), 0), moved_to]]}
    for name in ("m0", "m1"):
        h.core.ack(name, CommandKind.CHECKPOINT, seq, None, True, None, now + 0.02, claims[name])
    assert h.core.phase is RegionPhase.RUNNING
    assert h.core.checkpoints.last_consistent == seq
    h.take()
    return now + 0.1, hold


def poisoned(**cfg) -> tuple[Harness, float]:
    """Two members, a first checkpoint (t/0 at 5, t/1 at 10), no failure yet."""
    h = started(2, **cfg)
    now = 1.2  # the first drain: one period after the RESUME at 0.1
    h.core.tick(now)
    for name in ("m0", "m1"):
        h.core.ack(name, CommandKind.DRAIN, h.core.cycles.seq, None, True, None, now + 0.01)
    h.core.ack("m0", CommandKind.CHECKPOINT, h.core.cycles.seq, None, True, None, now + 0.02, [["t", 0, 0, 5]])
    h.core.ack("m1", CommandKind.CHECKPOINT, h.core.cycles.seq, None, True, None, now + 0.02, [["t", 1, 0, 10]])
    assert h.core.phase is RegionPhase.RUNNING
    assert h.core.checkpoints.offsets == [["t", 0, 5], ["t", 1, 10]]
    h.take()
    return h, now + 0.1


def test_a_poison_record_on_one_partition_backs_off_up_to_the_max_and_never_fails():
    h, now = poisoned()
    holds = []
    for i in range(10):
        now, hold = poison_round(h, now, 20 + 10 * i)
        holds.append(hold)
        assert h.core.phase is RegionPhase.RUNNING, h.core.failed_reason
        assert h.core.resets.consecutive == 0  # every checkpoint moved t/1: progress
        assert h.core.resets.streak == i + 1
    assert holds == [None, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    status = h.core.status(now)
    assert status.reset.failure_streak == 10
    assert status.reset.consecutive_resets == 0
    assert h.docs[-1]["failure_streak"] == 10
    assert [e.backoff_s for e in h.events if isinstance(e, BackoffHeld)] == holds[1:]


def test_a_poison_record_on_one_partition_settles_at_one_reset_per_max_hold():
    """Ten minutes of the same failure after every checkpoint: 0 + 0.5 + ... + 16 s of
    holds, then one reset per 30 s (a reset per period, ~500, without the streak)."""
    h, now = poisoned()
    failures = 0
    while now < 600.0:
        now, _ = poison_round(h, now, 20 + 10 * failures)
        failures += 1
    assert h.core.phase is RegionPhase.RUNNING
    assert h.core.resets.consecutive == 0
    assert 20 <= failures <= 26
    assert h.core.resets.rounds == failures + 1  # + the start
    assert h.core.resets.streak == failures


def test_a_persistent_failure_is_held_by_its_consecutive_count_and_fails_after_the_fifth_hold():
    """The sink is down: no checkpoint between the failures; the streak and the
    consecutive count are the same, and the region fails after the fifth hold."""
    h = started(1)
    now = 1.0
    while True:
        h.fail(now)
        if h.core.phase is RegionPhase.FAILED:
            break
        assert h.core.resets.streak == h.core.resets.consecutive
        now = (h.core.wake_at or now) if h.core.phase is RegionPhase.BACKOFF else now + 0.01
        h.core.tick(now)
    assert [e.backoff_s for e in h.events if isinstance(e, BackoffHeld)] == [0.5, 1.0, 2.0, 4.0]
    assert "5 consecutive resets" in (h.core.failed_reason or "")


def test_failures_failure_memory_apart_restart_the_streak_without_a_hold():
    h, now = poisoned(failure_memory_s=10.0)
    for i in range(3):
        now, _ = poison_round(h, now, 20 + 10 * i)
    assert h.core.resets.streak == 3
    last_failure = now
    while now < last_failure + 11.0:  # quiet checkpoints, t/1 still moving
        h.core.tick(now)
        if h.core.phase is RegionPhase.DRAINING:
            for name in ("m0", "m1"):
                h.core.ack(name, CommandKind.DRAIN, h.core.cycles.seq, None, True, None, now)
            offsets = {(t, p): o for t, p, o in h.core.checkpoints.offsets}
            h.core.ack("m0", CommandKind.CHECKPOINT, h.core.cycles.seq, None, True, None, now, [["t", 0, 5, 5]])
            h.core.ack(
                "m1",
                CommandKind.CHECKPOINT,
                h.core.cycles.seq,
                None,
                True,
                None,
                now,
                [["t", 1, offsets[("t", 1)], offsets[("t", 1)] + 1]],
            )
        now += 0.25
    assert h.core.resets.streak == 0  # a checkpoint failure_memory_s after the last failure ends it
    now, hold = poison_round(h, now, 500)
    assert hold is None
    assert h.core.resets.streak == 1


def test_a_failure_failure_memory_after_the_last_restarts_the_streak_even_without_a_checkpoint():
    h = started(1, mode="operator_driven", failure_memory_s=10.0)
    h.fail(1.0)
    h.fail(2.0)
    h.core.tick(2.5)
    assert h.core.phase is RegionPhase.RUNNING
    assert h.core.resets.streak == 2
    h.fail(12.5)  # 10.5 s after the last failure: a new streak, no hold
    assert h.core.phase is RegionPhase.RUNNING
    assert h.core.resets.streak == 1


def test_a_forced_reset_ends_the_streak():
    h, now = poisoned()
    for i in range(3):
        now, _ = poison_round(h, now, 20 + 10 * i)
    assert h.core.resets.streak == 3
    h.core.request_reset("m1", True, "revoked", now)
    assert h.core.resets.streak == 0
    h.answer_reset(now + 0.01)
    assert h.core.phase is RegionPhase.RUNNING
    h.fail(now + 1.0)
    assert h.core.phase is RegionPhase.RUNNING
    assert h.core.resets.streak == 1  # no hold


def test_a_membership_reset_keeps_the_streak():
    h, now = poisoned()
    for i in range(3):
        now, _ = poison_round(h, now, 20 + 10 * i)
    h.join("m2", now)
    h.answer_reset(now + 0.01)
    assert h.core.phase is RegionPhase.RUNNING
    assert h.core.resets.streak == 3
    h.fail(now + 1.0)
    assert h.core.phase is RegionPhase.BACKOFF
    assert h.core.resets.streak == 4
    assert h.core.status(now + 1.0).reset.backoff_s == 2.0


def test_a_coordinator_restart_keeps_the_streak_and_never_shortens_the_hold():
    h, now = poisoned()
    for i in range(4):
        now, _ = poison_round(h, now, 20 + 10 * i)
    doc = h.docs[-1]
    assert doc["failure_streak"] == 4
    assert doc["consecutive_resets"] == 0
    assert doc["backoff_s"] is None
    h2 = Harness(doc, min_members=2)
    assert h2.core.resets.streak == 4
    assert h2.core.status(100.0).reset.failure_streak == 4
    h2.join("m0", 100.0, "inc2")
    h2.join("m1", 100.0, "inc2")
    h2.answer_reset(100.1)  # the membership reset: no hold
    assert h2.core.phase is RegionPhase.RUNNING
    h2.fail(101.0)  # the clock is not durable: the first failure after the restart continues the streak
    assert h2.core.phase is RegionPhase.BACKOFF
    assert h2.core.resets.streak == 5
    assert h2.core.wake_at == pytest.approx(105.0)  # 4 s: the fifth failure of the streak


def test_a_document_without_the_streak_or_with_a_bad_one_is_refused():
    h = started(1)
    h.fail(1.0)
    h.fail(2.0)
    doc = h.docs[-1]
    h2 = Harness(doc)
    assert h2.core.resets.streak == 2
    assert h2.core.status(3.0).reset.failure_streak == 2
    with pytest.raises(ValueError, match=r"lacks the fields \['failure_streak'\]"):
        Harness({k: v for k, v in doc.items() if k != "failure_streak"})
    for bad in (-1, True, "3", 1.5, 10**12):
        with pytest.raises(ValueError, match=rf"stored failure_streak {re.escape(repr(bad))} is not a count in \["):
            Harness({**doc, "failure_streak": bad})
