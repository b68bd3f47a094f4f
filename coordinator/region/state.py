"""The region controller's state machine, without I/O (driven by ``coordinator/region/controller.py``).

A :class:`RegionCore` holds one consistent region: its config, its members,
its phase and the durable facts (last consistent checkpoint, next sequence id,
next reset attempt). Inputs are method calls (``join``, ``heartbeat``, ``ack``,
``request_reset``, ``trigger``, ``leave``, ``tick``); outputs go through two
callbacks: ``send(member, command)`` (a command pushed to a member,
``coordinator/protocol/region/commands.py``) and
``persist(doc)`` (the durable document; the service makes it durable before any
command queued after it is sent).

The checkpoint cycle (DRAIN, CHECKPOINT, the continuity check, RESUME, RETIRE)
is numbered in ``coordinator/region/cycle_drive.py``, whose decisions this core
applies (the transitions, the awaited members, persistence and sends).

A member that does not answer within the drain timeout, an error answer (one
caused by a group rebalance forces the reset instead), a member that stops heartbeating (``member_timeout_s``) or leaves, or a new
member fails the cycle and starts a reset. When every member is cooperative, a
graceful leave of a member that has not answered the cycle's checkpoint and a
join (new or restarted member) do not: the cycle goes on without the leaver,
and completes without the joiner before its reset (``CycleDrive.joined``).

The member table (joins, heartbeats, removals): ``coordinator/region/members.py``;
who may join under a member name: ``coordinator/region/admission.py``; what a
join or a leave costs (a reset, the cycle going on, waiting):
``coordinator/region/membership.py``; what a cycle sends and when it completes:
``coordinator/region/cycle_drive.py``, with the running cycle's bookkeeping
(its members, answers, joiners) in ``coordinator/region/cycle.py``; the last consistent checkpoint and each
member's own: ``coordinator/region/checkpoints.py``; the reset round's
counters: ``coordinator/region/reset.py``, and what a round sends and when it
ends: ``coordinator/region/reset_round.py`` (this core applies its decisions:
the transitions, the awaited members, persistence and sends), with the hold
after a repeated failure (phase BACKOFF, ``coordinator/region/backoff.py``);
the pacing of checkpoints after
rebalances: ``coordinator/region/pacing.py``; the fixed-rate grid of periodic
drains: ``coordinator/region/cadence.py``; the durable document:
``coordinator/region/document.py``; the status reply: ``coordinator/region/status.py``.

Coordinator restart: the durable document brings back the config, the last
consistent checkpoint, the counters and the member names; the phase starts in
WAITING. Members notice (their heartbeats get NOT_REGISTERED), join again, and
once the expected members are back (or ``join_grace_s`` after the first
join) the region resets to its last consistent checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from coordinator.protocol.common.transitions import IllegalTransition, StateMachine
from coordinator.protocol.region.commands import Failed, RegionCommand, Resume
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.kafka_report import KafkaReport
from coordinator.region.admission import JoinKind
from coordinator.region.checkpoints import ConsistentCheckpoints
from coordinator.region.cycle_drive import ContinuityFailed, CycleDrive, CycleStep
from coordinator.region.document import RegionDocument
from coordinator.region.members import MemberTable
from coordinator.region.membership import JoinStep, LeaveStep, join_step, leave_step, start_due
from coordinator.region.model import (  # Phase, RegionConfig are re-exported
    TRANSITIONS,
    MemberInfo,
    Phase,
    ResetKind,
    TriggerAnswer,
    TriggerReply,
)
from coordinator.region.reset_round import ResetDrive, RoundRefused
from coordinator.region.status import RegionStatus
from coordinator.region.timing import CheckpointPacing

log = logging.getLogger(__name__)

Send = Callable[[str, RegionCommand], None]
Persist = Callable[[dict[str, Any]], None]


class RegionCore:
    """One region's controller state (see the module docstring). Not thread-safe:
    the coordinator's loop thread is its only caller."""

    def __init__(self, config: RegionConfig, send: Send, persist: Persist, doc: dict | None = None,
                 on_event: Callable[[str, dict], None] | None = None) -> None:
        self.config = config
        self._send = send
        self._persist = persist
        self._on_event = on_event or (lambda kind, info: None)
        # The phase (model.TRANSITIONS): changed only through _goto, and by _load
        # before any input.
        self._phase = StateMachine(f"region {config.name}", TRANSITIONS, Phase.WAITING, log)
        # The member table (members.py): changed only by this core's inputs (join,
        # heartbeat, ack, leave); its records are read by the pacing.
        self._members = MemberTable(config.name, config.member_timeout_s)
        # The last consistent checkpoint, its members and offsets, and the absent
        # members' own checkpoints (checkpoints.py).
        self._checkpoints = ConsistentCheckpoints()
        self.known_members: list[str] = []  # members at the last persist (for restarts)
        self.failed_reason: str | None = None
        # FAILED over an unusable stored document: never overwrite it (fail(persist=False))
        self._keep_stored = False
        # the running round (cycle or reset): the members awaited and its deadline
        self.waiting: set[str] = set()
        self.deadline: float | None = None
        self.first_join_at: float | None = None
        # Pacing reads the member table (written here only); the cycle drive holds the
        # seqs and the running cycle (cycle_drive.py), the reset drive the attempt
        # counters (reset_round.py); each decides its round's commands.
        self._pacing = CheckpointPacing(config, self._members.members)
        self._cycles = CycleDrive(config, self._pacing, self._checkpoints)
        self._resets = ResetDrive(config, self._pacing, self._checkpoints)
        if doc:
            self._load(doc)

    # ------------------------------------------------------------------ durable document
    def _load(self, doc: dict[str, Any]) -> None:
        stored = RegionDocument.from_dict(doc, self.config.name)
        self._checkpoints.restore(stored)
        self._cycles.restore(stored.next_seq)
        self._resets.restore(stored)
        self.known_members = stored.members
        if stored.failed:
            self._phase.to(Phase.FAILED, "the stored document says FAILED")
            self.failed_reason = stored.failed_reason or ("failed before the coordinator restarted "
                                                          "(the stored document has no reason)")

    def document(self) -> dict[str, Any]:
        """The durable document (`coordinator.region.document`) as it stands now."""
        return RegionDocument(
            config=self.config.to_dict(),
            last_consistent=self.last_consistent,
            next_seq=self.next_seq,
            next_attempt=self.next_attempt,
            consecutive_resets=self.consecutive_resets,
            checkpoint_members=self.checkpoint_members,
            checkpoint_offsets=self.checkpoint_offsets,
            absent_checkpoints=self._checkpoints.absent.seqs,
            members=sorted(self.members) if self.members else self.known_members,
            failed=self.phase is Phase.FAILED,
            failed_reason=self.failed_reason,
            backoff_s=self._resets.backoff_s,
            failure_streak=self.failure_streak,
        ).to_dict()

    def _save(self) -> None:
        if self._keep_stored:
            return
        self._persist(self.document())

    # ------------------------------------------------------------------ views (members.py, checkpoints.py)
    @property
    def members(self) -> dict[str, MemberInfo]:
        """The member table's records by name (read-only for callers: inputs change it)."""
        return self._members.members

    @property
    def last_consistent(self) -> int | None:
        return self._checkpoints.last_consistent

    @property
    def checkpoint_members(self) -> list[str]:
        return self._checkpoints.members

    @property
    def checkpoint_offsets(self) -> list[list]:
        return self._checkpoints.offsets

    # ------------------------------------------------------------------ cycle counters (cycle_drive.py)
    @property
    def seq(self) -> int | None:
        """Seq of the running (or last) cycle."""
        return self._cycles.seq

    @property
    def next_seq(self) -> int:
        return self._cycles.next_seq

    @property
    def next_cycle_at(self) -> float | None:
        """When the next periodic drain is due."""
        return self._cycles.next_at

    @property
    def checkpoints(self) -> int:
        """Checkpoints completed (status and metrics)."""
        return self._cycles.completed

    @property
    def failed_cycles(self) -> int:
        return self._cycles.failures

    # ------------------------------------------------------------------ reset counters (reset_round.py, reset.py)
    @property
    def attempt(self) -> int | None:
        """Attempt of the running (or last) reset round."""
        return self._resets.attempt

    @property
    def next_attempt(self) -> int:
        return self._resets.next_attempt

    @property
    def consecutive_resets(self) -> int:
        return self._resets.consecutive

    @property
    def failure_streak(self) -> int:
        """Failure resets in a row, each soon after the previous (backoff.py step 1)."""
        return self._resets.streak

    @property
    def resets(self) -> int:
        """Reset rounds started (status and metrics)."""
        return self._resets.rounds

    # ------------------------------------------------------------------ transitions
    @property
    def phase(self) -> Phase:
        return self._phase.state

    def _goto(self, phase: Phase, why: str) -> None:
        """The one way to change the phase once running: checked against the
        table and logged (the machine), then reported as an event."""
        if phase is Phase.FAILED and not self.failed_reason:
            # Invariant: a FAILED region always says why (status, members, runner).
            raise IllegalTransition(f"region {self.config.name}: FAILED without a reason ({why})")
        self._phase.to(phase, why)
        self._on_event("phase", {"phase": phase.value, "why": why})

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
        if self.phase is Phase.FAILED:
            log.info("region %s: already FAILED (%s); ignoring another cause: %s", self.config.name,
                     self.failed_reason, reason)
            return
        self.failed_reason = reason or "failed (no reason given)"
        self._goto(Phase.FAILED, self.failed_reason)
        self.waiting = set()
        self.deadline = None
        self._keep_stored = not persist
        self._save()
        self._on_event("failed", {"reason": self.failed_reason})
        self._broadcast(self.members, Failed(self.failed_reason))

    def _broadcast(self, names, command: RegionCommand) -> None:
        for name in sorted(names):
            self._send(name, command)

    # ------------------------------------------------------------------ inputs
    def join(self, name: str, identity: bytes, incarnation: str, now: float, pid: int | None = None,
             host: str | None = None, replace: bool = False) -> dict[str, Any]:
        """A member joins. Whether it may, under ``name``, is
        ``coordinator/region/admission.py``'s answer, applied to the member table
        (``coordinator/region/members.py``): a retry is answered again, a
        refusal (the name's holder is alive) names the holder, a restarted
        process (new incarnation) is told its predecessor. A new or restarted
        member then changes the membership: a reset (or, WAITING, the start once
        the expected members are back)."""
        admission = self._members.admit(name, identity, incarnation, now, pid=pid, host=host, replace=replace,
                                        region_failed=self.phase is Phase.FAILED,
                                        eviction_blocked=lambda: self._pacing.eviction_blocked(name, now))
        if admission.kind is JoinKind.RETRY:
            return self._join_reply(name, admission.predecessor)
        if admission.kind is JoinKind.REFUSED:
            return {**self._join_reply(name), "refused": f"member name {name!r} is in use", "holder": admission.holder}
        predecessor = admission.predecessor
        restarted = admission.kind is JoinKind.RESTART
        if self.first_join_at is None:
            self.first_join_at = now
        why = f"member {name} restarted (new incarnation)" if restarted else f"member {name} joined"
        log.info("region %s: %s (pid %s); members %s", self.config.name, why, pid, sorted(self.members))
        self._on_event("join", {"member": name, "pid": pid})
        self._save()
        step = join_step(self.phase, self._pacing.all_cooperative())
        if step is JoinStep.START:
            self._maybe_start(now)
        elif step is JoinStep.AFTER_CYCLE:
            self._join_after_cycle(name, restarted, now)
        elif step is JoinStep.RESET:
            self._start_reset(why, ResetKind.MEMBERSHIP, now, restart=True, rejoin=True)
        return self._join_reply(name, predecessor)

    def _join_after_cycle(self, name: str, restarted: bool, now: float) -> None:
        """A cooperative join during a cycle (membership.py step 1c): the cycle
        completes without it, then the region resets for it (``CycleDrive.joined``)."""
        without_predecessor = self._cycles.joined(name, restarted)
        if without_predecessor:
            self.waiting.discard(name)
        log.info("region %s: member %s joined during checkpoint %s (%s); every member is cooperative: the "
                 "checkpoint goes on%s, then the region resets for it", self.config.name, name, self.seq,
                 self.phase.value, " without its predecessor" if without_predecessor else "")
        if not self.waiting:
            self._phase_answered(now)

    def _join_reply(self, name: str, predecessor: dict | None = None) -> dict[str, Any]:
        reply = {"region": self.config.name, "phase": self.phase.value, "last_consistent": self.last_consistent,
                 "config": self.config.to_dict(), "predecessor": predecessor}
        if self.phase is Phase.FAILED:
            reply["failed_reason"] = self.failed_reason
        return reply

    def heartbeat(self, name: str, identity: bytes, incarnation: str, now: float,
                  kafka: KafkaReport | None = None, kafka_invalid: str | None = None) -> bool:
        """The member table's step 2 (``coordinator/region/members.py``).
        False when the member is unknown (it must join again). ``kafka``: the
        member's Kafka group report, kept for pacing checkpoints
        (``coordinator/region/pacing.py``) and for its successor's join.
        ``kafka_invalid``: why the heartbeat's report was ignored: the member then
        counts as not reporting (its last report is dropped), logged when its
        reports turn invalid and when they are valid again
        (``coordinator/protocol/region/kafka_report.py``, step 3)."""
        return self._members.heartbeat(name, identity, incarnation, now, kafka, kafka_invalid)

    def leave(self, name: str, now: float, reason: str = "left") -> None:
        """Member ``name`` leaves (``reason`` "left": gracefully; else why it was
        dropped): removed from the table, then the step of membership.py step 2."""
        if not self._members.remove(name):
            return
        log.info("region %s: member %s %s; members %s", self.config.name, name, reason, sorted(self.members))
        self._on_event("leave", {"member": name, "reason": reason})
        self._save()
        graceful = reason == "left"
        step = leave_step(self.phase, name, graceful=graceful, members_left=bool(self.members),
                          all_cooperative=self._pacing.all_cooperative(), cycle=self._cycles.bookkeeping,
                          waiting=self.waiting)
        if step is LeaveStep.WAIT:
            # Nobody left to answer: wait for joins. A region that is already
            # WAITING stays so (its grace restarts at the next first join).
            self.waiting.clear()
            self._cycles.take_joiners()
            self.first_join_at = None
            if self.phase is not Phase.WAITING:
                self._goto(Phase.WAITING, "no members left")
        elif step is LeaveStep.ROUND_GOES_ON:
            self.waiting.discard(name)
            self._maybe_reset_done(now)
        elif step is LeaveStep.CYCLE_GOES_ON:
            log.info("region %s: member %s left in %s; every member is cooperative: no reset",
                     self.config.name, name, self.phase.value)
            self._cycles.left(name)
            if name in self.waiting:
                self.waiting.discard(name)
                if not self.waiting:
                    self._phase_answered(now)
        elif step is LeaveStep.RESET:
            # A graceful leaver's consumer has left the Kafka group: the others rejoin
            # now (rejoin hint) instead of at their next Kafka heartbeat.
            self._start_reset(f"member {name} {reason}", ResetKind.MEMBERSHIP if graceful else ResetKind.FAILURE,
                              now, rejoin=graceful)

    def ack(self, name: str, command: str, seq: int | None, attempt: int | None, ok: bool,
            error: str | None, now: float, offsets: list | None = None, rebalance: bool = False) -> None:
        if not self._members.touch(name, now):
            log.info("region %s: ignoring %s answer of unknown member %s", self.config.name, command, name)
            return
        if self.phase is Phase.RESETTING:  # a reset answer names its attempt
            expected = command == "reset" and attempt == self.attempt
        else:
            expected = self._cycles.expects(self.phase, command, seq)
        if not expected or name not in self.waiting:
            log.debug("region %s: stale %s answer from %s (seq %s attempt %s) in %s",
                      self.config.name, command, name, seq, attempt, self.phase.value)
            return
        if not ok:
            what = f"member {name} failed {command}(seq={seq}, attempt={attempt}): {error}"
            log.warning("region %s: %s", self.config.name, what)
            if command != "reset":
                self._cycles.failed()
            # A rebalance (commit refused while the group rebalances) is not a failure.
            self._start_reset(what, ResetKind.FORCE if rebalance else ResetKind.FAILURE, now, restart=True)
            return
        self.waiting.discard(name)
        if command == "checkpoint":
            self._cycles.answered(name, offsets)
        if self.waiting:
            return
        self._phase_answered(now)

    def _phase_answered(self, now: float) -> None:
        """Every awaited member answered the current phase (or left): the next step."""
        if self.phase is Phase.DRAINING:
            self._start_checkpoint(now)
        elif self.phase is Phase.CHECKPOINTING:
            self._complete_checkpoint(now)
        else:
            self._maybe_reset_done(now)

    def request_reset(self, name: str, force: bool, reason: str, now: float) -> None:
        """A member asks for a reset. During a reset round, requests do not stack,
        except from a member that already answered this round: what it asks about
        (a revocation, a pipeline error) happened after its reset, so the round
        restarts with a new attempt (dropping it left the member waiting for a
        reset until its next drain failed). During a backoff hold every member has
        answered: a request starts a new round (backoff.py step 3: a forced one
        ends the hold and the failure streak, a failure is the streak's next one)."""
        if name not in self.members:
            log.info("region %s: reset request of unknown member %s ignored (%s)", self.config.name, name, reason)
            return
        kind = ResetKind.FORCE if force else ResetKind.FAILURE
        why = f"member {name} requested a {'forced ' if force else ''}reset: {reason}"
        if self.phase is Phase.RESETTING and name not in self.waiting:
            self._start_reset(f"{why} (after its answer to attempt {self.attempt})", kind, now, restart=True)
            return
        if force and self.phase is Phase.RESETTING:
            self._resets.forced(now)  # force clears the counter even when it does not stack
        self._start_reset(why, kind, now)

    def trigger(self, name: str, now: float) -> TriggerReply:
        """Operator-driven mode: a member asks for a checkpoint now. The answer says
        at once whether a drain of that member follows (the member's source waits
        for it only then): RUNNING starts a cycle; a cycle that is draining and
        still waits for this member serves it; otherwise (the member drained
        already in the running cycle, which covers what it submitted; the region
        is checkpointing, resetting, waiting or FAILED) not now, with the reason
        (``CycleDrive.not_now``)."""
        if self.phase is Phase.RUNNING:
            self._start_cycle(now, f"trigger from {name}")
            return TriggerReply(TriggerAnswer.STARTED, f"checkpoint {self.seq} started")
        if self.phase is Phase.DRAINING and name in self.waiting:
            return TriggerReply(TriggerAnswer.DRAIN_COMING, f"checkpoint {self.seq} is draining")
        return self._cycles.not_now(self.phase, name)

    def tick(self, now: float) -> None:
        if self.phase is Phase.FAILED:
            return
        for name, silent_s in self._members.silent(now):
            self.leave(name, now, reason=f"stopped heartbeating ({silent_s:.1f}s)")
        if self.phase is Phase.WAITING:
            self._maybe_start(now)
        elif self.phase in (Phase.DRAINING, Phase.CHECKPOINTING, Phase.RESETTING):
            if self.deadline is not None and now > self.deadline:
                late = sorted(self.waiting)
                what = {Phase.DRAINING: "drain", Phase.CHECKPOINTING: "checkpoint", Phase.RESETTING: "reset"}[self.phase]
                why = f"members {late} did not answer {what} in time"
                log.warning("region %s: %s", self.config.name, why)
                if self.phase is not Phase.RESETTING:
                    self._cycles.failed()
                self._start_reset(why, ResetKind.FAILURE, now, restart=True)
        elif self.phase is Phase.BACKOFF:
            if self._resets.hold_left(now) is None:
                self._resume_after_reset(now, f"backoff over after reset attempt {self.attempt}")
        elif self.phase is Phase.RUNNING and self._cycles.due(now):
            self._start_cycle(now, "period", due=self.next_cycle_at)

    @property
    def wake_at(self) -> float | None:
        """The next time `tick` has a timed step to take without any input: the
        periodic drain due (RUNNING) or the end of a backoff hold (BACKOFF); None
        for none (phase deadlines and member silence are checked at every tick)."""
        if self.phase is Phase.RUNNING:
            return self._cycles.wake_at
        if self.phase is Phase.BACKOFF:
            return self._resets.hold_until
        return None

    # ------------------------------------------------------------------ cycle (cycle_drive.py applied)
    def _start_cycle(self, now: float, why: str, due: float | None = None) -> None:
        """cycle_drive.py step 1: the drive's decision; persist the seq, DRAINING, send."""
        step = self._cycles.start(why, self.members, now, due)
        self._save()  # a seq is never reused, even across a coordinator restart
        self._enter_step(step)

    def _start_checkpoint(self, now: float) -> None:
        """cycle_drive.py step 2: every awaited member drained: CHECKPOINTING, send."""
        self._enter_step(self._cycles.drained(now))

    def _enter_step(self, step: CycleStep) -> None:
        self._goto(step.phase, step.why)
        self.waiting = step.members
        self.deadline = step.deadline
        self._send_all(step.commands)

    def _complete_checkpoint(self, now: float) -> None:
        """cycle_drive.py steps 3-5: persisted before anyone is told; joiners' reset next."""
        done = self._cycles.checkpointed(self.members, now)
        if isinstance(done, ContinuityFailed):
            self._continuity_failed(done, now)
            return
        self._log_forgotten(list(done.forgotten))
        if not self._resets.checkpoint_completed(advanced=done.advanced, now=now):
            log.info("region %s: checkpoint %s moved no offset and the last failure is recent: "
                     "%d consecutive reset(s) still count", self.config.name, done.seq, self.consecutive_resets)
        self._save()  # durable before anyone hears of it
        self._goto(Phase.RUNNING, done.why)
        self._on_event("checkpoint", {"seq": done.seq, "checkpoint_ms": round(done.took_ms, 1),
                                      "next_drain_in_s": round(done.next_drain_in_s, 3)})
        self._send_all(done.commands)
        self.waiting = set()
        self.deadline = None
        if done.joiners:
            self._start_reset(f"members {sorted(set(done.joiners))} joined during checkpoint {done.seq}",
                              ResetKind.MEMBERSHIP, now, rejoin=True)

    def _continuity_failed(self, failed: ContinuityFailed, now: float) -> None:
        """cycle_drive.py step 3 refused: nothing of the cycle is persisted or
        announced; a failure reset rewinds every member to the last consistent checkpoint."""
        log.error("region %s: %s; resetting to checkpoint %s", self.config.name, failed.why, self.last_consistent)
        self._on_event("continuity", {"seq": failed.seq, "violations": failed.violations,
                                      "partitions": list(failed.shown)})
        self._start_reset(failed.why, ResetKind.FAILURE, now, restart=True)

    def _send_all(self, commands: Iterable[tuple[str, RegionCommand]]) -> None:
        for name, command in commands:
            self._send(name, command)

    # ------------------------------------------------------------------ reset round (reset_round.py applied)
    def _maybe_start(self, now: float) -> None:
        """WAITING: the first reset once the members are back (membership.py step 1b)."""
        if start_due(self.members, self.known_members, self.config, self.first_join_at, now):
            self._start_reset(f"{len(self.members)} member(s) present", ResetKind.MEMBERSHIP, now)

    def _start_reset(self, why: str, kind: ResetKind, now: float, restart: bool = False,
                     rejoin: bool = False) -> None:
        """reset_round.py steps 1-2: the round's decision is the drive's; its
        transition and I/O are here (persist the attempt, RESETTING, the commands)."""
        if self.phase is Phase.FAILED:
            return
        if self.phase is Phase.RESETTING and not restart:
            log.info("region %s: reset already running (attempt %s); not stacking: %s", self.config.name,
                     self.attempt, why)
            return
        if self._cycles.take_joiners():  # the round brings in the members that joined during a cycle
            rejoin = True
        round_ = self._resets.start(why, kind, self.members, now, rejoin=rejoin)
        if isinstance(round_, RoundRefused):
            self.fail(round_.reason, now)
            return
        self._save()  # the attempt is durable before any member hears of it
        self._goto(Phase.RESETTING, round_.why)
        self._on_event("reset", {"attempt": round_.attempt, "cause": kind.value, "why": why,
                                 "seq": self.last_consistent})
        self.waiting = round_.members
        self.deadline = round_.deadline
        self._send_all(round_.commands)

    def _maybe_reset_done(self, now: float) -> None:
        """reset_round.py step 4: every awaited member answered: RESUME, or BACKOFF
        while the hold of a failure streak lasts (backoff.py step 2)."""
        if self.phase is not Phase.RESETTING or self.waiting:
            return
        done = self._resets.answered(now)
        self.deadline = None
        why = f"reset attempt {done.attempt} complete ({done.took_s * 1000:.0f} ms since the first cause)"
        if done.hold_left_s is None:
            self._resume_after_reset(now, why)
            return
        self._goto(Phase.BACKOFF, f"{why}; RESUME in {done.hold_left_s:.2f}s: a {done.hold_s:.2f}s backoff after "
                                  f"failure {self.failure_streak} of a failure streak ({self.consecutive_resets} "
                                  f"since the last progress, max {self.config.max_consecutive_resets})")
        self._on_event("backoff", {"attempt": done.attempt, "backoff_s": done.hold_s,
                                   "resume_in_s": round(done.hold_left_s, 3), "failure_streak": self.failure_streak})

    def _resume_after_reset(self, now: float, why: str) -> None:
        """reset_round.py step 5: RESUME(complete=None), RUNNING."""
        end = self._resets.resume()
        if end.held_s is not None:
            self._save()  # the hold is over: a restarted coordinator must not hold again (backoff.py step 4)
            why = f"{why}; held {end.held_s:.2f}s (backoff)"
        self._goto(Phase.RUNNING, why)
        self._on_event("resume", {"attempt": end.attempt, "reset_ms": round(end.took_s * 1000, 1),
                                  "next_drain_in_s": round(end.next_drain_in_s, 3),
                                  **({"held_s": end.held_s} if end.held_s is not None else {})})
        self._broadcast(self.members, Resume(None))
        self._cycles.schedule(now + end.next_drain_in_s)
        log.info("region %s: next drain in %.2fs (after a reset)", self.config.name, end.next_drain_in_s)

    # ------------------------------------------------------------------ own checkpoints
    def own_checkpoint(self, name: str) -> int | None:
        """The last completed checkpoint member ``name`` took part in (None: none);
        ``ConsistentCheckpoints.own`` (checkpoints.py) states the invariant it serves."""
        return self._checkpoints.own(name)

    def leave_reply(self, name: str, incarnation: str) -> int | None:
        """The checkpoint whose sealed intervals a gracefully leaving process may
        publish before it exits: its own (``own_checkpoint``) while it is the
        current incarnation of a member; None for a process the region already
        dropped (what it sealed since may belong to a checkpoint that never
        completed; its next process is reset to its own checkpoint instead)."""
        m = self.members.get(name)
        if m is None or m.incarnation != incarnation:
            return None
        return self.own_checkpoint(name)

    def _log_forgotten(self, forgotten: list[tuple[str, int]]) -> None:
        for name, seq in forgotten:
            log.error("region %s: forgetting that absent member %s took part in checkpoint %s (more than %d absent "
                      "members); if a process of that name returns, its pending intervals are deleted, not published",
                      self.config.name, name, seq, self._checkpoints.absent.kept)
            self._on_event("forgotten", {"member": name, "seq": seq})

    # ------------------------------------------------------------------ status (status.py)
    def status(self, now: float) -> dict[str, Any]:
        """The ``region_status`` reply of this region (``RegionStatus``, status.py)."""
        return RegionStatus(
            name=self.config.name, index=self.config.index, phase=self.phase.value, mode=self.config.mode,
            period_s=self.config.period_s, members=self._members.status(now), last_consistent=self.last_consistent,
            seq=self.seq, waiting_for=sorted(self.waiting), reset=self._resets.status(now),
            checkpoints=self.checkpoints, failed_cycles=self.failed_cycles, failed_reason=self.failed_reason,
        ).to_dict()
