"""A region's rounds, run: the steps the checkpoint cycle and the reset round
return, applied to the region in the order each step states (no I/O but the
core's callbacks; the loop thread only).

:class:`RegionRounds` is the base of :class:`~coordinator.region.machine.RegionCore`,
which decides what each input does; this class holds what every round step
changes and the one way each change reaches the outside:

1. The parts, each read by callers and changed only by the core's inputs: the
   member table (`members`, ``coordinator/region/membership.py``), the
   consistent checkpoints (`checkpoints`, ``coordinator/region/checkpoints.py``),
   the checkpoint cycles (`cycles`, ``coordinator/region/cycle.py``), the reset
   rounds with their hold (`resets`, ``coordinator/region/reset.py``) and the
   pacing after rebalances (`pacing`, ``coordinator/region/timing.py``); the
   round in flight: the members it awaits (`waiting`) and its deadline.
2. The outputs, three callbacks: ``send(member, command)`` (a command pushed to
   a member, ``coordinator/protocol/region/commands.py``), ``persist(doc)``
   (the durable document, ``coordinator/region/document.py``; the service makes
   it durable before any command queued after it is sent) and
   ``on_event(event)`` (a typed `RegionEvent`, ``coordinator/region/events.py``,
   for the status and the metrics).
3. The phase, on the machine the core gives (its `TRANSITIONS`): changed only
   through `RegionRounds._goto`, checked, logged and reported; FAILED only
   through `RegionRounds.fail`, always with a reason.
4. A round's step is applied as the drive returned it: persisted first where
   the step says so, then the transition, then the commands; nothing a member
   hears is ahead of what the coordinator has made durable.
5. What the region stores (`RegionRounds.document`) and reports
   (`RegionRounds.status`, ``coordinator/protocol/region/status.py``) is read
   from the same parts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from coordinator.protocol.common.transitions import IllegalTransition, StateMachine
from coordinator.protocol.region.commands import Failed, RegionCommand, Resume
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.replies import RegionPhase
from coordinator.protocol.region.status import RegionStatus
from coordinator.region.checkpoints import ConsistentCheckpoints
from coordinator.region.cycle import ContinuityFailed, CycleDrive, CycleStep
from coordinator.region.document import RegionDocument
from coordinator.region.events import (
    BackoffHeld,
    CheckpointCompleted,
    ContinuityRefused,
    MemberForgotten,
    PhaseChanged,
    RegionEvent,
    RegionFailed,
    ResetResumed,
    ResetStarted,
)
from coordinator.region.membership import MemberTable
from coordinator.region.model import ResetKind
from coordinator.region.reset import ResetDrive, RoundRefused
from coordinator.region.timing import CheckpointPacing

log = logging.getLogger(__name__)

Send = Callable[[str, RegionCommand], None]
Persist = Callable[[dict[str, Any]], None]
OnEvent = Callable[[RegionEvent], None]


class RegionRounds:
    """One region's parts and its rounds' effects (see the module docstring).
    Not thread-safe: the coordinator's loop thread is its only caller."""

    def __init__(
        self,
        config: RegionConfig,
        send: Send,
        persist: Persist,
        on_event: OnEvent,
        phase: StateMachine[RegionPhase],
    ) -> None:
        self.config = config
        self._send = send
        self._persist = persist
        self._on_event = on_event
        # The phase: changed only through _goto, and by _load before any input.
        self._phase = phase
        #: The member table: changed only by this core's inputs (join, heartbeat,
        #: ack, leave); its records are read by the pacing.
        self.members = MemberTable(config.name, config.member_timeout_s)
        #: The last consistent checkpoint, its members and offsets, and the absent
        #: members' own checkpoints.
        self.checkpoints = ConsistentCheckpoints()
        self.known_members: list[str] = []  # members at the last persist (for restarts)
        self.failed_reason: str | None = None
        # FAILED over an unusable stored document: never overwrite it (fail(persist=False))
        self._keep_stored = False
        # the running round (cycle or reset): the members awaited and its deadline
        self.waiting: set[str] = set()
        self.deadline: float | None = None
        #: Pacing reads the member table (written here only); the cycle drive holds the
        #: seqs and the running cycle, the reset drive the attempt counters and the
        #: hold; each decides its round's commands.
        self.pacing = CheckpointPacing(config, self.members)
        self.cycles = CycleDrive(config, self.pacing, self.checkpoints)
        self.resets = ResetDrive(config, self.pacing, self.checkpoints)

    # ------------------------------------------------------------------ durable document
    def _load(self, doc: dict[str, Any]) -> None:
        stored = RegionDocument.from_dict(doc, self.config.name)
        self.checkpoints.restore(stored)
        self.cycles.restore(stored.next_seq)
        self.resets.restore(stored)
        self.known_members = stored.members
        if stored.failed:
            self._phase.to(RegionPhase.FAILED, "the stored document says FAILED")
            self.failed_reason = stored.failed_reason or (
                "failed before the coordinator restarted (the stored document has no reason)"
            )

    def document(self) -> dict[str, Any]:
        """The durable document (`coordinator.region.document`) as it stands now."""
        return RegionDocument(
            config=self.config.to_dict(),
            last_consistent=self.checkpoints.last_consistent,
            next_seq=self.cycles.next_seq,
            next_attempt=self.resets.next_attempt,
            consecutive_resets=self.resets.consecutive,
            checkpoint_members=self.checkpoints.members,
            checkpoint_offsets=self.checkpoints.offsets,
            absent_checkpoints=self.checkpoints.absent.seqs,
            members=sorted(self.members) if self.members else self.known_members,
            failed=self.phase is RegionPhase.FAILED,
            failed_reason=self.failed_reason,
            backoff_s=self.resets.hold.length_s,
            failure_streak=self.resets.streak,
            transactions=self.checkpoints.transactions.entries(),
        ).to_dict()

    def _save(self) -> None:
        if self._keep_stored:
            return
        self._persist(self.document())

    # ------------------------------------------------------------------ transitions
    @property
    def phase(self) -> RegionPhase:
        return self._phase.state

    def _goto(self, phase: RegionPhase, why: str) -> None:
        """The one way to change the phase once running: checked against the
        table and logged (the machine), then reported as an event."""
        if phase is RegionPhase.FAILED and not self.failed_reason:
            # Invariant: a FAILED region always says why (status, members, runner).
            raise IllegalTransition(f"region {self.config.name}: FAILED without a reason ({why})")
        self._phase.to(phase, why)
        self._on_event(PhaseChanged(phase, why))

    def fail(self, reason: str, now: float, *, persist: bool = True) -> None:
        """Give up on the region (terminal): the only way to FAILED.

        1. ``failed_reason`` is set first (never empty: status, the members'
           ``failed`` command and the runner's exit all show it);
        2. the transition, then the durable document (FAILED survives a
           coordinator restart);
        3. every member is told (``failed {reason}``: it exits with code 3).
        A region already FAILED keeps its first reason. Used for too many
        consecutive resets and by the service when a tick raised; ``persist``
        False for a region whose stored document is unusable: it is kept as it
        is (never written again by this core), for a coordinator that can read it."""
        if self.phase is RegionPhase.FAILED:
            log.info(
                "region %s: already FAILED (%s); ignoring another cause: %s",
                self.config.name,
                self.failed_reason,
                reason,
            )
            return
        self.failed_reason = reason or "failed (no reason given)"
        self._goto(RegionPhase.FAILED, self.failed_reason)
        self.waiting = set()
        self.deadline = None
        self._keep_stored = not persist
        self._save()
        self._on_event(RegionFailed(self.failed_reason))
        self._broadcast(self.members, Failed(self.failed_reason))

    def _broadcast(self, names: Iterable[str], command: RegionCommand) -> None:
        for name in sorted(names):
            self._send(name, command)

    def _send_all(self, commands: Iterable[tuple[str, RegionCommand]]) -> None:
        for name, command in commands:
            self._send(name, command)

    # ------------------------------------------------------------------ the cycle (cycle.py's steps applied)
    def _start_cycle(self, now: float, why: str, due: float | None = None) -> None:
        """The drive's drain: persist the seq, DRAINING, send."""
        step = self.cycles.start(why, self.members, now, due)
        self._save()  # a seq is never reused, even across a coordinator restart
        self._enter_step(RegionPhase.DRAINING, step)

    def _start_checkpoint(self, now: float) -> None:
        """Every awaited member drained: CHECKPOINTING, send."""
        self._enter_step(RegionPhase.CHECKPOINTING, self.cycles.drained(now))

    def _enter_step(self, phase: RegionPhase, step: CycleStep) -> None:
        self._goto(phase, step.why)
        self.waiting = step.members
        self.deadline = step.deadline
        self._send_all(step.commands)

    def _complete_checkpoint(self, now: float) -> None:
        """Every awaited member checkpointed: persisted before anyone is told;
        joiners' reset next."""
        done = self.cycles.checkpointed(self.members, now)
        if isinstance(done, ContinuityFailed):
            self._continuity_failed(done, now)
            return
        self._log_forgotten(list(done.forgotten))
        if not self.resets.checkpoint_completed(advanced=done.advanced, now=now):
            log.info(
                "region %s: checkpoint %s moved no offset and the last failure is recent: "
                "%d consecutive reset(s) still count",
                self.config.name,
                done.seq,
                self.resets.consecutive,
            )
        self._save()  # durable before anyone hears of it
        self._goto(RegionPhase.RUNNING, done.why)
        self._on_event(CheckpointCompleted(done.seq, round(done.took_ms, 1), round(done.next_drain_in_s, 3)))
        self._send_all(done.commands)
        self.waiting = set()
        self.deadline = None
        if done.joiners:
            self._start_reset(
                f"members {sorted(set(done.joiners))} joined during checkpoint {done.seq}",
                ResetKind.MEMBERSHIP,
                now,
                rejoin=True,
            )

    def _continuity_failed(self, failed: ContinuityFailed, now: float) -> None:
        """The continuity fence refused the checkpoint: nothing of the cycle is
        persisted or announced; a failure reset rewinds every member to the last
        consistent checkpoint."""
        log.error(
            "region %s: %s; resetting to checkpoint %s", self.config.name, failed.why, self.checkpoints.last_consistent
        )
        self._on_event(ContinuityRefused(failed.seq, failed.violations, list(failed.shown)))
        self._start_reset(failed.why, ResetKind.FAILURE, now, restart=True)

    def _log_forgotten(self, forgotten: list[tuple[str, int]]) -> None:
        for name, seq in forgotten:
            log.error(
                "region %s: forgetting that absent member %s took part in checkpoint %s (more than %d absent "
                "members); if a process of that name returns, its pending intervals are deleted, not published",
                self.config.name,
                name,
                seq,
                self.checkpoints.absent.kept,
            )
            self._on_event(MemberForgotten(name, seq))

    # ------------------------------------------------------------------ the reset round (reset.py's steps applied)
    def _start_reset(self, why: str, kind: ResetKind, now: float, restart: bool = False, rejoin: bool = False) -> None:
        """A cause: dropped while a round runs unless it restarts the round; else
        the drive's round (or its refusal: FAILED), persist the attempt,
        RESETTING, the commands."""
        if self.phase is RegionPhase.FAILED:
            return
        if self.phase is RegionPhase.RESETTING and not restart:
            log.info(
                "region %s: reset already running (attempt %s); not stacking: %s",
                self.config.name,
                self.resets.attempt,
                why,
            )
            return
        if self.cycles.round.take_joiners():  # the round brings in the members that joined during a cycle
            rejoin = True
        round_ = self.resets.start(why, kind, self.members, now, rejoin=rejoin)
        if isinstance(round_, RoundRefused):
            self.fail(round_.reason, now)
            return
        self._save()  # the attempt is durable before any member hears of it
        self._goto(RegionPhase.RESETTING, round_.why)
        self._on_event(ResetStarted(round_.attempt, kind, why, self.checkpoints.last_consistent))
        self.waiting = round_.members
        self.deadline = round_.deadline
        self._send_all(round_.commands)

    def _maybe_reset_done(self, now: float) -> None:
        """Every awaited member answered: RESUME, or BACKOFF while the hold of a
        failure streak lasts."""
        if self.phase is not RegionPhase.RESETTING or self.waiting:
            return
        done = self.resets.answered(now, self.members)
        self.deadline = None
        if done.resolved.changed:
            log.info(
                "region %s: reset attempt %s resolved the Kafka transactions of absent members %s and the "
                "prepared ones of %s",
                self.config.name,
                done.attempt,
                list(done.resolved.dropped),
                list(done.resolved.cleared),
            )
            self._save()  # the resolved transactions are gone before the RESUME
        why = f"reset attempt {done.attempt} complete ({done.took_s * 1000:.0f} ms since the first cause)"
        if done.hold_left_s is None:
            self._resume_after_reset(now, why)
            return
        self._goto(
            RegionPhase.BACKOFF,
            f"{why}; RESUME in {done.hold_left_s:.2f}s: a {done.hold_s:.2f}s backoff after "
            f"failure {self.resets.streak} of a failure streak ({self.resets.consecutive} "
            f"since the last progress, max {self.config.max_consecutive_resets})",
        )
        self._on_event(BackoffHeld(done.attempt, done.hold_s, round(done.hold_left_s, 3), self.resets.streak))

    def _resume_after_reset(self, now: float, why: str) -> None:
        """RESUME(complete=None), RUNNING."""
        end = self.resets.resume()
        if end.held_s is not None:
            self._save()  # the hold is over: a restarted coordinator must not hold again
            why = f"{why}; held {end.held_s:.2f}s (backoff)"
        self._goto(RegionPhase.RUNNING, why)
        self._on_event(
            ResetResumed(end.attempt, round(end.took_s * 1000, 1), round(end.next_drain_in_s, 3), end.held_s)
        )
        self._broadcast(self.members, Resume(None))
        self.cycles.schedule(now + end.next_drain_in_s)
        log.info("region %s: next drain in %.2fs (after a reset)", self.config.name, end.next_drain_in_s)

    # ------------------------------------------------------------------ status
    def status(self, now: float) -> RegionStatus:
        """This region's status (``coordinator/protocol/region/status.py``); the
        service adds the recent checkpoints and resets."""
        return RegionStatus(
            name=self.config.name,
            index=self.config.index,
            phase=self.phase,
            mode=self.config.mode,
            period_s=self.config.period_s,
            members=self.members.status(now),
            last_consistent=self.checkpoints.last_consistent,
            seq=self.cycles.seq,
            waiting_for=tuple(sorted(self.waiting)),
            reset=self.resets.status(now),
            checkpoints=self.cycles.completed,
            failed_cycles=self.cycles.failures,
            failed_reason=self.failed_reason,
            transactions=self.checkpoints.transactions.status(),
        )


__all__ = ["OnEvent", "Persist", "RegionRounds", "Send"]
