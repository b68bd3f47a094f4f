"""What a membership change costs the region: the decision, without I/O (used by
:class:`~coordinator.region.state.RegionCore`, the loop thread only).

Who may join under a name is ``coordinator/region/admission.py``; the member
table is ``coordinator/region/members.py``; the running cycle's bookkeeping is
``coordinator/region/cycle.py``. This module decides, from the region's phase
and those parts, what follows a change; the core applies the step (the
transition, the reset, the cycle's bookkeeping, persistence and sends):

1. A member admitted as new or restarted (`join_step`):
   a. the region is FAILED: nothing follows (the join reply says FAILED);
   b. WAITING: the start (`start_due`), once as many members as expected
      (``min_members``, or the members known before a coordinator restart) or
      every member known before the restart are back, or ``join_grace_s``
      after the first join (one member that never comes back cannot stall
      the region);
   c. DRAINING or CHECKPOINTING and every reporting member is cooperative: the
      cycle goes on and completes without the joiner, then the region resets
      for it (docs/region.md, cooperative step 10);
   d. otherwise a membership reset at once (``rejoin``: the others' consumers
      rejoin the Kafka group now, not at their next Kafka heartbeat).
2. A member removed from the table (`leave_step`; graceful: it said so, else it
   fell silent or was dropped):
   a. the region is FAILED: nothing follows;
   b. nobody is left: WAITING for joins;
   c. RESETTING or BACKOFF: the round (or the hold, backoff.py step 3d) goes on
      without it; its partitions move to the others by a Kafka rebalance, which
      asks for its own (forced) reset;
   d. a graceful leave, every reporting member cooperative, and the leaver has
      not answered a checkpoint of the cycle in flight (`cooperative_leave_keeps_cycle`):
      no reset, a cycle in flight goes on without it (docs/region.md,
      cooperative step 9);
   e. WAITING: nothing (the region waits for joins);
   f. otherwise a reset: a membership one (``rejoin``) for a graceful leave, a
      failure for a silent member.
"""

from __future__ import annotations

import enum
from collections.abc import Collection

from coordinator.protocol.region.config import RegionConfig
from coordinator.region.cycle import CycleRound
from coordinator.region.model import Phase


class JoinStep(enum.Enum):
    """Step 1: what follows a new or restarted member's join."""

    NOTHING = "nothing"  # 1a: FAILED
    START = "start"  # 1b: WAITING: start once the expected members are back
    AFTER_CYCLE = "after_cycle"  # 1c: the cycle goes on without it; its reset follows
    RESET = "reset"  # 1d: a membership reset now


class LeaveStep(enum.Enum):
    """Step 2: what follows a member's removal."""

    NOTHING = "nothing"  # 2a, 2e: FAILED, or WAITING with members left
    WAIT = "wait"  # 2b: nobody left
    ROUND_GOES_ON = "round_goes_on"  # 2c: the reset round (or hold) goes on without it
    CYCLE_GOES_ON = "cycle_goes_on"  # 2d: a cooperative graceful leave: no reset
    RESET = "reset"  # 2f


def join_step(phase: Phase, all_cooperative: bool) -> JoinStep:
    """Step 1. ``all_cooperative``: every reporting member reports cooperative
    rebalancing (``CheckpointPacing.all_cooperative``)."""
    if phase is Phase.FAILED:
        return JoinStep.NOTHING
    if phase is Phase.WAITING:
        return JoinStep.START
    if phase in (Phase.DRAINING, Phase.CHECKPOINTING) and all_cooperative:
        return JoinStep.AFTER_CYCLE
    return JoinStep.RESET


def leave_step(phase: Phase, name: str, *, graceful: bool, members_left: bool, all_cooperative: bool,
               cycle: CycleRound, waiting: Collection[str]) -> LeaveStep:
    """Step 2 for ``name`` (already removed from the table); ``waiting``: the
    members the current phase awaits."""
    if phase is Phase.FAILED:
        return LeaveStep.NOTHING
    if not members_left:
        return LeaveStep.WAIT
    if phase is Phase.RESETTING or phase is Phase.BACKOFF:
        return LeaveStep.ROUND_GOES_ON
    if graceful and all_cooperative and cooperative_leave_keeps_cycle(phase, name, cycle, waiting):
        return LeaveStep.CYCLE_GOES_ON
    if phase is Phase.WAITING:
        return LeaveStep.NOTHING
    return LeaveStep.RESET


def cooperative_leave_keeps_cycle(phase: Phase, name: str, cycle: CycleRound, waiting: Collection[str]) -> bool:
    """Step 2d, in a cooperative region: the leaver has not answered a checkpoint
    of the cycle in flight (RUNNING; DRAINING, where no offsets are collected
    yet; CHECKPOINTING while it is still awaited). No checkpoint then holds its
    offsets beyond the last consistent one: its partitions keep that
    checkpoint's offsets (carried forward) until their next owners, assigned by
    the Kafka rebalance, start there; what it processed since is never published
    (its leave reply names its last completed checkpoint)."""
    if phase is Phase.RUNNING or phase is Phase.DRAINING:
        return True
    if phase is Phase.CHECKPOINTING and cycle.is_joiner(name):
        # a joiner whose predecessor did not answer: not in the cycle
        return not cycle.has_checkpointed(name)
    return phase is Phase.CHECKPOINTING and name in waiting


def start_due(members: Collection[str], known: Collection[str], config: RegionConfig, first_join_at: float | None,
              now: float) -> bool:
    """Step 1b: whether the WAITING region starts now, with ``members`` joined;
    ``known``: the members of the durable document (before a coordinator
    restart); ``first_join_at``: the first join since the region waits."""
    if not members:
        return False
    expected = max(config.min_members, len(known))
    all_known_back = bool(known) and set(known) <= set(members)
    grace_over = first_join_at is not None and now - first_join_at >= config.join_grace_s
    return len(members) >= expected or all_known_back or grace_over
