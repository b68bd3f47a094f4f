"""The fixed-rate checkpoint cycle (the cadence of coordinator/region/timing.py), driven
through the region's state machine with a fake clock (no I/O): drains start a
period apart whatever the checkpoints take, members always get the floor after
a RESUME, and slots missed during a stall are skipped, never run in a burst."""

from __future__ import annotations

import itertools
import logging
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.protocol.region.commands import CommandKind
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.kafka_report import KafkaReport
from coordinator.protocol.region.replies import RegionPhase
from coordinator.region.events import CheckpointCompleted, RegionEvent, ResetResumed
from coordinator.region.machine import RegionCore
from coordinator.region.timing import MIN_RUN_SHARE, POST_RESET_PERIOD_SHARE, next_drain, slot_of

PERIOD = 1.0


class Region:
    """A region of two members that answer every command at once, except the
    checkpoint, which they answer after the time the test says."""

    def __init__(self, **cfg) -> None:
        self.events: list[RegionEvent] = []
        config = RegionConfig(name="r", min_members=2, period_s=PERIOD, member_timeout_s=60.0, **cfg)
        self.core = RegionCore(config, lambda m, c: None, lambda d: None, on_event=self.events.append)
        for name in ("m0", "m1"):
            self.core.join(name, name.encode(), "inc1", 0.0)
        self.ack_all(CommandKind.RESET, 0.1, attempt=self.core.resets.attempt)
        assert self.core.phase is RegionPhase.RUNNING
        self.starts: list[float] = []  # drain starts
        self.resumes: list[float] = []  # RESUMEs of completed checkpoints (the publishes)

    def ack_all(self, command: CommandKind, now: float, seq: int | None = None, attempt: int | None = None) -> None:
        for name in sorted(self.core.waiting):
            self.core.ack(name, command, seq, attempt, True, None, now)

    def report(self, now: float, **flags: bool) -> None:
        for name in sorted(self.core.members):
            self.core.members.heartbeat(
                name,
                name.encode(),
                "inc1",
                now,
                KafkaReport(f"k-{name}", 5, cooperative=True, reset_pending=flags.get(name, False)),
            )

    def tick(self, now: float, checkpoint_s: float) -> bool:
        """One loop tick at ``now``; a drain it starts is answered at once and its
        checkpoint ``checkpoint_s`` later. True when it started a drain."""
        self.core.tick(now)
        if self.core.phase is not RegionPhase.DRAINING:
            return False
        seq = self.core.cycles.seq
        self.starts.append(now)
        self.ack_all(CommandKind.DRAIN, now, seq)
        assert self.core.phase is RegionPhase.CHECKPOINTING
        self.ack_all(CommandKind.CHECKPOINT, now + checkpoint_s, seq)
        assert self.core.phase is RegionPhase.RUNNING
        assert self.core.checkpoints.last_consistent == seq
        self.resumes.append(now + checkpoint_s)
        return True

    def cycles(self, checkpoint_s: list[float], late_s: float = 0.0) -> None:
        """One cycle per entry, each drain ticked ``late_s`` after it is due."""
        for took in checkpoint_s:
            due = self.core.cycles.next_at
            assert due is not None
            assert self.tick(due + late_s, took)

    def ticks(self, start: float, end: float, every: float, checkpoint_s: float) -> None:
        """Ticks every ``every`` seconds from ``start`` to ``end`` (the loop's fine ticks)."""
        steps = round((end - start) / every)
        for i in range(steps + 1):
            self.tick(start + i * every, checkpoint_s)


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


@pytest.mark.parametrize("took", [0.1, 0.3, 0.5, 0.7, 0.9])
def test_publishes_stay_a_period_apart_whatever_the_checkpoint_takes(took):
    """A period after the previous RESUME, the interval was the period plus the
    checkpoint (1.1-1.9 s here); on the grid it is the period."""
    r = Region()
    r.cycles([took] * 8)
    assert gaps(r.starts) == pytest.approx([PERIOD] * 7)
    assert gaps(r.resumes) == pytest.approx([PERIOD] * 7)


def test_drains_stay_on_the_grid_when_checkpoint_times_vary():
    r = Region()
    rng = random.Random(7)
    took = [rng.uniform(0.1, 0.9) for _ in range(30)]
    r.cycles(took)
    assert gaps(r.starts) == pytest.approx([PERIOD] * 29)
    # a publish interval is the period plus the change in checkpoint time, not plus the checkpoint time
    assert gaps(r.resumes) == pytest.approx([PERIOD + b - a for a, b in itertools.pairwise(took)])


def test_a_late_tick_does_not_add_up():
    """The loop ticks at most every 0.1 s: a drain started late keeps its slot."""
    r = Region()
    r.cycles([0.3] * 10, late_s=0.08)
    assert gaps(r.starts) == pytest.approx([PERIOD] * 9)
    assert r.starts[-1] == pytest.approx(r.starts[0] + 9 * PERIOD)


