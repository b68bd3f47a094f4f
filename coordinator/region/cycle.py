"""The checkpoint cycle: what a cycle sends, what it collects, and when it
completes (no I/O, the loop thread only). :class:`CycleDrive` is owned by
:class:`~coordinator.region.machine.RegionCore`, which owns the phase, the
awaited members and the deadline, and does the I/O: it applies the steps this
module returns (persist, transition, send, in that order where a step says so).

The cycle (periodic: at a fixed rate, a drain every ``period_s`` after the
previous drain's start, at least a tenth of the period after a RESUME,
``coordinator/region/timing.py``; operator-driven: on a member's ``trigger``):

1. RUNNING -> DRAINING (`CycleDrive.start`, returns a `CycleStep`):
   ``seq = next_seq``, DRAIN(seq) to every member; each blocks its region permit
   and drains its operators. The cycle's members (the members at the drain),
   its start and its slot on the fixed-rate grid are kept in its `CycleRound`.
   The core persists ``next_seq`` (a seq is never reused, even across a
   coordinator restart), then transitions, then sends.
2. All drained -> CHECKPOINTING (`CycleDrive.drained`, returns a
   `CycleStep`): CHECKPOINT(seq) to every member still in the cycle;
   each saves its operators' checkpoints and answers with its source offsets
   (`CycleRound.checkpoint_answered` records them with its claims) and its
   Kafka transactions (null without a transactional sink).
3. All checkpointed (`CycleDrive.checkpointed`): the answers' offsets must
   continue the last consistent checkpoint (the continuity fence,
   ``coordinator/region/continuity.py``: per partition, every claim starts at
   its last consistent offset and at most one made progress); a violation
   returns `ContinuityFailed`: the core starts a failure reset, nothing of the
   cycle is persisted or announced. Else it returns `CycleComplete`: ``seq``
   is the last consistent checkpoint (with the members that answered and the
   partitions' offsets, plus the previous checkpoint's offsets of partitions
   nobody reported), and each answering member's transactions become its
   entry to resolve (``coordinator/region/resolve.py``, step 1); the core
   persists it BEFORE anyone is told.
4. RESUME(complete=seq, offsets) to every member but the joiners (their reset
   follows): sinks publish the interval, sources keep ``offsets`` as the place
   to start a partition assigned to them later, permits are released. Phase
   RUNNING; the consecutive-reset count goes to 0 when the checkpoint is
   progress (the core tells the reset drive `CycleComplete.advanced`).
5. RETIRE(previous consistent seq) to the same members: they delete older
   checkpoints. With joiners the core then starts their reset at once.

A cooperative join or leave while the cycle runs (when it keeps the cycle:
``coordinator/region/membership.py``): `CycleRound.member_joined`, `CycleRound.member_left`; the
joiners are remembered for the reset that follows the cycle
(`CycleRound.take_joiners`).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Sequence
from typing import Any

import attrs

from coordinator.protocol.common.transitions import IllegalTransition
from coordinator.protocol.region.commands import Checkpoint, Drain, RegionCommand, Resume, Retire
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.transactions import Transactions
from coordinator.region.checkpoints import ConsistentCheckpoints
from coordinator.region.continuity import VIOLATIONS_SHOWN, Continuity, CycleClaims, offsets_advanced
from coordinator.region.timing import CheckpointPacing, next_drain, slot_of

log = logging.getLogger(__name__)

Commands = tuple[tuple[str, RegionCommand], ...]


@attrs.frozen
class CycleStep:
    """Step 1 (a drain) or step 2 (the checkpoint) to run now."""

    seq: int
    #: The reason the core logs with its transition (to DRAINING, step 1; to CHECKPOINTING, step 2).
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
    #: Whether any partition's offset moved (step 4: progress for the reset count).
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
    checkpoint, discarding every interval since (docs/region.md, "Why the region
    stays exactly once")."""

    seq: int | None
    why: str
    violations: int
    #: The first violations (``VIOLATIONS_SHOWN``), for the event.
    shown: tuple[dict[str, Any], ...]


