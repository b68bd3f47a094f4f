"""The region controller's state machine, without I/O (driven by ``coordinator/region/service.py``).

A :class:`RegionCore` holds one consistent region and decides its phase: what
each input changes, which phase follows, and what is persisted and sent, in
which order. Inputs are method calls (``join``, ``ack``, ``request_reset``,
``trigger``, ``leave``, ``tick``; a heartbeat only updates the member table,
``members.heartbeat``); outputs go through three
callbacks: ``send(member, command)`` (a command pushed to a member,
``coordinator/protocol/region/commands.py``), ``persist(doc)`` (the durable
document; the service makes it durable before any command queued after it is
sent) and ``on_event(event)`` (a typed `RegionEvent`,
``coordinator/region/events.py``, for the status and the metrics).

The phases (`RegionPhase`) and the only transitions allowed (`TRANSITIONS`, checked
by the project's state-machine helper; anything else raises
IllegalTransition):

1. WAITING: not enough members yet (start-up, a coordinator restart, everyone
   left). A join is admitted; once the expected members are back
   (`start_due`) the region resets to its last consistent checkpoint
   (RESETTING).
2. RUNNING: members process records. A periodic drain that is due, or an
   operator-driven trigger, starts a checkpoint cycle (DRAINING).
3. DRAINING, CHECKPOINTING: the cycle's two phases, each awaiting every
   member's answer (``coordinator/region/cycle.py`` numbers the cycle); a
   consistent checkpoint is persisted, then RUNNING and RESUME, RETIRE.
4. RESETTING: a reset round awaits every member's answer
   (``coordinator/region/reset.py`` numbers the round); then RUNNING and
   RESUME, or BACKOFF after a repeated failure.
5. BACKOFF: every member reset; the RESUME waits for the hold
   (``coordinator/region/timing.py``), sent by the tick when it is over.
6. FAILED: terminal (`RegionCore.fail`): too many consecutive resets, an
   internal error, an unusable stored document.

A member that does not answer within the phase's timeout, an error answer
(one caused by a group rebalance forces the reset instead), a member that
stops heartbeating (``member_timeout_s``) or leaves, or a new member fails the
cycle and starts a reset. What a membership change costs (a reset, the start,
a cycle going on without the member) is decided from the phase by
``coordinator/region/membership.py`` (`join_step`, `leave_step`) and applied
here.

The parts the core owns, each read by callers and changed only by the core's
inputs: the member table (`members`, ``coordinator/region/membership.py``), the
consistent checkpoints (`checkpoints`, ``coordinator/region/checkpoints.py``),
the checkpoint cycles (`cycles`, ``coordinator/region/cycle.py``), the reset
rounds with their hold (`resets`, ``coordinator/region/reset.py``) and the
pacing after rebalances (`pacing`, ``coordinator/region/timing.py``). The
durable document is ``coordinator/region/document.py``, the status reply
``coordinator/protocol/region/status.py``.

Coordinator restart: the durable document brings back the config, the last
consistent checkpoint, the counters and the member names; the phase starts in
WAITING. Members notice (their heartbeats get NOT_REGISTERED) and join again;
the region then starts as in step 1.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from coordinator.protocol.common.transitions import IllegalTransition, StateMachine, TransitionTable
from coordinator.protocol.region.commands import CommandKind, Failed, RegionCommand, Resume
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.replies import (
    JoinRefusal,
    Predecessor,
    RegionJoinReply,
    RegionPhase,
    RegionTriggerReply,
    TriggerAnswer,
)
from coordinator.protocol.region.status import RegionStatus
from coordinator.protocol.region.transactions import Resolve, Transactions
from coordinator.region.checkpoints import ConsistentCheckpoints
from coordinator.region.cycle import ContinuityFailed, CycleDrive, CycleStep
from coordinator.region.document import RegionDocument
from coordinator.region.events import (
    BackoffHeld,
    CheckpointCompleted,
    ContinuityRefused,
    MemberForgotten,
    MemberJoined,
    MemberLeft,
    PhaseChanged,
    RegionEvent,
    RegionFailed,
    ResetResumed,
    ResetStarted,
)
from coordinator.region.membership import JoinKind, JoinStep, LeaveStep, MemberTable, join_step, leave_step, start_due
from coordinator.region.model import ResetKind
from coordinator.region.reset import ResetDrive, RoundRefused
from coordinator.region.timing import CheckpointPacing

log = logging.getLogger(__name__)


#: The only allowed phase transitions; anything else is a bug and raises
#: IllegalTransition (coordinator/protocol/common/transitions.py).
TRANSITIONS: TransitionTable[RegionPhase] = TransitionTable(
    RegionPhase,
    {
        RegionPhase.WAITING: {RegionPhase.RESETTING, RegionPhase.FAILED},
        RegionPhase.RUNNING: {RegionPhase.DRAINING, RegionPhase.RESETTING, RegionPhase.WAITING, RegionPhase.FAILED},
        RegionPhase.DRAINING: {
            RegionPhase.CHECKPOINTING,
            RegionPhase.RESETTING,
            RegionPhase.WAITING,
            RegionPhase.FAILED,
        },
        RegionPhase.CHECKPOINTING: {
            RegionPhase.RUNNING,
            RegionPhase.RESETTING,
            RegionPhase.WAITING,
            RegionPhase.FAILED,
        },
        RegionPhase.RESETTING: {
            RegionPhase.RUNNING,
            RegionPhase.RESETTING,
            RegionPhase.BACKOFF,
            RegionPhase.WAITING,
            RegionPhase.FAILED,
        },
        RegionPhase.BACKOFF: {RegionPhase.RUNNING, RegionPhase.RESETTING, RegionPhase.WAITING, RegionPhase.FAILED},
        RegionPhase.FAILED: set(),
    },
)

#: The answer each awaiting phase expects: the command it sent (a RESET_TO_INITIAL
#: is answered as ``reset`` too).
AWAITED: dict[RegionPhase, CommandKind] = {
    RegionPhase.DRAINING: CommandKind.DRAIN,
    RegionPhase.CHECKPOINTING: CommandKind.CHECKPOINT,
    RegionPhase.RESETTING: CommandKind.RESET,
}


Send = Callable[[str, RegionCommand], None]
Persist = Callable[[dict[str, Any]], None]
OnEvent = Callable[[RegionEvent], None]


# ---------------------------------------------------------------------- the core
class RegionCore:
    """One region's controller state (see the module docstring). Not thread-safe:
    the coordinator's loop thread is its only caller."""

    def __init__(
        self,
        config: RegionConfig,
        send: Send,
        persist: Persist,
        doc: dict[str, Any] | None = None,
        on_event: OnEvent | None = None,
    ) -> None:
        self.config = config
        self._send = send
        self._persist = persist
        self._on_event: OnEvent = on_event or (lambda event: None)
        # The phase (TRANSITIONS): changed only through _goto, and by _load
        # before any input.
        self._phase = StateMachine(f"region {config.name}", TRANSITIONS, RegionPhase.WAITING, log)
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
        self.first_join_at: float | None = None
        # the coordinator resolves the transactions itself: no round starts (hold_start)
        self._start_held = False
        #: Pacing reads the member table (written here only); the cycle drive holds the
        #: seqs and the running cycle, the reset drive the attempt counters and the
        #: hold; each decides its round's commands.
        self.pacing = CheckpointPacing(config, self.members)
        self.cycles = CycleDrive(config, self.pacing, self.checkpoints)
        self.resets = ResetDrive(config, self.pacing, self.checkpoints)
        if doc:
            self._load(doc)

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
        """Give up on the region (terminal, step 6): the only way to FAILED.

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

    # ------------------------------------------------------------------ inputs
    def join(
        self,
        name: str,
        identity: bytes,
        incarnation: str,
        now: float,
        pid: int | None = None,
        host: str | None = None,
        replace: bool = False,
    ) -> RegionJoinReply:
        """A member joins. Whether it may, under ``name``, is the member table's
        answer (``coordinator/region/membership.py``): a retry is answered again, a
        refusal (the name's holder is alive) names the holder, a restarted
        process (new incarnation) is told its predecessor. A new or restarted
        member then changes the membership (`join_step`): a reset (or, WAITING,
        the start once the expected members are back)."""
        admission = self.members.admit(
            name,
            identity,
            incarnation,
            now,
            pid=pid,
            host=host,
            replace=replace,
            region_failed=self.phase is RegionPhase.FAILED,
            eviction_blocked=lambda: self.pacing.eviction_blocked(name, now),
        )
        if admission.kind is JoinKind.RETRY:
            return self._join_reply(admission.predecessor)
        if admission.kind is JoinKind.REFUSED and admission.holder is not None:  # a refusal names the holder
            return self._join_reply(refused=JoinRefusal(f"member name {name!r} is in use", admission.holder))
        predecessor = admission.predecessor
        restarted = admission.kind is JoinKind.RESTART
        if self.first_join_at is None:
            self.first_join_at = now
        why = f"member {name} restarted (new incarnation)" if restarted else f"member {name} joined"
        log.info("region %s: %s (pid %s); members %s", self.config.name, why, pid, sorted(self.members))
        self._on_event(MemberJoined(name, pid))
        self._save()
        step = join_step(self.phase, self.pacing.all_cooperative())
        if step is JoinStep.START:
            self._maybe_start(now)
        elif step is JoinStep.AFTER_CYCLE:
            self._join_after_cycle(name, restarted, now)
        elif step is JoinStep.RESET:
            self._start_reset(why, ResetKind.MEMBERSHIP, now, restart=True, rejoin=True)
        return self._join_reply(predecessor)

    def _join_after_cycle(self, name: str, restarted: bool, now: float) -> None:
        """`JoinStep.AFTER_CYCLE`: a cooperative join during a cycle: the cycle completes without
        it, then the region resets for it (``CycleRound.member_joined``)."""
        without_predecessor = self.cycles.round.member_joined(name, restarted)
        if without_predecessor:
            self.waiting.discard(name)
        log.info(
            "region %s: member %s joined during checkpoint %s (%s); every member is cooperative: the "
            "checkpoint goes on%s, then the region resets for it",
            self.config.name,
            name,
            self.cycles.seq,
            self.phase.value,
            " without its predecessor" if without_predecessor else "",
        )
        if not self.waiting:
            self._phase_answered(now)

    def _join_reply(
        self, predecessor: Predecessor | None = None, refused: JoinRefusal | None = None
    ) -> RegionJoinReply:
        return RegionJoinReply(
            self.config.name,
            self.phase,
            self.checkpoints.last_consistent,
            self.config,
            predecessor,
            self.failed_reason if self.phase is RegionPhase.FAILED else None,
            refused,
        )

    def leave(self, name: str, now: float, reason: str = "left") -> None:
        """Member ``name`` leaves (``reason`` "left": gracefully; else why it was
        dropped): removed from the table, then `leave_step`."""
        if not self.members.remove(name):
            return
        log.info("region %s: member %s %s; members %s", self.config.name, name, reason, sorted(self.members))
        self._on_event(MemberLeft(name, reason))
        self._save()
        graceful = reason == "left"
        step = leave_step(
            self.phase,
            name,
            graceful=graceful,
            members_left=bool(self.members),
            all_cooperative=self.pacing.all_cooperative(),
            cycle=self.cycles.round,
            waiting=self.waiting,
        )
        if step is LeaveStep.WAIT:
            # Nobody left to answer: wait for joins. A region that is already
            # WAITING stays so (its grace restarts at the next first join).
            self.waiting.clear()
            self.cycles.round.take_joiners()
            self.first_join_at = None
            if self.phase is not RegionPhase.WAITING:
                self._goto(RegionPhase.WAITING, "no members left")
        elif step is LeaveStep.ROUND_GOES_ON:
            self.waiting.discard(name)
            self._maybe_reset_done(now)
        elif step is LeaveStep.CYCLE_GOES_ON:
            log.info(
                "region %s: member %s left in %s; every member is cooperative: no reset",
                self.config.name,
                name,
                self.phase.value,
            )
            self.cycles.round.member_left(name)
            if name in self.waiting:
                self.waiting.discard(name)
                if not self.waiting:
                    self._phase_answered(now)
        elif step is LeaveStep.RESET:
            # A graceful leaver's consumer has left the Kafka group: the others rejoin
            # now (rejoin hint) instead of at their next Kafka heartbeat.
            self._start_reset(
                f"member {name} {reason}", ResetKind.MEMBERSHIP if graceful else ResetKind.FAILURE, now, rejoin=graceful
            )

    def ack(
        self,
        name: str,
        command: CommandKind,
        seq: int | None,
        attempt: int | None,
        ok: bool,
        error: str | None,
        now: float,
        offsets: list[Any] | None = None,
        rebalance: bool = False,
        transactions: Transactions | None = None,
    ) -> None:
        """A member's answer to ``command`` (``AWAITED``: the phase's own; a reset
        answer names its attempt, a cycle answer its seq; any other is stale). A
        checkpoint answer carries the member's ``offsets`` (claims) and its Kafka
        ``transactions`` (None: no transactional sink)."""
        if not self.members.touch(name, now):
            log.info("region %s: ignoring %s answer of unknown member %s", self.config.name, command.value, name)
            return
        if self.phase is RegionPhase.RESETTING:
            expected = command is CommandKind.RESET and attempt == self.resets.attempt
        else:
            expected = command is AWAITED.get(self.phase) and seq == self.cycles.seq
        if not expected or name not in self.waiting:
            log.debug(
                "region %s: stale %s answer from %s (seq %s attempt %s) in %s",
                self.config.name,
                command.value,
                name,
                seq,
                attempt,
                self.phase.value,
            )
            return
        if not ok:
            what = f"member {name} failed {command.value}(seq={seq}, attempt={attempt}): {error}"
            log.warning("region %s: %s", self.config.name, what)
            if command is not CommandKind.RESET:
                self.cycles.failed()
            # A rebalance (commit refused while the group rebalances) is not a failure.
            self._start_reset(what, ResetKind.FORCE if rebalance else ResetKind.FAILURE, now, restart=True)
            return
        self.waiting.discard(name)
        if command is CommandKind.CHECKPOINT:
            self.cycles.round.checkpoint_answered(name, offsets, transactions)
        if self.waiting:
            return
        self._phase_answered(now)

    def _phase_answered(self, now: float) -> None:
        """Every awaited member answered the current phase (or left): the next step."""
        if self.phase is RegionPhase.DRAINING:
            self._start_checkpoint(now)
        elif self.phase is RegionPhase.CHECKPOINTING:
            self._complete_checkpoint(now)
        else:
            self._maybe_reset_done(now)

    def request_reset(self, name: str, force: bool, reason: str, now: float) -> None:
        """A member asks for a reset. During a reset round, requests do not stack,
        except from a member that already answered this round: what it asks about
        (a revocation, a pipeline error) happened after its reset, so the round
        restarts with a new attempt (dropping it left the member waiting for a
        reset until its next drain failed). During a backoff hold every member has
        answered: a request starts a new round (a forced one ends the hold and the
        failure streak, a failure is the streak's next one)."""
        if name not in self.members:
            log.info("region %s: reset request of unknown member %s ignored (%s)", self.config.name, name, reason)
            return
        kind = ResetKind.FORCE if force else ResetKind.FAILURE
        why = f"member {name} requested a {'forced ' if force else ''}reset: {reason}"
        if self.phase is RegionPhase.RESETTING and name not in self.waiting:
            self._start_reset(f"{why} (after its answer to attempt {self.resets.attempt})", kind, now, restart=True)
            return
        if force and self.phase is RegionPhase.RESETTING:
            self.resets.forced(now)  # force clears the counter even when it does not stack
        self._start_reset(why, kind, now)

    def trigger(self, name: str, now: float) -> RegionTriggerReply:
        """Operator-driven mode: a member asks for a checkpoint now. The answer says
        at once whether a drain of that member follows (the member's source waits
        for it only then): RUNNING starts a cycle; a cycle that is draining and
        still waits for this member serves it; otherwise not now, with the reason:
        the member drained already in the running cycle, which covers what it
        submitted; or the region is checkpointing, resetting, waiting or FAILED."""
        if self.phase is RegionPhase.RUNNING:
            self._start_cycle(now, f"trigger from {name}")
            return RegionTriggerReply(self.phase, TriggerAnswer.STARTED, f"checkpoint {self.cycles.seq} started")
        if self.phase is RegionPhase.DRAINING and name in self.waiting:
            return RegionTriggerReply(
                self.phase, TriggerAnswer.DRAIN_COMING, f"checkpoint {self.cycles.seq} is draining"
            )
        if self.phase in (RegionPhase.DRAINING, RegionPhase.CHECKPOINTING):
            why = f"checkpoint {self.cycles.seq} is running and {name} already drained for it"
        else:
            why = f"the region is {self.phase.value}; trigger again after the next RESUME"
        log.debug("region %s: trigger from %s not served: %s", self.config.name, name, why)
        return RegionTriggerReply(self.phase, TriggerAnswer.NOT_NOW, why)

    def tick(self, now: float) -> None:
        if self.phase is RegionPhase.FAILED:
            return
        for name, silent_s in self.members.silent(now):
            self.leave(name, now, reason=f"stopped heartbeating ({silent_s:.1f}s)")
        if self.phase is RegionPhase.WAITING:
            self._maybe_start(now)
        elif self.phase in AWAITED:
            if self.deadline is not None and now > self.deadline:
                late = sorted(self.waiting)
                why = f"members {late} did not answer {AWAITED[self.phase].value} in time"
                log.warning("region %s: %s", self.config.name, why)
                if self.phase is not RegionPhase.RESETTING:
                    self.cycles.failed()
                self._start_reset(why, ResetKind.FAILURE, now, restart=True)
        elif self.phase is RegionPhase.BACKOFF:
            if self.resets.hold.left(now) is None:
                self._resume_after_reset(now, f"backoff over after reset attempt {self.resets.attempt}")
        elif self.phase is RegionPhase.RUNNING and self.cycles.due(now):
            self._start_cycle(now, "period", due=self.cycles.next_at)

    @property
    def wake_at(self) -> float | None:
        """The next time `tick` has a timed step to take without any input: the
        periodic drain due (RUNNING) or the end of a backoff hold (BACKOFF); None
        for none (phase deadlines and member silence are checked at every tick)."""
        if self.phase is RegionPhase.RUNNING:
            return self.cycles.wake_at
        if self.phase is RegionPhase.BACKOFF:
            return self.resets.hold.until
        return None

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

    def _send_all(self, commands: Iterable[tuple[str, RegionCommand]]) -> None:
        for name, command in commands:
            self._send(name, command)

    # ------------------------------------------------------------------ the reset round (reset.py's steps applied)
    def _maybe_start(self, now: float) -> None:
        """WAITING: the first reset once the members are back (`start_due`), unless the
        coordinator is resolving the region's transactions itself (`hold_start`)."""
        if self._start_held:
            return
        if start_due(self.members, self.known_members, self.config, self.first_join_at, now):
            self._start_reset(f"{len(self.members)} member(s) present", ResetKind.MEMBERSHIP, now)

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

    # ------------------------------------------------------------------ transactions resolved by the coordinator
    def hold_start(self, held: bool) -> None:
        """While the coordinator resolves the region's transactions itself (the protocol's
        "no live member" steps, ``coordinator/protocol/region/transactions.py``), a WAITING
        region does not start: no reset round, so no RESUME, so no member's sink opens an
        interval on an id the coordinator is fencing."""
        self._start_held = held

    def resolved_elsewhere(self, resolved: tuple[Resolve, ...], failed: Mapping[str, tuple[Resolve, str]]) -> None:
        """The coordinator resolved ``resolved`` itself (``failed``: member -> (entry, why)):
        each entry still recorded as it was is dropped once, durably (``ResolveEntries.resolved_elsewhere``)."""
        dropped = self.checkpoints.transactions.resolved_elsewhere(resolved, failed)
        if dropped:
            log.info(
                "region %s: the coordinator resolved the Kafka transactions of %s (no member was live)",
                self.config.name,
                dropped,
            )
            self._save()

    # ------------------------------------------------------------------ own checkpoints
    def leave_reply(self, name: str, incarnation: str) -> int | None:
        """The checkpoint whose sealed intervals a gracefully leaving process may
        publish before it exits: its own (``ConsistentCheckpoints.own``) while it
        is the current incarnation of a member; None for a process the region
        already dropped (what it sealed since may belong to a checkpoint that
        never completed; its next process is reset to its own checkpoint instead)."""
        m = self.members.get(name)
        if m is None or m.incarnation != incarnation:
            return None
        return self.checkpoints.own(name)

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


__all__ = ["AWAITED", "TRANSITIONS", "RegionCore"]
