"""What a membership change costs the region (the membership steps of
coordinator/region/membership.py): the decisions alone, without a core."""

from __future__ import annotations

import pytest

from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.replies import RegionPhase
from coordinator.region.cycle import CycleRound
from coordinator.region.membership import (
    JoinStep,
    LeaveStep,
    cooperative_leave_keeps_cycle,
    join_step,
    leave_step,
    start_due,
)


@pytest.mark.parametrize(
    ("phase", "cooperative", "step"),
    [
        (RegionPhase.FAILED, True, JoinStep.NOTHING),
        (RegionPhase.WAITING, True, JoinStep.START),
        (RegionPhase.WAITING, False, JoinStep.START),
        (RegionPhase.DRAINING, True, JoinStep.AFTER_CYCLE),
        (RegionPhase.CHECKPOINTING, True, JoinStep.AFTER_CYCLE),
        (RegionPhase.DRAINING, False, JoinStep.RESET),
        (RegionPhase.RUNNING, True, JoinStep.RESET),
        (RegionPhase.RESETTING, True, JoinStep.RESET),
        (RegionPhase.BACKOFF, True, JoinStep.RESET),
    ],
)
def test_join_step(phase, cooperative, step):
    assert join_step(phase, cooperative) is step


def leave(
    phase: RegionPhase,
    *,
    graceful: bool = True,
    members_left: bool = True,
    cooperative: bool = True,
    cycle: CycleRound | None = None,
    waiting: tuple[str, ...] = (),
) -> LeaveStep:
    return leave_step(
        phase,
        "m1",
        graceful=graceful,
        members_left=members_left,
        all_cooperative=cooperative,
        cycle=cycle or CycleRound(),
        waiting=waiting,
    )


def test_leave_step_by_phase():
    assert leave(RegionPhase.FAILED) is LeaveStep.NOTHING
    assert leave(RegionPhase.FAILED, members_left=False) is LeaveStep.NOTHING
    assert leave(RegionPhase.RUNNING, members_left=False) is LeaveStep.WAIT
    assert leave(RegionPhase.WAITING, members_left=False) is LeaveStep.WAIT
    assert leave(RegionPhase.WAITING) is LeaveStep.NOTHING
    for phase in (RegionPhase.RESETTING, RegionPhase.BACKOFF):
        assert leave(phase, graceful=False) is LeaveStep.ROUND_GOES_ON
        assert leave(phase) is LeaveStep.ROUND_GOES_ON
    assert leave(RegionPhase.RUNNING) is LeaveStep.CYCLE_GOES_ON
    assert leave(RegionPhase.DRAINING) is LeaveStep.CYCLE_GOES_ON
    assert leave(RegionPhase.RUNNING, cooperative=False) is LeaveStep.RESET
    assert leave(RegionPhase.RUNNING, graceful=False) is LeaveStep.RESET  # a silent member: a failure reset


def test_a_cooperative_leave_keeps_a_checkpointing_cycle_only_before_its_answer():
    cycle = CycleRound()
    cycle.start(["m0", "m1"], 0.0, 0.0)
    cycle.checkpoint_started()
    assert leave(RegionPhase.CHECKPOINTING, cycle=cycle, waiting=("m0", "m1")) is LeaveStep.CYCLE_GOES_ON
    cycle.checkpoint_answered("m1", [])
    assert leave(RegionPhase.CHECKPOINTING, cycle=cycle, waiting=("m0",)) is LeaveStep.RESET  # its offsets are in it
    joined = CycleRound()
    joined.start(["m0", "m1"], 0.0, 0.0)
    joined.checkpoint_started()
    assert joined.member_joined("m1", restarted=True)  # its predecessor had not answered: not in the cycle
    assert cooperative_leave_keeps_cycle(RegionPhase.CHECKPOINTING, "m1", joined, ("m0",))


def test_a_waiting_region_starts_when_the_members_are_back_or_the_grace_is_over():
    config = RegionConfig(name="r", min_members=2, join_grace_s=10.0)
    assert not start_due([], [], config, None, 0.0)
    assert not start_due(["m0"], [], config, 0.0, 9.9)
    assert start_due(["m0"], [], config, 0.0, 10.0)  # the grace is over
    assert start_due(["m0", "m1"], [], config, 0.0, 0.0)  # min_members
    assert not start_due(["m0", "m1"], ["m0", "m1", "m2"], config, 0.0, 1.0)  # three were known before a restart
    assert start_due(["m0", "m2", "m1"], ["m0", "m1", "m2"], config, 0.0, 1.0)
    assert start_due(["m0"], ["m0"], RegionConfig(name="r", min_members=3), 0.0, 0.0)  # every known member is back