class CycleRound:
    """What one cycle collects between its DRAIN and its RESUME: who takes part,
    who answered, who joined (steps 1-3 and the cooperative joins and leaves).
    Not thread-safe."""

    def __init__(self) -> None:
        # The running cycle's checkpoint answers, checked before it completes (the continuity fence).
        self._claims = CycleClaims()
        # The members taking part in the running cycle (its drain's members, less any that
        # left or were replaced by a new incarnation since), those that answered its
        # checkpoint, and the members that joined while it ran (reset once it completes).
        self._members: set[str] = set()
        self._checkpointed: set[str] = set()
        # the checkpoint answers' Kafka transactions (None: no transactional sink)
        self._transactions: dict[str, Transactions | None] = {}
        self._joined: list[str] = []
        self._started_at: float | None = None
        self._slot: float | None = None  # the grid slot of the running cycle's drain (timing.py)

    @property
    def slot(self) -> float | None:
        """The grid slot of the last cycle's drain (None: no cycle yet)."""
        return self._slot

    def start(self, members: Iterable[str], now: float, slot: float) -> None:
        """Step 1: the cycle's members, its start and its grid slot."""
        self._members = set(members)
        self._checkpointed = set()
        self._started_at = now
        self._slot = slot

    def elapsed_s(self, now: float) -> float:
        """Seconds since the cycle's drain started (0 without a cycle)."""
        return now - (self._started_at if self._started_at is not None else now)

    def checkpoint_started(self) -> set[str]:
        """Step 2: the members to await (the cycle's members); no claims yet."""
        self._claims.clear()
        self._checkpointed = set()
        self._transactions = {}
        return set(self._members)

    def checkpoint_answered(
        self, name: str, offsets: Sequence[Sequence[Any]] | None, transactions: Transactions | None = None
    ) -> None:
        """Step 2: member ``name`` answered the checkpoint with ``offsets`` (validated
        claims) and ``transactions`` (None: it runs no transactional sink)."""
        self._checkpointed.add(name)
        self._claims.add(name, offsets or [])
        self._transactions[name] = transactions

    def transactions(self) -> dict[str, Transactions | None]:
        """Step 3: the checkpoint answers' transactions, by member."""
        return dict(self._transactions)

    def has_checkpointed(self, name: str) -> bool:
        return name in self._checkpointed

    def is_joiner(self, name: str) -> bool:
        """``name`` joined while this cycle ran."""
        return name in self._joined

    def member_joined(self, name: str, restarted: bool) -> bool:
        """A member joining (new, or a restart: its predecessor is dead) while a
        cycle drains or checkpoints, when every reporting member is cooperative:
        the cycle completes without it, then the region resets for it
        (docs/region.md, cooperative step 10). Returns True when the core no
        longer awaits ``name`` (a below).

        a. A restarted member's predecessor leaves the cycle unless it answered the
           cycle's checkpoint: no command of the cycle reaches the new
           incarnation (commands go to a name's current socket).
        b. A predecessor that answered the checkpoint stays among its members:
           the checkpoint holds its offsets and its saved interval, which the new
           incarnation's reset publishes (``own`` is that checkpoint).
        c. One that did not is absent from the checkpoint: its own checkpoint stays
           the previous one, its partitions carry that checkpoint's offsets
           (nobody else consumed them: the dead consumer held them), and its
           restarted process deletes what it sealed since (its reset's ``own``).
        d. At completion the joiners are told nothing of the cycle (no RESUME, no
           RETIRE); the reset that follows at once brings them in."""
        dropped = restarted and name not in self._checkpointed
        if dropped:
            self._members.discard(name)
        self._joined.append(name)
        return dropped

    def member_left(self, name: str) -> None:
        """A cooperative graceful leave: the cycle goes on without ``name``."""
        self._members.discard(name)
        self._joined = [n for n in self._joined if n != name]

    def take_joiners(self) -> list[str]:
        """The members that joined during the cycle (forgotten here: the caller
        resets the region for them)."""
        joined, self._joined = self._joined, []
        return joined

    def check(self, last: Sequence[Sequence[Any]]) -> Continuity:
        """Step 3: the answers' claims against the last consistent offsets ``last``."""
        return self._claims.check(last)

    def answered(self, present: Collection[str]) -> list[str]:
        """Step 3: the members of ``present`` that answered the checkpoint, sorted."""
        return sorted(self._checkpointed & set(present))


