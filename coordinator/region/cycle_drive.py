"""The checkpoint cycle's drive, without I/O: what a cycle sends and when it
completes (used by :class:`~coordinator.region.state.RegionCore`, the loop
thread only). The running cycle's bookkeeping is `coordinator.region.cycle`
(`CycleRound`, owned here); the core owns the phase, the awaited members and
the deadline, and does the I/O: it applies the decisions this module returns.

The cycle (periodic: at a fixed rate, a drain every ``period_s`` after the
previous drain's start, at least a tenth of the period after a RESUME,
``coordinator/region/cadence.py``; operator-driven: on a member's ``trigger``):

1. RUNNING -> DRAINING (`CycleDrive.start`, returns a `CycleStep`):
   ``seq = next_seq``, DRAIN(seq) to every member; each blocks its region permit
   and drains its operators. The core persists ``next_seq`` (a seq is never
   reused, even across a coordinator restart), then transitions, then sends.
2. All drained -> CHECKPOINTING (`CycleDrive.drained`, returns a
   `CycleStep`): CHECKPOINT(seq) to every member still in the cycle;
   each saves its operators' checkpoints and answers with its source offsets
   (`CycleDrive.answered` records them).
3. All checkpointed (`CycleDrive.checkpointed`): the answers' offsets must
   continue the last consistent checkpoint (``coordinator/region/continuity.py``:
   per partition, every claim starts at its last consistent offset and at most
   one made progress); a violation returns `ContinuityFailed`: the core starts a
   failure reset, nothing of the cycle is persisted or announced. Else it
   returns `CycleComplete`: ``seq`` is the last consistent checkpoint (with the
   members that answered and the partitions' offsets, plus the previous
   checkpoint's offsets of partitions nobody reported); the core persists it
   BEFORE anyone is told.
4. RESUME(complete=seq, offsets) to every member but the joiners (their reset
   follows): sinks publish the interval, sources keep ``offsets`` as the place
   to start a partition assigned to them later, permits are released. Phase
   RUNNING; the consecutive-reset counter goes to 0 when the checkpoint is
   progress (``coordinator/region/reset.py`` step 2, the core asks the reset
   drive with `CycleComplete.advanced`).
5. RETIRE(previous consistent seq) to the same members: they delete older
   checkpoints. With joiners the core then starts their reset at once.

A cooperative join or leave during a cycle (the core decides when it keeps the
cycle, ``coordinator/region/membership.py``): `CycleDrive.joined`, `CycleDrive.left`.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Sequence
from typing import Any

import attrs

from coordinator.protocol.common.transitions import IllegalTransition
from coordinator.protocol.region.commands import Checkpoint, Drain, RegionCommand, Resume, Retire
from coordinator.protocol.region.config import RegionConfig
from coordinator.region.checkpoints import ConsistentCheckpoints
from coordinator.region.continuity import VIOLATIONS_SHOWN, offsets_advanced
from coordinator.region.cycle import CycleRound
from coordinator.region.model import Phase, TriggerAnswer, TriggerReply
from coordinator.region.timing import CheckpointPacing, next_drain, slot_of

log = logging.getLogger(__name__)

Commands = tuple[tuple[str, RegionCommand], ...]


@attrs.frozen
class CycleStep:
    """Step 1 (a drain) or step 2 (the checkpoint) to run now."""

    seq: int
    #: DRAINING (step 1) or CHECKPOINTING (step 2): the core's transition.
    phase: Phase
    #: The reason the core logs with that transition.
    why: str
    #: DRAIN(seq) or CHECKPOINT(seq) to each member taking part, sorted by name.
    commands: Commands
    #: The cycle fails (a failure reset) when a member has not answered by then.
    deadline: float

    @property
    def members(self) -> set[str]:
        return {name for name, _ in self.commands}


@attrs.frozen
class CycleComplete:
    """Steps 3-5: checkpoint ``seq`` is consistent (already recorded in the
    consistent checkpoints); the core persists, transitions, then sends."""

    seq: int
    #: The reason the core logs with its transition to RUNNING.
    why: str
    #: RESUME(complete=seq, offsets) to each told member, then RETIRE(previous).
    commands: Commands
    #: The members that joined during the cycle: told nothing, reset next (step 5).
    joiners: tuple[str, ...]
    #: Whether any partition's offset moved (reset.py step 2).
    advanced: bool
    #: The absent (member, own checkpoint) pairs forgotten past the bound, oldest first.
    forgotten: tuple[tuple[str, int], ...]
    took_ms: float
    #: Seconds from now to the next periodic drain.
    next_drain_in_s: float


@attrs.frozen
class ContinuityFailed:
    """Step 3 refused: the answers do not continue the last consistent checkpoint
    (two members processed a partition, or one from an offset the region did not
    continue from). A failure reset rewinds every member to the last consistent
    checkpoint, discarding every interval since (docs/region.md, step 12)."""

    seq: int | None
    why: str
    violations: int
    #: The first violations (``VIOLATIONS_SHOWN``), for the event.
    shown: tuple[dict[str, Any], ...]


class CycleDrive:
    """The decisions of one region's checkpoint cycles (steps above). Owns the
    cycle's bookkeeping (`CycleRound`), the sequence ids, the next periodic drain
    and the cycle counters; records a completed checkpoint in the consistent
    checkpoints and reads the pacing for periodic drains."""

    def __init__(self, config: RegionConfig, pacing: CheckpointPacing, checkpoints: ConsistentCheckpoints) -> None:
        self._config = config
        self._pacing = pacing
        self._checkpoints = checkpoints
        self._round = CycleRound()
        self._seq: int | None = None  # the running (or last) cycle's seq
        self._next_seq = 1  # durable: a seq is never reused
        self._next_at: float | None = None  # when the next periodic drain is due
        self._completed = 0
        self._failed = 0

    # ------------------------------------------------------------------ steps
    def start(self, why: str, members: Iterable[str], now: float, due: float | None = None) -> CycleStep:
        """Step 1. ``due``: when a periodic drain was due (its grid slot, cadence.py
        step 1); None for a trigger (its start is its slot)."""
        seq = self._seq = self._next_seq
        self._next_seq += 1
        slot = slot_of(due, now, self._config.period_s)
        if slot.skipped:
            log.info("region %s: checkpoint %s starts %.2fs after it was due: %d slot(s) of the grid skipped",
                     self._config.name, seq, now - (due or now), slot.skipped)
        names = sorted(members)
        self._round.start(names, now, slot.at)
        return CycleStep(seq, Phase.DRAINING, f"checkpoint {seq} ({why})", tuple((n, Drain(seq)) for n in names),
                          now + self._config.drain_timeout_s)

    def drained(self, now: float) -> CycleStep:
        """Step 2: every awaited member drained."""
        seq = self._running("drain")
        awaited = sorted(self._round.checkpoint_started())
        return CycleStep(seq, Phase.CHECKPOINTING, f"all members drained {seq}", tuple((n, Checkpoint(seq)) for n in awaited),
                               now + self._config.drain_timeout_s)

    def expects(self, phase: Phase, command: str, seq: int | None) -> bool:
        """Whether an answer ``command`` for ``seq`` is the running cycle's in
        ``phase`` (DRAINING: ``drain``, CHECKPOINTING: ``checkpoint``); else stale."""
        awaited = {Phase.DRAINING: "drain", Phase.CHECKPOINTING: "checkpoint"}.get(phase)
        return awaited is not None and command == awaited and seq == self._seq

    def answered(self, name: str, offsets: Sequence[Sequence[Any]] | None) -> None:
        """Step 2: member ``name`` answered the checkpoint with ``offsets`` (validated claims)."""
        self._round.checkpoint_answered(name, offsets)

    def checkpointed(self, members: Collection[str], now: float) -> CycleComplete | ContinuityFailed:
        """Step 3: every awaited member answered the checkpoint; ``members``: the
        region's members now."""
        continuity = self._round.check(self._checkpoints.offsets)
        if not continuity.ok:
            self._failed += 1
            return ContinuityFailed(self._seq, f"checkpoint {self._seq} fails the continuity check: {continuity.summary()}",
                                    len(continuity.violations),
                                    tuple(v.to_dict() for v in continuity.violations[:VIOLATIONS_SHOWN]))
        seq = self._running("checkpoint")
        previous = self._checkpoints.last_consistent
        # The members that answered the checkpoint: every member, less those that
        # joined during the cycle without a predecessor that answered (`joined`).
        # Each partition's offset continues the previous checkpoint's (continuity.py); partitions
        # nobody reported (unassigned while the group rebalances) keep that checkpoint's offset.
        advanced = offsets_advanced(self._checkpoints.offsets, continuity.offsets)
        forgotten = self._checkpoints.completed(seq, self._round.answered(members), continuity.offsets)
        self._completed += 1
        took_ms = self._round.elapsed_s(now) * 1000
        slot = self._round.slot
        upcoming = next_drain(now if slot is None else slot, now, self._config.period_s)
        self._next_at = upcoming.at
        joiners = tuple(self._round.take_joiners())
        told = sorted(n for n in members if n not in joiners)  # joiners: their reset follows
        commands: list[tuple[str, RegionCommand]] = [(n, Resume(seq, self._checkpoints.offsets)) for n in told]
        if previous is not None:
            commands += [(n, Retire(previous)) for n in told]
        # With joiners, their reset follows at once and its RESUME schedules the next drain.
        if not joiners and upcoming.floored:
            log.info("region %s: checkpoint %s took %.0f ms, past its grid slot: next drain in %.2fs (the floor "
                     "after a RESUME), %d slot(s) of the grid skipped", self._config.name, seq, took_ms,
                     upcoming.at - now, upcoming.skipped)
        elif not joiners:
            log.debug("region %s: next drain in %.3fs (one period after the slot of checkpoint %s)",
                      self._config.name, upcoming.at - now, seq)
        return CycleComplete(seq, f"checkpoint {seq} is consistent ({took_ms:.0f} ms)", tuple(commands), joiners,
                             advanced, tuple(forgotten), took_ms, upcoming.at - now)

    def _running(self, what: str) -> int:
        if self._seq is None:  # a cycle's seq is set when its drain starts
            raise IllegalTransition(f"region {self._config.name}: {what} acks without a cycle")
        return self._seq

    def failed(self) -> None:
        """A cycle failed (a late or failed answer): counted for status and metrics."""
        self._failed += 1

    # ------------------------------------------------------------------ joins and leaves during a cycle
    def joined(self, name: str, restarted: bool) -> bool:
        """A member joining (new, or a restart: its predecessor is dead) while a
        cycle drains or checkpoints, when every reporting member is cooperative
        (membership.py step 1c): the cycle completes without it, then the region
        resets for it (docs/region.md, cooperative step 10). Returns True when the
        core no longer awaits ``name`` (step 1).

        1. A restarted member's predecessor leaves the cycle unless it answered the
           cycle's checkpoint: no command of the cycle reaches the new
           incarnation (commands go to a name's current socket).
        2. A predecessor that answered the checkpoint stays among its members:
           the checkpoint holds its offsets and its saved interval, which the new
           incarnation's reset publishes (``own`` is that checkpoint).
        3. One that did not is absent from the checkpoint: its own checkpoint stays
           the previous one, its partitions carry that checkpoint's offsets
           (nobody else consumed them: the dead consumer held them), and its
           restarted process deletes what it sealed since (its reset's ``own``).
        4. At completion the joiners are told nothing of the cycle (no RESUME, no
           RETIRE); the reset that follows at once brings them in."""
        return self._round.member_joined(name, restarted)

    def left(self, name: str) -> None:
        """A cooperative graceful leave: the cycle goes on without ``name``."""
        self._round.member_left(name)

    def take_joiners(self) -> list[str]:
        """The members that joined during the cycle (a reset that starts brings them in)."""
        return self._round.take_joiners()

    @property
    def bookkeeping(self) -> CycleRound:
        """The running cycle's bookkeeping, read by membership.py's leave decision."""
        return self._round

    # ------------------------------------------------------------------ timing, triggers
    def due(self, now: float) -> bool:
        """RUNNING: the next periodic drain is due (pacing.py `cycle_due`); never in
        operator-driven mode (a trigger starts each cycle)."""
        return self._config.mode == "periodic" and self._pacing.cycle_due(now, self._next_at)

    @property
    def wake_at(self) -> float | None:
        """RUNNING: when the next periodic drain is due (None: operator-driven mode)."""
        return self._next_at if self._config.mode == "periodic" else None

    def schedule(self, at: float) -> None:
        """The next periodic drain after a reset's RESUME (reset_round.py step 5)."""
        self._next_at = at

    def not_now(self, phase: Phase, name: str) -> TriggerReply:
        """A trigger from ``name`` that no drain of it follows: why (the member drained
        already in the running cycle, which covers what it submitted; or the region is
        checkpointing, resetting, waiting or FAILED)."""
        if phase in (Phase.DRAINING, Phase.CHECKPOINTING):
            why = f"checkpoint {self._seq} is running and {name} already drained for it"
        else:
            why = f"the region is {phase.value}; trigger again after the next RESUME"
        log.debug("region %s: trigger from %s not served: %s", self._config.name, name, why)
        return TriggerReply(TriggerAnswer.NOT_NOW, why)

    # ------------------------------------------------------------------ durable state, counters
    def restore(self, next_seq: int) -> None:
        """From the durable document, before any cycle."""
        self._next_seq = next_seq

    @property
    def seq(self) -> int | None:
        return self._seq

    @property
    def next_seq(self) -> int:
        return self._next_seq

    @property
    def next_at(self) -> float | None:
        return self._next_at

    @property
    def completed(self) -> int:
        return self._completed

    @property
    def failures(self) -> int:
        return self._failed


__all__ = ["ContinuityFailed", "CycleComplete", "CycleDrive", "CycleStep"]
