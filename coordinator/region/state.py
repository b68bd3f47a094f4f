"""The region controller's state machine, without I/O (driven by ``coordinator/region/controller.py``).

A :class:`RegionCore` holds one consistent region: its config, its members,
its phase and the durable facts (last consistent checkpoint, next sequence id,
next reset attempt). Inputs are method calls (``join``, ``heartbeat``, ``ack``,
``request_reset``, ``trigger``, ``leave``, ``tick``); outputs go through two
callbacks: ``send(member, command)`` (a command pushed to a member,
``coordinator/region/commands.py``) and
``persist(doc)`` (the durable document; the service makes it durable before any
command queued after it is sent).

The checkpoint cycle (periodic: at a fixed rate, a drain every ``period_s``
after the previous drain's start, at least a tenth of the period after a RESUME,
``coordinator/region/cadence.py``; operator-driven: on a member's ``trigger``):

1. RUNNING -> DRAINING: ``seq = next_seq`` (persisted), DRAIN(seq) to every
   member; each blocks its region permit and drains its operators.
2. All drained -> CHECKPOINTING: CHECKPOINT(seq) to every member; each saves
   its operators' checkpoints and answers with its source offsets.
3. All checkpointed: the answers' offsets must continue the last consistent
   checkpoint (``coordinator/region/continuity.py``: per partition, every
   claim starts at its last consistent offset and at most one made progress);
   a violation fails the cycle (a failure reset, nothing persisted). Else
   ``seq`` is the last consistent checkpoint; it is persisted (with the
   members and the partitions' offsets, plus the previous checkpoint's offsets
   of partitions nobody reported) BEFORE anyone is told.
4. RESUME(complete=seq, offsets) to every member: sinks publish the interval,
   sources keep ``offsets`` as the place to start a partition assigned to them
   later, permits are released. Phase RUNNING; the consecutive-reset counter goes to 0.
5. RETIRE(previous consistent seq): members delete older checkpoints.

A member that does not answer within the drain timeout, an error answer (one
caused by a group rebalance forces the reset instead), a member that stops heartbeating (``member_timeout_s``) or leaves, or a new
member fails the cycle and starts a reset. When every member is cooperative, a
graceful leave of a member that has not answered the cycle's checkpoint and a
join (new or restarted member) do not: the cycle goes on without the leaver,
and completes without the joiner before its reset (``_join_after_cycle``).

The reset round's counters: ``coordinator/region/reset.py``; the pacing of
checkpoints after rebalances: ``coordinator/region/pacing.py``; the fixed-rate
grid of periodic drains: ``coordinator/region/cadence.py``; who may join
under a member name: ``coordinator/region/admission.py``.

Coordinator restart: the durable document brings back the config, the last
consistent checkpoint, the counters and the member names; the phase starts in
WAITING. Members notice (their heartbeats get NOT_REGISTERED), join again, and
once the expected members are back (or ``join_grace_s`` after the first
join) the region resets to its last consistent checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from coordinator.region.admission import JoinKind, admit
from coordinator.region.cadence import next_drain, slot_of
from coordinator.region.commands import Checkpoint, Drain, Failed, RegionCommand, Reset, ResetToInitial, Resume, Retire
from coordinator.region.continuity import VIOLATIONS_SHOWN, Continuity, CycleClaims
from coordinator.region.document import RegionDocument
from coordinator.region.kafka_report import KafkaReport
from coordinator.region.model import (  # noqa: F401 (Phase, RegionConfig are re-exported)
    TRANSITIONS,
    AbsentCheckpoints,
    InvalidTransition,
    MemberInfo,
    Phase,
    RegionConfig,
    ResetKind,
    TriggerAnswer,
    TriggerReply,
)
from coordinator.region.pacing import CheckpointPacing
from coordinator.region.reset import ResetRounds

log = logging.getLogger(__name__)

Send = Callable[[str, RegionCommand], None]
Persist = Callable[[dict[str, Any]], None]


class RegionCore:
    """One region's controller state (see the module docstring). Not thread-safe:
    the coordinator's loop thread is its only caller."""

    #: The member table: written only by this core (join, heartbeat, leave); read by
    #: its `CheckpointPacing` (the members' Kafka reports).
    members: dict[str, MemberInfo]

    def __init__(self, config: RegionConfig, send: Send, persist: Persist, doc: dict | None = None,
                 on_event: Callable[[str, dict], None] | None = None) -> None:
        self.config = config
        self._send = send
        self._persist = persist
        self._on_event = on_event or (lambda kind, info: None)
        self.phase = Phase.WAITING
        self.members = {}
        self.last_consistent: int | None = None
        self.next_seq = 1
        self.checkpoint_members: list[str] = []
        self.checkpoint_offsets: list[list] = []
        self.known_members: list[str] = []  # members at the last persist (for restarts)
        # members absent from the last consistent checkpoint: their own one (own_checkpoint)
        self.absent = AbsentCheckpoints()
        self.failed_reason: str | None = None
        # FAILED over an unusable stored document: never overwrite it (fail(persist=False))
        self._keep_stored = False
        # current round
        self.seq: int | None = None  # seq of the running cycle
        self.waiting: set[str] = set()
        self.deadline: float | None = None
        self.next_cycle_at: float | None = None
        self.first_join_at: float | None = None
        # The running cycle's checkpoint answers, checked before it completes (continuity.py).
        self._claims = CycleClaims()
        # The members taking part in the running cycle (its drain's members, less any that
        # left or were replaced by a new incarnation since), those that answered its
        # checkpoint, and the members that joined while it ran (reset once it completes).
        self._cycle_members: set[str] = set()
        self._checkpointed: set[str] = set()
        self._joined_in_cycle: list[str] = []
        self._cycle_start: float | None = None
        self._cycle_slot: float | None = None  # the grid slot of the running cycle's drain (cadence.py)
        # Pacing reads the member table (written here only); the reset rounds hold the attempt counters.
        self._pacing = CheckpointPacing(config, self.members)
        self._resets = ResetRounds(config, self._pacing)
        # counters for status and metrics
        self.checkpoints = 0
        self.failed_cycles = 0
        if doc:
            self._load(doc)

    # ------------------------------------------------------------------ durable document
    def _load(self, doc: dict[str, Any]) -> None:
        stored = RegionDocument.from_dict(doc, self.config.name)
        self.last_consistent = stored.last_consistent
        self.next_seq = stored.next_seq
        self._resets.restore(next_attempt=stored.next_attempt, consecutive=stored.consecutive_resets)
        self.checkpoint_members = stored.checkpoint_members
        self.checkpoint_offsets = stored.checkpoint_offsets
        self.known_members = stored.members
        self.absent = AbsentCheckpoints(stored.absent_checkpoints)
        if stored.failed:
            self.phase = Phase.FAILED
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
            absent_checkpoints=self.absent.seqs,
            members=sorted(self.members) if self.members else self.known_members,
            failed=self.phase is Phase.FAILED,
            failed_reason=self.failed_reason,
        ).to_dict()

    def _save(self) -> None:
        if self._keep_stored:
            return
        self._persist(self.document())

    # ------------------------------------------------------------------ reset counters (ResetRounds)
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
    def resets(self) -> int:
        """Reset rounds started (status and metrics)."""
        return self._resets.rounds

    @property
    def forced_since_checkpoint(self) -> int:
        return self._pacing.forced_since_checkpoint

    # ------------------------------------------------------------------ transitions
    def _goto(self, phase: Phase, why: str) -> None:
        if phase is Phase.FAILED and not self.failed_reason:
            # Invariant: a FAILED region always says why (status, members, runner).
            raise InvalidTransition(f"region {self.config.name!r}: FAILED without a reason ({why})")
        if phase not in TRANSITIONS[self.phase]:
            raise InvalidTransition(f"region {self.config.name!r}: {self.phase.value} -> {phase.value} is not allowed ({why})")
        log.info("region %s: %s -> %s (%s)", self.config.name, self.phase.value, phase.value, why)
        self.phase = phase
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
        ``coordinator/region/admission.py``'s answer: a retry is answered again, a
        refusal (the name's holder is alive) names the holder, a restarted
        process (new incarnation) is told its predecessor. A new or restarted
        member then changes the membership: a reset (or, WAITING, the start once
        the expected members are back)."""
        existing = self.members.get(name)
        admission = admit(existing, incarnation, now, replace=replace, region_failed=self.phase is Phase.FAILED,
                          member_timeout_s=self.config.member_timeout_s,
                          eviction_blocked=lambda: self._pacing.eviction_blocked(name, now))
        if admission.kind is JoinKind.RETRY and existing is not None:
            existing.identity = identity  # a retry, or a reconnect with a new socket
            existing.last_seen = now
            return self._join_reply(name, admission.predecessor)
        if admission.kind is JoinKind.REFUSED and admission.holder is not None:
            holder = admission.holder
            log.info("region %s: member name %s is held by live incarnation %s (pid %s on %s, heard %.2fs ago); "
                     "join of incarnation %s (pid %s on %s) refused", self.config.name, name, holder["incarnation"],
                     holder["pid"], holder["host"], holder["silent_s"], incarnation, pid, host)
            return {**self._join_reply(name), "refused": f"member name {name!r} is in use", "holder": holder}
        predecessor = admission.predecessor
        if admission.withheld and existing is not None:
            log.info("region %s: not asking %s to remove its predecessor's consumer %s from the group (%s); "
                     "the broker's session timeout will", self.config.name, name,
                     existing.kafka.member_id if existing.kafka is not None else None, admission.withheld)
        self.members[name] = MemberInfo(name, identity, incarnation, now, pid, predecessor=predecessor, host=host)
        if self.first_join_at is None:
            self.first_join_at = now
        why = f"member {name} joined" if existing is None else f"member {name} restarted (new incarnation)"
        log.info("region %s: %s (pid %s); members %s", self.config.name, why, pid, sorted(self.members))
        self._on_event("join", {"member": name, "pid": pid})
        self._save()
        if self.phase is Phase.FAILED:
            return self._join_reply(name, predecessor)
        if self.phase is Phase.WAITING:
            self._maybe_start(now)
        elif self._join_after_cycle(name, existing is not None, now):
            pass
        else:
            self._start_reset(why, ResetKind.MEMBERSHIP, now, restart=True, rejoin=True)
        return self._join_reply(name, predecessor)

    def _join_after_cycle(self, name: str, restarted: bool, now: float) -> bool:
        """A member joining (new, or a restart: its predecessor is dead) while a
        cycle drains or checkpoints, when every reporting member is cooperative:
        the cycle completes without it, then the region resets for it
        (docs/region.md, cooperative step 10). Returns False when the join resets at
        once instead (not cooperative, or no cycle in flight).

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
        if self.phase not in (Phase.DRAINING, Phase.CHECKPOINTING) or not self._pacing.all_cooperative():
            return False
        if restarted and name not in self._checkpointed:
            self._cycle_members.discard(name)
            self.waiting.discard(name)
        self._joined_in_cycle.append(name)
        log.info("region %s: member %s joined during checkpoint %s (%s); every member is cooperative: the "
                 "checkpoint goes on%s, then the region resets for it", self.config.name, name, self.seq,
                 self.phase.value, " without its predecessor" if restarted and name not in self._checkpointed else "")
        if not self.waiting:
            self._phase_answered(now)
        return True

    def _join_reply(self, name: str, predecessor: dict | None = None) -> dict[str, Any]:
        reply = {"region": self.config.name, "phase": self.phase.value, "last_consistent": self.last_consistent,
                 "config": self.config.to_dict(), "predecessor": predecessor}
        if self.phase is Phase.FAILED:
            reply["failed_reason"] = self.failed_reason
        return reply

    def heartbeat(self, name: str, identity: bytes, incarnation: str, now: float,
                  kafka: KafkaReport | None = None, kafka_invalid: str | None = None) -> bool:
        """False when the member is unknown (it must join again). ``kafka``: the
        member's Kafka group report, kept for pacing checkpoints
        (``coordinator/region/pacing.py``) and for its successor's join.
        ``kafka_invalid``: why the heartbeat's report was ignored: the member then
        counts as not reporting (its last report is dropped), logged when its
        reports turn invalid and when they are valid again
        (``coordinator/region/kafka_report.py``, step 3)."""
        m = self.members.get(name)
        if m is None or m.incarnation != incarnation:
            return False
        m.identity = identity
        m.last_seen = now
        if kafka_invalid is not None:
            if m.kafka_invalid is None:
                log.warning("region %s: member %s sent an invalid Kafka group report (%s); ignored: it counts as "
                            "not reporting until a valid one", self.config.name, name, kafka_invalid)
            m.kafka, m.kafka_at, m.kafka_invalid = None, None, kafka_invalid
        elif kafka is not None:
            if m.kafka_invalid is not None:
                log.info("region %s: member %s reports its Kafka group state again", self.config.name, name)
            m.kafka, m.kafka_at, m.kafka_invalid = kafka, now, None
        return True

    def leave(self, name: str, now: float, reason: str = "left") -> None:
        if self.members.pop(name, None) is None:
            return
        log.info("region %s: member %s %s; members %s", self.config.name, name, reason, sorted(self.members))
        self._on_event("leave", {"member": name, "reason": reason})
        self._save()
        if self.phase is Phase.FAILED:
            return
        if not self.members:
            # Nobody left to answer: wait for joins. A region that is already
            # WAITING stays so (its grace restarts at the next first join).
            self.waiting.clear()
            self._joined_in_cycle = []
            self.first_join_at = None
            if self.phase is not Phase.WAITING:
                self._goto(Phase.WAITING, "no members left")
            return
        kind = ResetKind.MEMBERSHIP if reason == "left" else ResetKind.FAILURE
        if self.phase is Phase.RESETTING:
            # The round goes on without it; its partitions move to the others by a
            # Kafka rebalance, which asks for its own (force) reset.
            self.waiting.discard(name)
            self._maybe_reset_done(now)
        elif reason == "left" and self._cooperative_leave_keeps_cycle(name):
            # Every member rebalances cooperatively: the others keep their partitions
            # and their state, nothing of theirs needs a rewind. No checkpoint holds
            # the leaver's offsets beyond the last consistent one (it answered no
            # checkpoint since): its partitions keep that checkpoint's offsets
            # (carried forward) until their next owners, assigned by the Kafka
            # rebalance, start there; what it processed since is never published
            # (its leave reply names its last completed checkpoint). A cycle in
            # flight goes on without it. docs/region.md, cooperative step 9.
            log.info("region %s: member %s left in %s; every member is cooperative: no reset",
                     self.config.name, name, self.phase.value)
            self._cycle_members.discard(name)
            self._joined_in_cycle = [n for n in self._joined_in_cycle if n != name]
            if name in self.waiting:
                self.waiting.discard(name)
                if not self.waiting:
                    self._phase_answered(now)
        elif self.phase is not Phase.WAITING:
            # A graceful leaver's consumer has left the Kafka group: the others rejoin
            # now (rejoin hint) instead of at their next Kafka heartbeat.
            self._start_reset(f"member {name} {reason}", kind, now, rejoin=reason == "left")

    def ack(self, name: str, command: str, seq: int | None, attempt: int | None, ok: bool,
            error: str | None, now: float, offsets: list | None = None, rebalance: bool = False) -> None:
        m = self.members.get(name)
        if m is None:
            log.info("region %s: ignoring %s answer of unknown member %s", self.config.name, command, name)
            return
        m.last_seen = now
        current = {
            Phase.DRAINING: ("drain", self.seq, None),
            Phase.CHECKPOINTING: ("checkpoint", self.seq, None),
            Phase.RESETTING: ("reset", self.last_consistent, self.attempt),
        }.get(self.phase)
        expected = current is not None and current[0] == command and (
            (command == "reset" and attempt == current[2]) or (command != "reset" and seq == current[1]))
        if not expected or name not in self.waiting:
            log.debug("region %s: stale %s answer from %s (seq %s attempt %s) in %s",
                      self.config.name, command, name, seq, attempt, self.phase.value)
            return
        if not ok:
            what = f"member {name} failed {command}(seq={seq}, attempt={attempt}): {error}"
            log.warning("region %s: %s", self.config.name, what)
            if command != "reset":
                self.failed_cycles += 1
            # A rebalance (commit refused while the group rebalances) is not a failure.
            self._start_reset(what, ResetKind.FORCE if rebalance else ResetKind.FAILURE, now, restart=True)
            return
        self.waiting.discard(name)
        if command == "checkpoint":
            self._checkpointed.add(name)
            if offsets and self._claims.add(name, offsets) and not m.legacy_claims:
                m.legacy_claims = True
                log.warning("region %s: member %s answers checkpoints in the older form [topic, partition, offset]: "
                            "the continuity fence does not check its claims (upgrade it)", self.config.name, name)
        if self.waiting:
            return
        self._phase_answered(now)

    def _cooperative_leave_keeps_cycle(self, name: str) -> bool:
        """A graceful leave of ``name`` (already removed from the members) needs
        no reset: every reporting member is cooperative, and the leaver has not
        answered a checkpoint of the cycle in flight (RUNNING; DRAINING, where
        no offsets are collected yet; CHECKPOINTING while it is still awaited)."""
        if not self._pacing.all_cooperative():
            return False
        if self.phase is Phase.RUNNING or self.phase is Phase.DRAINING:
            return True
        if self.phase is Phase.CHECKPOINTING and name in self._joined_in_cycle:
            return name not in self._checkpointed  # a joiner whose predecessor did not answer: not in the cycle
        return self.phase is Phase.CHECKPOINTING and name in self.waiting

    def _phase_answered(self, now: float) -> None:
        """Every awaited member answered the current phase (or left): the next step."""
        command = {Phase.DRAINING: "drain", Phase.CHECKPOINTING: "checkpoint"}.get(self.phase, "reset")
        if command == "drain":
            if self.seq is None:  # a cycle's seq is set when its drain starts
                raise InvalidTransition(f"region {self.config.name}: drain acks without a cycle")
            self._goto(Phase.CHECKPOINTING, f"all members drained {self.seq}")
            self.waiting = set(self._cycle_members)
            self._claims.clear()
            self._checkpointed = set()
            self.deadline = now + self.config.drain_timeout_s
            self._broadcast(self.waiting, Checkpoint(self.seq))
        elif command == "checkpoint":
            self._complete_checkpoint(now)
        else:
            self._maybe_reset_done(now)

    def request_reset(self, name: str, force: bool, reason: str, now: float) -> None:
        """A member asks for a reset. During a reset round, requests do not stack,
        except from a member that already answered this round: what it asks about
        (a revocation, a pipeline error) happened after its reset, so the round
        restarts with a new attempt (dropping it left the member waiting for a
        reset until its next drain failed)."""
        if name not in self.members:
            log.info("region %s: reset request of unknown member %s ignored (%s)", self.config.name, name, reason)
            return
        kind = ResetKind.FORCE if force else ResetKind.FAILURE
        why = f"member {name} requested a {'forced ' if force else ''}reset: {reason}"
        if self.phase is Phase.RESETTING and name not in self.waiting:
            self._start_reset(f"{why} (after its answer to attempt {self.attempt})", kind, now, restart=True)
            return
        if force and self.phase is Phase.RESETTING:
            self._resets.note_cause(ResetKind.FORCE)  # force clears the counter even when it does not stack
        self._start_reset(why, kind, now)

    def trigger(self, name: str, now: float) -> TriggerReply:
        """Operator-driven mode: a member asks for a checkpoint now. The answer says
        at once whether a drain of that member follows (the member's source waits
        for it only then): RUNNING starts a cycle; a cycle that is draining and
        still waits for this member serves it; otherwise (the member drained
        already in the running cycle, which covers what it submitted; the region
        is checkpointing, resetting, waiting or FAILED) not now, with the reason."""
        if self.phase is Phase.RUNNING:
            self._start_cycle(now, f"trigger from {name}")
            return TriggerReply(TriggerAnswer.STARTED, f"checkpoint {self.seq} started")
        if self.phase is Phase.DRAINING and name in self.waiting:
            return TriggerReply(TriggerAnswer.DRAIN_COMING, f"checkpoint {self.seq} is draining")
        if self.phase in (Phase.DRAINING, Phase.CHECKPOINTING):
            why = f"checkpoint {self.seq} is running and {name} already drained for it"
        else:
            why = f"the region is {self.phase.value}; trigger again after the next RESUME"
        log.debug("region %s: trigger from %s not served: %s", self.config.name, name, why)
        return TriggerReply(TriggerAnswer.NOT_NOW, why)

    def tick(self, now: float) -> None:
        if self.phase is Phase.FAILED:
            return
        for m in list(self.members.values()):
            if now - m.last_seen > self.config.member_timeout_s:
                self.leave(m.name, now, reason=f"stopped heartbeating ({now - m.last_seen:.1f}s)")
        if self.phase is Phase.WAITING:
            self._maybe_start(now)
        elif self.phase in (Phase.DRAINING, Phase.CHECKPOINTING, Phase.RESETTING):
            if self.deadline is not None and now > self.deadline:
                late = sorted(self.waiting)
                what = {Phase.DRAINING: "drain", Phase.CHECKPOINTING: "checkpoint", Phase.RESETTING: "reset"}[self.phase]
                why = f"members {late} did not answer {what} in time"
                log.warning("region %s: %s", self.config.name, why)
                if self.phase is not Phase.RESETTING:
                    self.failed_cycles += 1
                self._start_reset(why, ResetKind.FAILURE, now, restart=True)
        elif self.phase is Phase.RUNNING and self.config.mode == "periodic":
            if self._pacing.cycle_due(now, self.next_cycle_at):
                self._start_cycle(now, "period", due=self.next_cycle_at)

    # ------------------------------------------------------------------ cycle
    def _start_cycle(self, now: float, why: str, due: float | None = None) -> None:
        """Step 1. ``due``: when a periodic drain was due (its grid slot, cadence.py
        step 1); None for a trigger (its start is its slot)."""
        self.seq = self.next_seq
        self.next_seq += 1
        self._save()  # a seq is never reused, even across a coordinator restart
        slot = slot_of(due, now, self.config.period_s)
        if slot.skipped:
            log.info("region %s: checkpoint %s starts %.2fs after it was due: %d slot(s) of the grid skipped",
                     self.config.name, self.seq, now - (due or now), slot.skipped)
        self._goto(Phase.DRAINING, f"checkpoint {self.seq} ({why})")
        self._cycle_start = now
        self._cycle_slot = slot.at
        self.waiting = set(self.members)
        self._cycle_members = set(self.members)
        self._checkpointed = set()
        self.deadline = now + self.config.drain_timeout_s
        self._broadcast(self.waiting, Drain(self.seq))

    def _complete_checkpoint(self, now: float) -> None:
        continuity = self._claims.check(self.checkpoint_offsets)
        if not continuity.ok:
            self._continuity_failed(continuity, now)
            return
        previous = self.last_consistent
        # The members that answered the checkpoint: every member, less those that
        # joined during the cycle without a predecessor that answered (_join_after_cycle).
        answered = sorted(self._checkpointed & set(self.members))
        self._remember_absent(previous, self.checkpoint_members, answered)
        self.last_consistent = self.seq
        self.checkpoint_members = answered
        # Each partition's offset continues the previous checkpoint's (continuity.py); partitions
        # nobody reported (unassigned while the group rebalances) keep that checkpoint's offset.
        self.checkpoint_offsets = continuity.offsets
        self._resets.checkpoint_completed()
        self.checkpoints += 1
        self._save()  # durable before anyone hears of it
        took_ms = (now - (self._cycle_start or now)) * 1000
        self._goto(Phase.RUNNING, f"checkpoint {self.seq} is consistent ({took_ms:.0f} ms)")
        upcoming = next_drain(now if self._cycle_slot is None else self._cycle_slot, now, self.config.period_s)
        self._on_event("checkpoint", {"seq": self.seq, "checkpoint_ms": round(took_ms, 1),
                                      "next_drain_in_s": round(upcoming.at - now, 3)})
        joined, self._joined_in_cycle = self._joined_in_cycle, []
        told = [n for n in self.members if n not in joined]  # joiners: their reset follows
        self._broadcast(told, Resume(self.seq, self.checkpoint_offsets))
        if previous is not None:
            self._broadcast(told, Retire(previous))
        self.waiting = set()
        self.deadline = None
        self.next_cycle_at = upcoming.at
        if joined:
            self._start_reset(f"members {sorted(set(joined))} joined during checkpoint {self.seq}",
                              ResetKind.MEMBERSHIP, now, rejoin=True)
            return
        if upcoming.floored:
            log.info("region %s: checkpoint %s took %.0f ms, past its grid slot: next drain in %.2fs (the floor "
                     "after a RESUME), %d slot(s) of the grid skipped", self.config.name, self.seq, took_ms,
                     upcoming.at - now, upcoming.skipped)
        else:
            log.debug("region %s: next drain in %.3fs (one period after the slot of checkpoint %s)",
                      self.config.name, upcoming.at - now, self.seq)

    def _continuity_failed(self, continuity: Continuity, now: float) -> None:
        """Step 3 refused: the answers do not continue the last consistent checkpoint
        (continuity.py: two members processed a partition, or one from an offset the
        region did not continue from). Nothing of the cycle is persisted or
        announced; a failure reset rewinds every member to the last consistent
        checkpoint, discarding every interval since (docs/region.md, step 12)."""
        why = f"checkpoint {self.seq} fails the continuity check: {continuity.summary()}"
        log.error("region %s: %s; resetting to checkpoint %s", self.config.name, why, self.last_consistent)
        self.failed_cycles += 1
        self._on_event("continuity", {"seq": self.seq, "violations": len(continuity.violations),
                                      "partitions": [v.to_dict() for v in continuity.violations[:VIOLATIONS_SHOWN]]})
        self._start_reset(why, ResetKind.FAILURE, now, restart=True)

    # ------------------------------------------------------------------ reset round (see reset.py)
    def _maybe_start(self, now: float) -> None:
        if not self.members:
            return
        expected = max(self.config.min_members, len(self.known_members))
        all_known_back = bool(self.known_members) and set(self.known_members) <= set(self.members)
        grace_over = self.first_join_at is not None and now - self.first_join_at >= self.config.join_grace_s
        if len(self.members) >= expected or all_known_back or grace_over:
            self._start_reset(f"{len(self.members)} member(s) present", ResetKind.MEMBERSHIP, now)

    def _start_reset(self, why: str, kind: ResetKind, now: float, restart: bool = False,
                     rejoin: bool = False) -> None:
        if self.phase is Phase.FAILED:
            return
        if self.phase is Phase.RESETTING and not restart:
            log.info("region %s: reset already running (attempt %s); not stacking: %s", self.config.name,
                     self.attempt, why)
            return
        too_many = self._resets.note_cause(kind)
        if too_many is not None:
            self.fail(f"{too_many}; last cause: {why}", now)
            return
        if self._joined_in_cycle:  # the round brings in the members that joined during a cycle
            self._joined_in_cycle = []
            rejoin = True
        attempt = self._resets.begin()
        self._save()  # the attempt is durable before any member hears of it
        self._goto(Phase.RESETTING, f"attempt {attempt} ({kind.value}, consecutive "
                                    f"{self.consecutive_resets}): {why}")
        self._resets.started(now)
        self._on_event("reset", {"attempt": attempt, "cause": kind.value, "why": why,
                                 "seq": self.last_consistent})
        self.waiting = set(self.members)
        self.deadline = now + self.config.reset_timeout_s
        if rejoin:
            self._pacing.rejoin_hinted(now)
        if self.last_consistent is None:
            self._broadcast(self.waiting, ResetToInitial(attempt, rejoin=rejoin))
        else:
            for name in sorted(self.waiting):  # each member's own checkpoint (own_checkpoint)
                self._send(name, Reset(self.last_consistent, attempt, self.checkpoint_members,
                                       self.checkpoint_offsets, self.own_checkpoint(name), rejoin=rejoin))

    def _maybe_reset_done(self, now: float) -> None:
        if self.phase is not Phase.RESETTING or self.waiting:
            return
        took = self._resets.finish(now)
        self._goto(Phase.RUNNING, f"reset attempt {self.attempt} complete ({took * 1000:.0f} ms since the first cause)")
        # Off the grid (cadence.py step 3): the pacing after a reset decides; the grid
        # starts again from the next drain.
        delay = self._pacing.settle_delay()
        self._on_event("resume", {"attempt": self.attempt, "reset_ms": round(took * 1000, 1),
                                  "next_drain_in_s": round(delay, 3)})
        self._broadcast(self.members, Resume(None))
        self.deadline = None
        self.next_cycle_at = now + delay
        log.info("region %s: next drain in %.2fs (after a reset)", self.config.name, delay)
        self._pacing.resumed()

    # ------------------------------------------------------------------ own checkpoints
    def own_checkpoint(self, name: str) -> int | None:
        """The last completed checkpoint member ``name`` took part in (None: none).

        Invariant (nothing checkpointed is ever deleted unpublished): a member
        that acknowledged checkpoint N, which then completed, may die before the
        RESUME that publishes its interval N, and stay away past
        ``member_timeout_s`` while later checkpoints complete without it. Its
        interval N lies below N's offsets, which the others continue from, so
        nobody replays it: it must be published, not deleted, when a process of
        that name returns. Every reset therefore tells each member its own
        checkpoint: its operators load their data of that checkpoint (the file
        sink publishes every interval sealed up to it and deletes only later
        pending files; a keyed aggregate keeps its partial table), while its
        source starts from the region's last consistent offsets."""
        if self.last_consistent is not None and name in self.checkpoint_members:
            return self.last_consistent
        return self.absent.get(name)

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

    def _remember_absent(self, previous: int | None, before: list[str], now_members: list[str]) -> None:
        for name, seq in self.absent.checkpoint_completed(previous, before, now_members):
            log.error("region %s: forgetting that absent member %s took part in checkpoint %s (more than %d absent "
                      "members); if a process of that name returns, its pending intervals are deleted, not published",
                      self.config.name, name, seq, self.absent.kept)
            self._on_event("forgotten", {"member": name, "seq": seq})

    # ------------------------------------------------------------------ status
    def status(self, now: float) -> dict[str, Any]:
        return {
            "name": self.config.name,
            "index": self.config.index,
            "phase": self.phase.value,
            "mode": self.config.mode,
            "period_s": self.config.period_s,
            "members": {
                n: {"pid": m.pid, "incarnation": m.incarnation, "silent_s": round(now - m.last_seen, 3),
                    "kafka": m.kafka.to_dict() if m.kafka is not None else None,
                    "kafka_invalid": m.kafka_invalid, "legacy_claims": m.legacy_claims}
                for n, m in sorted(self.members.items())
            },
            "last_consistent": self.last_consistent,
            "seq": self.seq,
            "attempt": self.attempt,
            "waiting_for": sorted(self.waiting),
            "consecutive_resets": self.consecutive_resets,
            "max_consecutive_resets": self.config.max_consecutive_resets,
            "checkpoints": self.checkpoints,
            "resets": self.resets,
            "failed_cycles": self.failed_cycles,
            "failed_reason": self.failed_reason,
        }
