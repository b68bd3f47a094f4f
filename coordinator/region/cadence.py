"""When a region's next periodic drain is due: a fixed-rate grid of drain starts
(no I/O, the loop thread only; used by :class:`~coordinator.region.state.RegionCore`).

A checkpoint cycle publishes at its RESUME. Were the next drain due a period
after that RESUME, the interval between two publishes would be the period plus
the checkpoint's own time, which grows with the machine's load (0.5-0.9 s
checkpoints made 1.5-1.9 s intervals at a 1 s period). So drains start on a
grid instead:

1. A periodic drain fills a *slot*: the latest point of the grid ``due + k *
   period`` (k >= 0) at or before its start, ``due`` being when it was due. A
   drain a little late (the loop's tick, a short deferral while the Kafka group
   rebalances) keeps the grid's phase, so the lateness does not add up from
   cycle to cycle; the slots that passed while it waited are skipped, never
   run one after the other afterwards (no catch-up burst).
2. At the RESUME the next drain is due one period after that slot, but never
   sooner than ``MIN_RUN_SHARE`` of the period after the RESUME (the floor):
   members always get a window to process. When the floor decides, the slots
   the checkpoint overran are skipped and the grid starts again at the floor.
3. A drain that did not start from the grid (a reset's RESUME, an
   operator-driven trigger) is not on it: after a reset the next drain is due
   at the reset's pacing delay (``CheckpointPacing.settle_delay``), and the
   grid starts from that drain.

The deferral of a due drain while the group rebalances stays in
``coordinator.region.pacing`` (``CheckpointPacing.cycle_due``); a deferred
drain fills the slot of its start (step 1).
"""

from __future__ import annotations

import math

import attrs

#: The floor of step 2, as a share of the period: at least this long between a
#: RESUME and the next drain. It prevents a starved region: with checkpoints as
#: long as the period, a drain due right at the RESUME would leave the members
#: no time to process, and the next checkpoint would publish next to nothing.
#: A tenth keeps the interval between publishes at the period for checkpoints
#: of up to 0.9 period (the loaded machine's 0.5-0.9 s at 1 s) and beyond that
#: stretches the cycle by only 0.1 period; the members still process at least
#: a tenth of the time when every checkpoint takes a whole period (with the
#: RESUME-based rule they had at least half of it, at twice the interval).
MIN_RUN_SHARE = 0.1


@attrs.frozen
class Slot:
    """The grid slot a periodic drain fills (step 1)."""

    at: float
    #: Slots of the grid that passed before the drain started (skipped).
    skipped: int


@attrs.frozen
class NextDrain:
    """When the next periodic drain is due after a checkpoint's RESUME (step 2)."""

    at: float
    #: True when the floor decided (the checkpoint overran the period).
    floored: bool
    #: Slots of the grid the checkpoint overran (skipped).
    skipped: int


def slot_of(due: float | None, started: float, period_s: float) -> Slot:
    """Step 1: the slot of a drain that starts at ``started`` and was due at ``due``
    (None, or a due time after ``started``: it was not due on the grid, the slot is
    its start)."""
    if due is None or started < due:
        return Slot(started, 0)
    k = math.floor((started - due) / period_s)
    return Slot(due + k * period_s, k)


def next_drain(slot: float, resumed_at: float, period_s: float) -> NextDrain:
    """Step 2: the next drain after a checkpoint whose drain filled ``slot`` and
    whose RESUME went out at ``resumed_at``."""
    on_grid = slot + period_s
    floor = resumed_at + MIN_RUN_SHARE * period_s
    if on_grid >= floor:
        return NextDrain(on_grid, False, 0)
    return NextDrain(floor, True, max(1, math.floor((floor - slot) / period_s)))