def test_a_checkpoint_longer_than_the_period_leaves_the_members_the_floor():
    r = Region()
    r.cycles([0.2, 0.95, 0.95, 0.2])
    floor = MIN_RUN_SHARE * PERIOD
    # after each 0.95 s checkpoint the next drain waits the floor, not the grid slot 0.05 s away
    assert [s - e for s, e in zip(r.starts[1:], r.resumes, strict=False)] == pytest.approx([0.8, floor, floor])
    assert gaps(r.resumes) == pytest.approx([1.75, 0.95 + floor, 0.2 + floor])


def test_slots_missed_in_a_three_period_stall_are_skipped_not_queued(caplog):
    """A checkpoint that takes 3.05 periods: one drain a floor after its RESUME,
    then one per period again; the three slots it overran never run."""
    r = Region()
    r.cycles([0.1, 0.1])
    with caplog.at_level(logging.INFO, logger="coordinator.region.cycle"):
        r.cycles([3.05 * PERIOD])
    assert "3 slot(s) of the grid skipped" in caplog.text
    stalled_resume = r.resumes[-1]
    r.ticks(stalled_resume, stalled_resume + 4 * PERIOD, 0.01, checkpoint_s=0.1)
    after = [s for s in r.starts if s > stalled_resume]
    assert after[0] == pytest.approx(stalled_resume + MIN_RUN_SHARE * PERIOD, abs=0.011)
    assert gaps(after) == pytest.approx([PERIOD] * (len(after) - 1), abs=0.011)
    assert len(after) == 4


def test_a_drain_deferred_three_periods_by_a_rebalance_skips_the_slots_it_missed(caplog):
    r = Region()
    r.cycles([0.1])
    r.report(0.5, m0=True)  # m0's reset is pending: due drains wait (timing.py, the pacing)
    due = r.core.cycles.next_at
    assert due is not None
    r.ticks(due, due + 3.0, 0.01, checkpoint_s=0.1)
    assert len(r.starts) == 1
    r.report(due + 3.04)
    with caplog.at_level(logging.INFO, logger="coordinator.region.cycle"):
        r.ticks(due + 3.05, due + 6.05, 0.01, checkpoint_s=0.1)
    assert "3 slot(s) of the grid skipped" in caplog.text
    after = r.starts[1:]
    # the deferred drain fills the slot due + 3; the grid goes on from there, one drain per slot
    assert after == pytest.approx([due + 3.05, due + 4.0, due + 5.0, due + 6.0], abs=0.011)


def test_after_a_reset_the_pacing_decides_then_the_grid_starts_from_that_drain():
    r = Region()
    r.report(0.2)  # cooperative members: the first drain after a reset comes the floor after it
    r.cycles([0.1])
    r.core.request_reset("m0", True, "revoked after fetching", 1.5)
    r.ack_all(CommandKind.RESET, 1.6, attempt=r.core.resets.attempt)
    assert r.core.cycles.next_at == pytest.approx(1.6 + POST_RESET_PERIOD_SHARE * PERIOD)
    r.cycles([0.6, 0.6, 0.6])
    first = 1.6 + POST_RESET_PERIOD_SHARE * PERIOD
    assert r.starts[1:] == pytest.approx([first, first + PERIOD, first + 2 * PERIOD])
    resume = [e for e in r.events if isinstance(e, ResetResumed)][-1]
    assert resume.next_drain_in_s == pytest.approx(POST_RESET_PERIOD_SHARE * PERIOD)
    checkpoint = [e for e in r.events if isinstance(e, CheckpointCompleted)][-1]
    assert checkpoint.next_drain_in_s == pytest.approx(PERIOD - 0.6)


def test_an_operator_driven_trigger_is_its_own_slot():
    assert slot_of(None, 5.3, PERIOD).at == 5.3
    assert slot_of(6.0, 5.3, PERIOD).at == 5.3  # not due yet (a trigger in periodic mode)


@given(due=st.floats(0, 1e6), late=st.floats(0, 1e3), period=st.floats(0.01, 100))
def test_a_slot_is_the_latest_grid_point_at_or_before_the_start(due, late, period):
    slot = slot_of(due, due + late, period)
    assert slot.at <= due + late + 1e-6 * period + 1e-9 * due
    assert due + late < slot.at + period * (1 + 1e-6) + 1e-9 * due
    assert slot.skipped == round((slot.at - due) / period)


@given(slot=st.floats(0, 1e6), took=st.floats(0, 1e3), period=st.floats(0.01, 100))
def test_the_next_drain_is_a_period_after_the_slot_and_never_within_the_floor(slot, took, period):
    resumed = slot + took
    upcoming = next_drain(slot, resumed, period)
    assert upcoming.at >= resumed + MIN_RUN_SHARE * period - 1e-9 * max(1.0, resumed)
    assert upcoming.at == max(slot + period, resumed + MIN_RUN_SHARE * period)
    assert upcoming.floored == (slot + period < resumed + MIN_RUN_SHARE * period)
    assert upcoming.skipped >= (1 if upcoming.floored else 0)
