"""The region controller's state machine, without I/O (driven by ``coordinator/region/service.py``).

A :class:`RegionCore` holds one consistent region and decides its phase: what
each input changes and which phase follows. Inputs are method calls (``join``,
``ack``, ``request_reset``, ``trigger``, ``leave``, ``tick``; a heartbeat only
updates the member table, ``members.heartbeat``). The region's parts, its
outputs and the order in which a round's step reaches them (persisted, then
the transition, then the commands) are its base's,
``coordinator/region/rounds.py``.

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

Coordinator restart: the durable document brings back the config, the last
consistent checkpoint, the counters and the member names; the phase starts in
WAITING. Members notice (their heartbeats get NOT_REGISTERED) and join again;
the region then starts as in step 1.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from coordinator.protocol.common.transitions import StateMachine, TransitionTable
from coordinator.protocol.region.commands import CommandKind
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.replies import (
    JoinRefusal,
    Predecessor,
    RegionJoinReply,
    RegionPhase,
    RegionTriggerReply,
    TriggerAnswer,
)
from coordinator.protocol.region.transactions import Resolve, Transactions
from coordinator.region.events import MemberJoined, MemberLeft
from coordinator.region.membership import JoinKind, JoinStep, LeaveStep, join_step, leave_step, start_due
from coordinator.region.model import ResetKind
from coordinator.region.rounds import OnEvent, Persist, RegionRounds, Send

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


# ---------------------------------------------------------------------- the core
class RegionCore(RegionRounds):
    """One region's controller (see the module docstring): its inputs; the parts,
    the phase and the rounds' effects are `RegionRounds`'. Not thread-safe: the
    coordinator's loop thread is its only caller."""

    def __init__(
        self,
        config: RegionConfig,
        send: Send,
        persist: Persist,
        doc: dict[str, Any] | None = None,
        on_event: OnEvent | None = None,
    ) -> None:
        super().__init__(
            config,
            send,
            persist,
            on_event or (lambda event: None),
            StateMachine(f"region {config.name}", TRANSITIONS, RegionPhase.WAITING, log),
        )
        self.first_join_at: float | None = None
        # the coordinator resolves the transactions itself: no round starts (hold_start)
        self._start_held = False
        if doc:
            self._load(doc)

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

    def _maybe_start(self, now: float) -> None:
        """WAITING: the first reset once the members are back (`start_due`), unless the
        coordinator is resolving the region's transactions itself (`hold_start`)."""
        if self._start_held:
            return
        if start_due(self.members, self.known_members, self.config, self.first_join_at, now):
            self._start_reset(f"{len(self.members)} member(s) present", ResetKind.MEMBERSHIP, now)

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


__all__ = ["AWAITED", "TRANSITIONS", "RegionCore"]