class CycleDrive:
    """The decisions of one region's checkpoint cycles (steps above). Owns the
    running cycle (`round`), the sequence ids, the next periodic drain and the
    cycle counters; records a completed checkpoint in the consistent
    checkpoints and reads the pacing for periodic drains."""

    def __init__(self, config: RegionConfig, pacing: CheckpointPacing, checkpoints: ConsistentCheckpoints) -> None:
        self._config = config
        self._pacing = pacing
        self._checkpoints = checkpoints
        #: The running cycle's bookkeeping.
        self.round = CycleRound()
        #: The running (or last) cycle's seq.
        self.seq: int | None = None
        #: Durable: a seq is never reused.
        self.next_seq = 1
        #: When the next periodic drain is due.
        self.next_at: float | None = None
        #: Checkpoints completed, cycles failed (status and metrics).
        self.completed = 0
        self.failures = 0

    # ------------------------------------------------------------------ steps
    def start(self, why: str, members: Iterable[str], now: float, due: float | None = None) -> CycleStep:
        """Step 1. ``due``: when a periodic drain was due (its grid slot, timing.py's
        cadence); None for a trigger (its start is its slot)."""
        seq = self.seq = self.next_seq
        self.next_seq += 1
        slot = slot_of(due, now, self._config.period_s)
        if slot.skipped:
            log.info(
                "region %s: checkpoint %s starts %.2fs after it was due: %d slot(s) of the grid skipped",
                self._config.name,
                seq,
                now - (due or now),
                slot.skipped,
            )
        names = sorted(members)
        self.round.start(names, now, slot.at)
        return CycleStep(
            seq, f"checkpoint {seq} ({why})", tuple((n, Drain(seq)) for n in names), now + self._config.drain_timeout_s
        )

    def drained(self, now: float) -> CycleStep:
        """Step 2: every awaited member drained."""
        seq = self._running("drain")
        awaited = sorted(self.round.checkpoint_started())
        return CycleStep(
            seq,
            f"all members drained {seq}",
            tuple((n, Checkpoint(seq)) for n in awaited),
            now + self._config.drain_timeout_s,
        )

    def checkpointed(self, members: Collection[str], now: float) -> CycleComplete | ContinuityFailed:
        """Step 3: every awaited member answered the checkpoint; ``members``: the
        region's members now."""
        continuity = self.round.check(self._checkpoints.offsets)
        if not continuity.ok:
            self.failures += 1
            return ContinuityFailed(
                self.seq,
                f"checkpoint {self.seq} fails the continuity check: {continuity.summary()}",
                len(continuity.violations),
                tuple(v.to_dict() for v in continuity.violations[:VIOLATIONS_SHOWN]),
            )
        seq = self._running("checkpoint")
        previous = self._checkpoints.last_consistent
        # The members that answered the checkpoint: every member, less those that
        # joined during the cycle without a predecessor that answered (`CycleRound.member_joined`).
        # Each partition's offset continues the previous checkpoint's (the continuity fence); partitions
        # nobody reported (unassigned while the group rebalances) keep that checkpoint's offset.
        advanced = offsets_advanced(self._checkpoints.offsets, continuity.offsets)
        forgotten = self._checkpoints.completed(
            seq, self.round.answered(members), continuity.offsets, self.round.transactions()
        )
        self.completed += 1
        took_ms = self.round.elapsed_s(now) * 1000
        slot = self.round.slot
        upcoming = next_drain(now if slot is None else slot, now, self._config.period_s)
        self.next_at = upcoming.at
        joiners = tuple(self.round.take_joiners())
        told = sorted(n for n in members if n not in joiners)  # joiners: their reset follows
        commands: list[tuple[str, RegionCommand]] = [(n, Resume(seq, self._checkpoints.offsets)) for n in told]
        if previous is not None:
            commands += [(n, Retire(previous)) for n in told]
        # With joiners, their reset follows at once and its RESUME schedules the next drain.
        if not joiners and upcoming.floored:
            log.info(
                "region %s: checkpoint %s took %.0f ms, past its grid slot: next drain in %.2fs (the floor "
                "after a RESUME), %d slot(s) of the grid skipped",
                self._config.name,
                seq,
                took_ms,
                upcoming.at - now,
                upcoming.skipped,
            )
        elif not joiners:
            log.debug(
                "region %s: next drain in %.3fs (one period after the slot of checkpoint %s)",
                self._config.name,
                upcoming.at - now,
                seq,
            )
        return CycleComplete(
            seq,
            f"checkpoint {seq} is consistent ({took_ms:.0f} ms)",
            tuple(commands),
            joiners,
            advanced,
            tuple(forgotten),
            took_ms,
            upcoming.at - now,
        )

    def _running(self, what: str) -> int:
        if self.seq is None:  # a cycle's seq is set when its drain starts
            raise IllegalTransition(f"region {self._config.name}: {what} acks without a cycle")
        return self.seq

    def restore(self, next_seq: int) -> None:
        """From the durable document, before any cycle."""
        self.next_seq = next_seq

    def schedule(self, at: float) -> None:
        """The next periodic drain after a reset's RESUME (off the grid: the pacing after a reset)."""
        self.next_at = at

    def failed(self) -> None:
        """A cycle failed (a late or failed answer): counted for status and metrics."""
        self.failures += 1

    # ------------------------------------------------------------------ timing
    def due(self, now: float) -> bool:
        """RUNNING: the next periodic drain is due (`CheckpointPacing.cycle_due`); never in
        operator-driven mode (a trigger starts each cycle)."""
        return self._config.mode == "periodic" and self._pacing.cycle_due(now, self.next_at)

    @property
    def wake_at(self) -> float | None:
        """RUNNING: when the next periodic drain is due (None: operator-driven mode)."""
        return self.next_at if self._config.mode == "periodic" else None


__all__ = ["ContinuityFailed", "CycleComplete", "CycleDrive", "CycleRound", "CycleStep"]
