"""The checkpoint cycle's drive (coordinator/region/cycle.py), tested directly:
its decisions (what to send to whom, until when, what completed) on a fake
clock, without a core, sockets or a store."""

from __future__ import annotations

import pytest

from coordinator.protocol.common.transitions import IllegalTransition
from coordinator.protocol.region.commands import Checkpoint, Drain, Resume, Retire
from coordinator.protocol.region.config import RegionConfig
from coordinator.region.checkpoints import ConsistentCheckpoints
from coordinator.region.cycle import ContinuityFailed, CycleComplete, CycleDrive
from coordinator.region.timing import CheckpointPacing

MEMBERS = ("m0", "m1")


def _drive(period_s: float = 1.0) -> tuple[CycleDrive, ConsistentCheckpoints]:
    config = RegionConfig(name="r", period_s=period_s, drain_timeout_s=5.0)
    checkpoints = ConsistentCheckpoints()
    return CycleDrive(config, CheckpointPacing(config, {}), checkpoints), checkpoints


def _checkpointed(drive: CycleDrive, answers: dict[str, list], now: float) -> CycleComplete | ContinuityFailed:
    drive.drained(now)
    for name, offsets in answers.items():
        drive.round.checkpoint_answered(name, offsets)
    return drive.checkpointed(MEMBERS, now)


def test_a_cycle_drains_checkpoints_and_completes_with_resume_and_retire():
    drive, checkpoints = _drive()
    drive.restore(next_seq=7)  # the durable next seq: never reused
    start = drive.start("period", ["m1", "m0"], now=10.0, due=10.0)
    assert (start.seq, start.why, start.deadline) == (7, "checkpoint 7 (period)", 15.0)
    assert start.commands == (("m0", Drain(7)), ("m1", Drain(7)))
    assert drive.next_seq == 8
    step = drive.drained(now=10.1)
    assert step.commands == (("m0", Checkpoint(7)), ("m1", Checkpoint(7)))
    assert step.deadline == pytest.approx(15.1)
    assert step.why == "all members drained 7"
    drive.round.checkpoint_answered("m0", [["t", 0, 0, 5]])
    drive.round.checkpoint_answered("m1", [["t", 1, 0, 3]])
    done = drive.checkpointed(MEMBERS, now=10.25)
    assert isinstance(done, CycleComplete)
    assert done.seq == 7
    assert done.advanced
    assert done.joiners == ()
    assert done.took_ms == pytest.approx(250)
    offsets = [["t", 0, 5], ["t", 1, 3]]
    assert checkpoints.last_consistent == 7
    assert checkpoints.offsets == offsets
    assert checkpoints.members == ["m0", "m1"]
    assert done.commands == (("m0", Resume(7, offsets)), ("m1", Resume(7, offsets)))  # no previous: no RETIRE
    # the fixed-rate grid: one period after the drain's slot
    assert drive.next_at == pytest.approx(11.0)
    assert done.next_drain_in_s == pytest.approx(0.75)
    assert drive.completed == 1
    assert drive.failures == 0
    drive.start("period", MEMBERS, now=11.0, due=11.0)
    again = _checkpointed(drive, {"m0": [["t", 0, 5, 9]], "m1": [["t", 1, 3, 3]]}, now=11.1)
    assert isinstance(again, CycleComplete)
    assert again.seq == 8
    assert [c for _, c in again.commands if isinstance(c, Retire)] == [Retire(7), Retire(7)]


def test_a_continuity_violation_completes_nothing():
    drive, checkpoints = _drive()
    drive.start("trigger from m0", MEMBERS, now=0.0)
    failed = _checkpointed(drive, {"m0": [["t", 0, 0, 5]], "m1": [["t", 0, 0, 4]]}, now=0.5)
    assert isinstance(failed, ContinuityFailed)
    assert failed.seq == 1
    assert failed.violations == 1
    assert len(failed.shown) == 1
    assert failed.why.startswith("checkpoint 1 fails the continuity check")
    assert checkpoints.last_consistent is None
    assert drive.completed == 0
    assert drive.failures == 1
    assert drive.next_at is None  # nothing scheduled: the failure reset's RESUME schedules the next drain


def test_joiners_during_a_cycle_are_told_nothing_and_handed_to_the_reset():
    drive, checkpoints = _drive()
    drive.start("period", MEMBERS, now=0.0, due=0.0)
    drive.drained(now=0.1)
    drive.round.checkpoint_answered("m0", [["t", 0, 0, 5]])
    assert drive.round.member_joined("m1", restarted=True)  # its predecessor had not answered: no longer awaited
    done = drive.checkpointed(MEMBERS, now=0.2)
    assert isinstance(done, CycleComplete)
    assert done.joiners == ("m1",)
    assert [name for name, _ in done.commands] == ["m0"]
    assert checkpoints.members == ["m0"]  # the restarted member is absent from the checkpoint
    assert drive.round.take_joiners() == []  # handed over once


def test_a_periodic_drain_is_due_on_the_grid_and_after_a_reset_when_scheduled():
    drive, _ = _drive(period_s=2.0)
    assert not drive.due(100.0)  # nothing scheduled before the first RESUME
    drive.schedule(5.0)
    assert not drive.due(4.9)
    assert drive.due(5.0)
    start = drive.start("period", MEMBERS, now=9.5, due=5.0)  # two slots of the grid late
    done = _checkpointed(drive, {"m0": [], "m1": []}, now=9.6)
    assert isinstance(done, CycleComplete)
    assert start.seq == 1
    assert drive.next_at == pytest.approx(11.0)  # one period after the slot it took (9.0), not after 9.5


def test_answers_without_a_cycle():
    drive, _ = _drive()
    with pytest.raises(IllegalTransition, match="drain acks without a cycle"):
        drive.drained(now=0.0)
