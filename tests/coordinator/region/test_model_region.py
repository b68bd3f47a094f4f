"""Model-based (stateful) test of the region controller core (``RegionCore``, no I/O).

Hypothesis drives a ``RegionCore`` and a set of simulated members through any
interleaving of: members joining, restarting (a new incarnation), leaving,
dying (no more heartbeats), heartbeating, executing and acking the commands
pushed to them (or failing them), asking for resets (forced or not) at any
moment (also while executing a reset, before their ack), triggering
checkpoints, and time passing (``tick``).

A simulated member behaves like the member runtime (docs/region.md):

* ``checkpoint(seq)`` seals the interval ``seq`` in its checkpoint store
  (kept across restarts of the same member name); the ack follows;
* ``resume(complete=N)`` publishes its sealed intervals <= N;
* ``reset(seq=S, members=M, own=O)``: its operators go back to their data of
  its own last completed checkpoint O (S if it is in M, when ``own`` is absent):
  its intervals <= O are published, later ones discarded; with no such
  checkpoint (or ``reset_to_initial``), every pending interval is discarded;
* a graceful leave publishes what the leave reply names (its own checkpoint);
* in a cooperative region (``cooperative``) every heartbeat reports cooperative
  rebalancing and the member's pending reset: graceful leaves and joins during
  a cycle then keep the cycle going (docs/region.md, cooperative steps 9-10);
* a reset request sets its source's reset-pending state, which only a reset
  it executes *after* the request clears; a drain while it is pending fails;
  its reset watch asks again (forced) every ``RE_REQUEST_S`` while the region
  is RUNNING, and after ``RE_REQUESTS_MAX`` re-requests the process exits and
  is restarted;
* its source owns partitions of topic ``t`` (at first m<i> owns partition i):
  a reset seeks each to the reset's offset (0 when the region has none), a
  drain processes one record of each, and a checkpoint answer claims
  ``[t, p, from, to]`` (where the interval began, where it ended) and seals
  those records in the interval; the next interval starts where it ended
  (cr_consumer/operator/offset_manager.py). A new process owns nothing until
  its first reset seeks its partitions;
* ``steal``: the broker gives a member's partition to another member (seeked
  to the last consistent offset it knows) while the old owner, a zombie whose
  Kafka session expired unnoticed, goes on processing it until its next reset
  (where its rebalance listener reports the partition lost).

Invariants, checked after every step:

0. exactly once: no record of a partition is published twice (the
   continuity fence, coordinator/region/continuity.py, keeps a zombie's and
   the new owner's intervals from both being published), and a run without
   zombies never fails the continuity check (the legitimate cases pass);

1. ``tick`` never raises, nor does any input;
2. a member publishes interval N only if N is a consistent checkpoint
   (persisted as ``last_consistent`` with that member among its members);
   a ``resume(complete=N)`` leaves only after N is persisted;
3. nothing checkpointed is deleted unpublished: a member never discards a
   sealed interval of a consistent checkpoint it was a member of;
4. a FAILED region says why (``failed_reason``, the persisted ``failed``);
4b. the backoff between the failures of a streak (coordinator/region/timing.py):
   BACKOFF waits for nobody, and the RESUME after a reset never leaves before
   the hold the ``BackoffHeld`` event announced is over (unless a forced or failure
   cause started a new round since); the announced hold is the one of the
   failure streak counted here from the counted causes (``ResetStarted`` events: a
   failure less than ``failure_memory_s`` after the previous one continues the
   streak, a forced request ends it, a checkpoint ``failure_memory_s`` after the
   last failure ends it, a coordinator restart keeps the persisted one), whatever
   progress the checkpoints between the failures made;
5. ``settle`` (every live member heartbeats and answers every command, time
   passes): the region ends RUNNING (or FAILED, or WAITING without members),
   waits for nobody, no live member is left reset-pending, and a periodic
   region with members completes a checkpoint.

Kafka transactions (``coordinator/protocol/region/transactions.py``): m0 and m1
run a transactional sink (their checkpoint answers carry the transaction of
the interval, under the id of its seq's parity), m2 none (its answers carry
null). A member commits its own prepared transaction of N at the
``resume(complete=N)`` of the process that prepared it; a reset's receiver
commits every prepared transaction its ``resolve`` names. Checked:

6. each reset's ``resolve`` holds the receiver's own entry (if it has one) as
   the document persisted before it has it, and, for the first member of the
   round in sorted order only, every entry of a member not in the round;
   nothing else; every entry is of a consistent checkpoint its member was in;
7. no prepared transaction of a completed checkpoint is forgotten: an entry
   leaves the persisted document (dropped, replaced, or its prepared list
   emptied) only once its prepared transaction was committed.

Faults besides the members' own: a crash right after a checkpoint ack (before
the RESUME), and a coordinator restart (the core rebuilt from its last
persisted document, pushes in flight lost).
"""

from __future__ import annotations

import os

import attrs
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from coordinator.protocol.region.commands import CommandKind, RegionCommand
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.kafka_report import KafkaReport
from coordinator.protocol.region.replies import RegionPhase
from coordinator.protocol.region.transactions import PreparedTxn, Transactions, TxnPartition
from coordinator.region.events import (
    BackoffHeld,
    CheckpointCompleted,
    ContinuityRefused,
    RegionEvent,
    ResetResumed,
    ResetStarted,
)
from coordinator.region.machine import RegionCore
from coordinator.region.model import ResetKind
from cr_consumer.runtime.member.reset_watch import RE_REQUEST_S, RE_REQUESTS_MAX

NAMES = ["m0", "m1", "m2"]
#: The members that run a transactional sink (invariants 6-7).
TRANSACTIONAL = {"m0", "m1"}

#: Time steps: below, near and past every timeout of the config below.
STEPS = [0.05, 0.3, 1.0, 2.5, 6.0]
#: Short enough that a run sees failures this far apart (a new streak) and quiet checkpoints.
FAILURE_MEMORY_S = 8.0
SETTLE_ROUNDS = 120


@attrs.define
class SimMember:
    name: str
    incarnation: int = 0
    #: its source's partitions of topic "t": partition -> [from, to] of the current interval
    #: (None: not seeked yet; a new process seeks at its first reset)
    parts: dict[int, list[int] | None] = attrs.field(factory=dict)
    #: the offsets of the last consistent checkpoint it heard of (RESUME, reset)
    consistent: dict[int, int] = attrs.field(factory=dict)
    alive: bool = True
    inbox: list[dict] = attrs.field(factory=list)
    executing: dict | None = None
    reset_pending: bool = False
    asked_at: float = 0.0  # last reset request (or completed reset) while reset-pending
    re_requests: int = 0
    #: checkpoints this process answered with a prepared transaction (it commits them at their RESUME)
    prepared: set[int] = attrs.field(factory=set)


class RegionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.sim: dict[str, SimMember] = {}
        self.sealed: dict[str, set[int]] = {n: set() for n in NAMES}  # per name: survives restarts
        self.published: dict[str, set[int]] = {n: set() for n in NAMES}
        self.docs: list[dict] = []
        self.consistent: dict[int, set[str]] = {}  # checkpoint -> its members (from persisted docs)
        self.violations: list[str] = []
        self.core: RegionCore | None = None
        self.cooperative = False  # members report cooperative rebalancing in their heartbeats
        self.owner: dict[int, str] = {i: n for i, n in enumerate(NAMES)}  # partition -> the broker's owner
        self.intervals: dict[str, dict[int, dict[int, tuple[int, int]]]] = {n: {} for n in NAMES}  # sealed records
        self.records: dict[int, set[int]] = {}  # partition -> published offsets
        self.steals = 0
        self.continuity_failures = 0
        self.hold_due: float | None = None  # the RESUME's earliest time, from the last ``BackoffHeld`` event
        # The failure streak as invariant 4b counts it, and the time of its last failure.
        self.streak = 0
        self.last_failure: float | None = None
        self.hold_s: float | None = None  # the hold the next RESUME after a reset is held for, by that count
        self.committed: set[tuple[str, int]] = set()  # (member, checkpoint) transactions committed (invariant 7)

    # ------------------------------------------------------------------ core callbacks
    def _send(self, member: str, command: RegionCommand) -> None:
        body = command.to_body()
        if body["cmd"] == "resume" and body.get("complete") is None:
            if self.hold_due is not None and self.now < self.hold_due - 0.001:
                self.violations.append(f"resume at {self.now} during a backoff hold due at {self.hold_due}")
            self.hold_due = None
        if body["cmd"] == "resume" and body.get("complete") is not None:
            last = self.docs[-1]["last_consistent"] if self.docs else None
            if last != body["complete"]:
                self.violations.append(f"resume({body['complete']}) sent while the persisted checkpoint is {last}")
        if body["cmd"] in ("reset", "reset_to_initial"):
            self._check_resolve(member, body.get("resolve", []))
        m = self.sim.get(member)
        if m is not None and m.alive:
            m.inbox.append(dict(body))

    def _check_resolve(self, member: str, resolve: list[dict]) -> None:
        """Invariant 6, at the send (the round's members are the core's members now)."""
        stored = {e["member"]: e for e in (self.docs[-1]["transactions"] if self.docs else [])}
        resolver = min(self.core.members)
        expected = [stored[member]] if member in stored else []
        if member == resolver:
            others = [e for n, e in stored.items() if n not in self.core.members]
            expected += sorted(others, key=lambda e: (e["seq"], e["member"]))
        if resolve != expected:
            self.violations.append(f"reset to {member} resolves {resolve}, expected {expected}")

    def _persist(self, doc: dict) -> None:
        before = self.docs[-1]["transactions"] if self.docs else []
        self.docs.append(doc)
        if doc["last_consistent"] is not None:
            self.consistent.setdefault(doc["last_consistent"], set(doc["checkpoint_members"]))
        self._check_entries(before, doc["transactions"])

    def _check_entries(self, before: list[dict], after: list[dict]) -> None:
        """Invariants 6 (every entry of a consistent checkpoint its member was in) and 7."""
        now = {e["member"]: e for e in after}
        for e in after:
            if e["member"] not in self.consistent.get(e["seq"], ()):
                self.violations.append(f"entry {e} is not of a consistent checkpoint {e['member']} was in")
        for e in before:
            kept = now.get(e["member"])
            gone = kept is None or kept["seq"] != e["seq"] or not kept["prepared"]
            if e["prepared"] and gone and (e["member"], e["seq"]) not in self.committed:
                self.violations.append(f"entry {e} left the document uncommitted (now {kept})")

    @initialize(
        mode=st.sampled_from(["periodic", "operator_driven"]),
        min_members=st.integers(1, 3),
        max_resets=st.integers(2, 6),
        cooperative=st.booleans(),
        initial=st.integers(0, 3),
    )
    def setup(self, mode: str, min_members: int, max_resets: int, cooperative: bool = False, initial: int = 0) -> None:
        """``initial``: members that join at once (many runs would otherwise have one member)."""
        self.cooperative = cooperative
        config = RegionConfig(
            name="r",
            mode=mode,
            period_s=1.0,
            drain_timeout_s=3.0,
            reset_timeout_s=3.0,
            member_timeout_s=2.0,
            min_members=min_members,
            join_grace_s=5.0,
            max_consecutive_resets=max_resets,
            rebalance_settle_max_s=2.0,
            reset_backoff_s=0.5,
            reset_backoff_max_s=2.0,
            failure_memory_s=FAILURE_MEMORY_S,
        )
        self.core = RegionCore(config, self._send, self._persist, on_event=self._event)
        for name in NAMES[:initial]:
            self.join(name)

    def _event(self, event: RegionEvent) -> None:
        self._count_streak(event)
        if isinstance(event, BackoffHeld):
            self.hold_due = self.now + event.resume_in_s
            if event.backoff_s != self.hold_s or event.failure_streak != self.streak:
                self.violations.append(
                    f"hold {event.backoff_s} at streak {event.failure_streak}: expected "
                    f"{self.hold_s} at streak {self.streak}"
                )
        if isinstance(event, ResetResumed):
            if event.held_s != self.hold_s:
                self.violations.append(f"RESUME held {event.held_s}: expected {self.hold_s} at streak {self.streak}")
            self.hold_s = None
        elif isinstance(event, ResetStarted) and event.cause is not ResetKind.MEMBERSHIP:
            self.hold_due = None  # a new failure's hold, or none (forced)
        if isinstance(event, ContinuityRefused):
            self.continuity_failures += 1
            if not self.steals:
                self.violations.append(f"continuity check failed without a zombie: {event}")

    def _count_streak(self, event: RegionEvent) -> None:
        """Invariant 4b's own count of the failure streak, from the core's events."""
        if isinstance(event, ResetStarted) and event.cause is ResetKind.FAILURE:
            late = self.last_failure is not None and self.now - self.last_failure >= FAILURE_MEMORY_S
            self.streak = 1 if late else self.streak + 1
            self.last_failure = self.now
            self.hold_s = min(0.5 * 2 ** (self.streak - 2), 2.0) if self.streak >= 2 else None
        elif isinstance(event, ResetStarted) and event.cause is ResetKind.FORCE:
            self.streak, self.last_failure, self.hold_s = 0, None, None
        elif isinstance(event, CheckpointCompleted) and self.streak:
            if self.last_failure is None:  # restored: the clock starts at the first checkpoint
                self.last_failure = self.now
            elif self.now - self.last_failure >= FAILURE_MEMORY_S:
                self.streak, self.last_failure = 0, None

    # ------------------------------------------------------------------ members
    def _join(self, name: str, replace: bool) -> None:
        m = self.sim[name]
        m.inbox.clear()
        m.executing = None
        m.reset_pending = False  # a new process starts its source afresh
        m.parts = {p: None for p, owner in self.owner.items() if owner == name}
        m.consistent = {}
        m.prepared = set()  # a new process: what its predecessor prepared is the region's to resolve
        self.core.join(
            name,
            f"{name}/{m.incarnation}".encode(),
            str(m.incarnation),
            self.now,
            pid=m.incarnation,
            host="h",
            replace=replace,
        )

    @rule(name=st.sampled_from(NAMES))
    def join(self, name: str) -> None:
        if name not in self.sim:
            self.sim[name] = SimMember(name)
        elif self.sim[name].alive:
            return
        self.sim[name].alive = True
        self._join(name, replace=False)

    @rule(name=st.sampled_from(NAMES))
    def restart(self, name: str) -> None:
        """The process died and the runner restarted it at once (same host, pid gone: replace)."""
        if name not in self.sim:
            return
        m = self.sim[name]
        m.incarnation += 1
        m.alive = True
        self._join(name, replace=True)

    @rule(name=st.sampled_from(NAMES))
    def die(self, name: str) -> None:
        m = self.sim.get(name)
        if m is not None:
            m.alive = False
            m.inbox.clear()
            m.executing = None

    @rule(name=st.sampled_from(NAMES))
    def leave(self, name: str) -> None:
        m = self.sim.get(name)
        if m is not None and m.alive:
            # the leaver publishes what its own last completed checkpoint covers before it exits
            own = self.core.leave_reply(name, str(m.incarnation))
            self.core.leave(name, self.now)
            if own is not None:
                self._publish(name, own)
            m.alive = False
            m.inbox.clear()
            m.executing = None

    @rule(name=st.sampled_from(NAMES))
    def heartbeat(self, name: str) -> None:
        m = self.sim.get(name)
        if m is not None and m.alive:
            report = (
                KafkaReport(f"k-{name}-{m.incarnation}", 1, cooperative=True, reset_pending=m.reset_pending)
                if self.cooperative
                else None
            )
            if not self.core.members.heartbeat(
                name, f"{name}/{m.incarnation}".encode(), str(m.incarnation), self.now, report
            ):
                # NOT_REGISTERED (dropped after a silence): the member joins again, same incarnation
                self.core.join(
                    name, f"{name}/{m.incarnation}".encode(), str(m.incarnation), self.now, pid=m.incarnation, host="h"
                )
            elif m.reset_pending and self.core.phase is RegionPhase.RUNNING and self.now - m.asked_at >= RE_REQUEST_S:
                self._watch(name)

    def _watch(self, name: str) -> None:
        """The member's reset watch (cr_consumer/runtime/member/reset_watch.py): still reset-pending in a
        RUNNING region: ask again (forced), and after RE_REQUESTS_MAX re-requests exit (restarted)."""
        m = self.sim[name]
        if m.re_requests >= RE_REQUESTS_MAX:
            self.restart(name)
            return
        m.re_requests += 1
        self.send_reset_request(name, True)

    @rule(name=st.sampled_from(NAMES))
    def execute(self, name: str) -> None:
        """The member takes its next command (skipping those before the last queued reset)."""
        m = self.sim.get(name)
        if m is None or not m.alive or not m.inbox or m.executing is not None:
            return
        resets = [i for i, b in enumerate(m.inbox) if b["cmd"] in ("reset", "reset_to_initial")]
        if resets:
            del m.inbox[: resets[-1]]
        body = m.inbox.pop(0)
        self._apply(name, body)
        if body["cmd"] in ("drain", "checkpoint", "reset", "reset_to_initial"):
            m.executing = body

    @rule(name=st.sampled_from(NAMES), ok=st.booleans())
    def ack(self, name: str, ok: bool) -> None:
        m = self.sim.get(name)
        if m is None or not m.alive or m.executing is None:
            return
        body, m.executing = m.executing, None
        if body["cmd"] == "drain" and m.reset_pending:
            ok = False  # a source waiting for its reset fails the drain
        command = CommandKind.RESET if body["cmd"].startswith("reset") else CommandKind(body["cmd"])
        claims = None
        if body["cmd"] == "checkpoint":
            # the source's checkpoint: each interval ends here, the next starts where it ended
            claims = [["t", p, iv[0], iv[1]] for p, iv in sorted(m.parts.items()) if iv is not None]
            if ok:
                self.sealed[name].add(body["seq"])
                self.intervals[name][body["seq"]] = {p: (a, b) for _, p, a, b in claims}
            for iv in m.parts.values():
                if iv is not None:
                    iv[0] = iv[1]
        txns = None
        if body["cmd"] == "checkpoint" and name in TRANSACTIONAL:
            seq = body["seq"]
            p = NAMES.index(name)
            txns = Transactions(
                (PreparedTxn(f"{name}-{seq % 2}", 100 + p, m.incarnation, (TxnPartition("out", p, seq),)),),
                (f"{name}-0", f"{name}-1"),
            )
            if ok:
                m.prepared.add(seq)
        self.core.ack(
            name,
            command,
            body.get("seq"),
            body.get("attempt"),
            ok,
            None if ok else "failed",
            self.now,
            claims,
            transactions=txns,
        )

    @rule(thief=st.sampled_from(NAMES), victim=st.sampled_from(NAMES))
    def steal(self, thief: str, victim: str) -> None:
        """The broker gives the victim's partitions to the thief (seeked to the last consistent offsets
        it knows); the victim, a zombie, goes on processing them until its next reset."""
        t, v = self.sim.get(thief), self.sim.get(victim)
        if thief == victim or t is None or v is None or not t.alive or not v.alive:
            return
        for p in [p for p, owner in self.owner.items() if owner == victim]:
            self.owner[p] = thief
            self.steals += 1
            c = t.consistent.get(p, 0)
            t.parts[p] = [c, c]

    @rule(name=st.sampled_from(NAMES), force=st.booleans())
    def request_reset(self, name: str, force: bool) -> None:
        m = self.sim.get(name)
        if m is not None and m.alive:
            m.re_requests = 0
            self.send_reset_request(name, force)

    def send_reset_request(self, name: str, force: bool) -> None:
        """The member's source needs a reset (a revocation, a pipeline error): it is reset-pending."""
        m = self.sim.get(name)
        if m is not None and m.alive:
            m.reset_pending = True
            m.asked_at = self.now
            if force and name in self.core.members and self.core.phase is not RegionPhase.FAILED:
                self.streak, self.last_failure, self.hold_s = 0, None, None  # stacked or not: ends the streak
            self.core.request_reset(name, force, "revoked" if force else "pipeline error", self.now)

    @rule(name=st.sampled_from(NAMES))
    def failure_answered_at_once(self, name: str) -> None:
        """A pipeline error, and every live member answers what it was sent before
        any time passes: a repeated failure's round ends while its hold runs (BACKOFF)."""
        m = self.sim.get(name)
        if m is None or not m.alive:
            return
        m.re_requests = 0
        self.send_reset_request(name, False)
        for other in sorted(self.sim):
            o = self.sim[other]
            while o.alive and (o.inbox or o.executing is not None):
                if o.executing is None:
                    self.execute(other)
                if o.executing is not None:
                    self.ack(other, True)

    @rule(name=st.sampled_from(NAMES))
    def trigger(self, name: str) -> None:
        m = self.sim.get(name)
        if m is not None and m.alive and not m.reset_pending:
            self.core.trigger(name, self.now)

    @rule()
    def answer_round(self) -> None:
        """Every live member heartbeats and answers at most one command (a step of a healthy region)."""
        for name in sorted(self.sim):
            m = self.sim[name]
            if m.alive:
                self.heartbeat(name)
                self.execute(name)
                self.ack(name, True)

    @rule(name=st.sampled_from(NAMES))
    def crash_after_checkpoint_ack(self, name: str) -> None:
        """The fault point 'crash after the checkpoint ack': sealed and acked, RESUME never executed."""
        m = self.sim.get(name)
        if m is not None and m.alive and m.executing is not None and m.executing["cmd"] == "checkpoint":
            self.ack(name, True)
            self.die(name)

    @rule(dt=st.sampled_from(STEPS))
    def healthy_time_passes(self, dt: float) -> None:
        """Live members heartbeat, then time passes (only the dead fall silent)."""
        for name in sorted(self.sim):
            self.heartbeat(name)
        self.time_passes(dt)

    @rule()
    def coordinator_restarts(self) -> None:
        """kill -9 and restart of the coordinator: the core comes back from its last persisted
        document (WAITING); pushes in flight are lost; members rejoin at their next heartbeat."""
        doc = self.docs[-1] if self.docs else None
        self.hold_due = None  # the restored hold is announced again (timing.py, backoff step 2)
        self.streak = doc["failure_streak"] if doc else 0  # durable; its clock is not
        self.last_failure = None
        self.hold_s = doc["backoff_s"] if doc else None  # the hold in force, applied again (timing.py, backoff step 2)
        self.core = RegionCore(self.core.config, self._send, self._persist, doc, on_event=self._event)
        for m in self.sim.values():
            m.inbox.clear()
            m.executing = None

    @rule(dt=st.sampled_from(STEPS))
    def time_passes(self, dt: float) -> None:
        self.now += dt
        self.core.tick(self.now)

    # ------------------------------------------------------------------ member semantics
    def _apply(self, name: str, body: dict) -> None:
        m = self.sim[name]
        cmd = body["cmd"]
        if cmd == "resume" and body.get("complete") is not None:
            m.consistent = {p: o for t, p, o in body["offsets"]}
            self._publish(name, body["complete"])
            if body["complete"] in m.prepared:  # its sink commits the transaction of that interval
                self.committed.add((name, body["complete"]))
        elif cmd == "drain":
            for iv in m.parts.values():  # the interval's records, processed before the drain
                if iv is not None:
                    iv[1] += 1
        if cmd in ("reset", "reset_to_initial"):  # before its operators reset: commit what it is handed
            self.committed.update((e["member"], e["seq"]) for e in body.get("resolve", []) if e["prepared"])
            m.prepared.clear()
        if cmd == "reset":
            m.reset_pending = False
            self._seek(m, {p: o for t, p, o in body["offsets"]})
            # its operators go back to their data of its own last completed checkpoint
            own = body["own"] if "own" in body else (body["seq"] if name in body["members"] else None)
            if own is not None:
                self._publish(name, own)
                self._discard(name, lambda n: n > own)
            else:
                self._discard(name, lambda n: True)
        elif cmd == "reset_to_initial":
            m.reset_pending = False
            self._seek(m, {})
            self._discard(name, lambda n: True)
        elif cmd == "failed":
            m.alive = False  # exits with code 3; the runner does not restart it
            m.inbox.clear()

    def _seek(self, m: SimMember, offsets: dict[int, int]) -> None:
        """A reset: a zombie learns it lost the partitions the broker gave away (its rebalance
        listener); every partition it owns is seeked to the reset's offset (0: the region has none)."""
        m.consistent = dict(offsets)
        m.parts = {p: [offsets.get(p, 0)] * 2 for p in m.parts if self.owner[p] == m.name}

    def _publish(self, name: str, upto: int) -> None:
        for n in sorted(self.sealed[name]):
            if n <= upto and n not in self.published[name]:
                if name not in self.consistent.get(n, ()):
                    self.violations.append(
                        f"{name} published interval {n}, not a consistent checkpoint it was in "
                        f"(consistent: {sorted(self.consistent)})"
                    )
                self.published[name].add(n)
                for p, (a, b) in self.intervals[name].get(n, {}).items():
                    twice = self.records.setdefault(p, set()) & set(range(a, b))
                    if twice:
                        self.violations.append(
                            f"{name} published records {sorted(twice)} of t[{p}] again (interval {n})"
                        )
                    self.records[p].update(range(a, b))

    def _discard(self, name: str, which) -> None:
        for n in sorted(self.sealed[name]):
            if which(n) and n not in self.published[name]:
                if name in self.consistent.get(n, ()):
                    self.violations.append(f"{name} discarded interval {n} of consistent checkpoint {n} unpublished")
                self.sealed[name].discard(n)
                self.intervals[name].pop(n, None)

    # ------------------------------------------------------------------ liveness
    @precondition(lambda self: self.core is not None)
    @rule()
    def settle(self) -> None:
        """Every live member heartbeats and answers everything; time passes. Nothing may stay stuck,
        and a periodic region with members completes a checkpoint."""
        checkpoints = self.core.cycles.completed
        for _ in range(SETTLE_ROUNDS):
            for name in sorted(self.sim):
                m = self.sim[name]
                if not m.alive:
                    continue
                self.heartbeat(name)
                while m.inbox or m.executing is not None:
                    if m.executing is None:
                        self.execute(name)
                    if m.executing is not None:
                        self.ack(name, True)
            self.now += 0.25
            self.core.tick(self.now)
            idle = all(not m.inbox and m.executing is None for m in self.sim.values() if m.alive)
            # in a FAILED region members exit (code 3): a pending reset no longer matters
            pending = [
                n
                for n, m in self.sim.items()
                if m.alive and m.reset_pending and self.core.phase is not RegionPhase.FAILED
            ]
            cycled = (
                self.core.config.mode != "periodic" or not self.core.members or self.core.cycles.completed > checkpoints
            )
            if (
                idle
                and not pending
                and not self.core.waiting
                and (
                    self.core.phase is RegionPhase.FAILED
                    or (self.core.phase is RegionPhase.RUNNING and cycled)
                    or (self.core.phase is RegionPhase.WAITING and not self.core.members)
                )
            ):
                return
        stuck = {n: m.reset_pending for n, m in self.sim.items() if m.alive}
        raise AssertionError(
            f"region did not settle: phase {self.core.phase.value}, waiting for "
            f"{sorted(self.core.waiting)}, live members reset-pending {stuck}"
        )

    # ------------------------------------------------------------------ invariants
    @invariant()
    def no_violation(self) -> None:
        assert not self.violations, self.violations

    @invariant()
    def backoff_waits_for_nobody(self) -> None:
        if self.core is not None and self.core.phase is RegionPhase.BACKOFF:
            assert not self.core.waiting
            assert self.core.wake_at is not None
            assert self.core.resets.streak >= 2

    @invariant()
    def failed_says_why(self) -> None:
        if self.core is not None and self.core.phase is RegionPhase.FAILED:
            assert self.core.failed_reason
            assert self.docs
            assert self.docs[-1]["failed"] is True


# --------------------------------------------------------------------------- regressions
# Minimal sequences the machine found (or that it checks), kept as plain tests.


def _machine(mode: str = "periodic", min_members: int = 1, max_resets: int = 5) -> RegionMachine:
    m = RegionMachine()
    m.setup(mode=mode, min_members=min_members, max_resets=max_resets)
    return m


def test_a_waiting_region_whose_only_member_leaves_or_falls_silent_stays_waiting():
    m = _machine(min_members=2)
    m.join("m0")
    m.leave("m0")  # raised WAITING -> WAITING (from the service: an INTERNAL reply)
    assert m.core.phase is RegionPhase.WAITING
    m.join("m1")
    m.time_passes(2.5)  # silent past member_timeout_s: raised from the tick, which stopped the coordinator
    assert m.core.phase is RegionPhase.WAITING
    assert not m.core.members


def test_a_member_back_after_checkpoints_completed_without_it_keeps_its_sealed_interval():
    """m0 acks checkpoint 1 and dies before its RESUME; checkpoint 3 completes without it;
    the restarted m0 must not discard interval 1 (below the offsets everyone continues from)."""
    m = _machine(min_members=2)
    m.join("m0")
    m.join("m1")
    m.settle()
    m.healthy_time_passes(1.0)  # drain
    m.answer_round()  # drains acked: checkpoint
    m.execute("m0")
    m.crash_after_checkpoint_ack("m0")
    m.answer_round()  # m1 acks: checkpoint complete, RESUME to m1 only
    assert m.consistent
    assert "m0" in m.consistent[max(m.consistent)]
    m.healthy_time_passes(2.5)  # m0 dropped after member_timeout_s
    m.settle()  # a checkpoint completes without m0
    m.restart("m0")
    m.settle()
    assert m.violations == []


def test_a_reset_request_made_while_the_member_executes_its_reset_is_asked_again():
    """The controller drops a request that arrives before the member's own reset answer (it
    counts it as covered by that reset); when the member had already executed that reset,
    its source stays reset-pending: its reset watch asks again once the region is RUNNING
    (operator-driven mode: nothing else would ever reset it)."""
    m = _machine(mode="operator_driven")
    m.join("m0")
    m.execute("m0")  # reset_to_initial executed, not yet acked
    m.send_reset_request("m0", False)  # a revocation after its reset, sent before the ack
    m.ack("m0", True)
    assert m.core.phase is RegionPhase.RUNNING
    assert m.sim["m0"].reset_pending  # dropped by the controller
    m.settle()
    assert not m.sim["m0"].reset_pending


def _dead_after_its_checkpoint_ack() -> tuple[RegionMachine, int]:
    """m0, m1, m2 run; m0 acks checkpoint N and dies before its RESUME; N completes. Returns N."""
    m = _machine(min_members=3)
    for name in NAMES:
        m.join(name)
    m.settle()
    m.healthy_time_passes(1.0)  # drain
    m.answer_round()  # drains acked: checkpoint
    seq = m.core.cycles.seq
    m.execute("m0")
    m.crash_after_checkpoint_ack("m0")
    m.answer_round()  # m1, m2 ack: N completes, m0 never commits its transaction of N
    assert m.core.checkpoints.last_consistent == seq
    assert ("m0", seq) not in m.committed
    return m, seq


def _drop_the_dead(m: RegionMachine) -> None:
    """The live members heartbeat while the dead m0 falls silent past member_timeout_s (2 s)."""
    for dt in (1.0, 1.0, 0.3):
        m.healthy_time_passes(dt)
    assert "m0" not in m.core.members


def test_a_dead_members_prepared_transaction_is_committed_by_the_first_survivor():
    m, seq = _dead_after_its_checkpoint_ack()
    _drop_the_dead(m)  # the reset hands m0's entry to m1
    assert m.core.phase is RegionPhase.RESETTING
    assert [e["member"] for e in m.sim["m1"].inbox[-1]["resolve"]] == ["m1", "m0"]
    assert [e["member"] for e in m.sim["m2"].inbox[-1].get("resolve", [])] == []  # m2 runs no transactional sink
    m.settle()
    assert ("m0", seq) in m.committed
    assert "m0" not in {e["member"] for e in m.docs[-1]["transactions"]}
    assert m.violations == []


def test_a_resolver_leaving_before_it_answers_leaves_the_dead_members_entry_for_the_next_round():
    m, seq = _dead_after_its_checkpoint_ack()
    _drop_the_dead(m)  # the reset: m1 resolves m0's entry
    m.execute("m2")
    m.ack("m2", True)
    m.leave("m1")  # gracefully, before it executed its reset: the round completes without it
    assert m.core.phase is RegionPhase.RUNNING
    assert ("m0", seq) not in m.committed
    assert {"m0", "m1"} <= {e["member"] for e in m.docs[-1]["transactions"]}  # kept, not dropped
    m.request_reset("m2", False)  # the next round: m2 is the first member and resolves both
    m.settle()
    assert {("m0", seq), ("m1", seq)} <= m.committed
    assert m.violations == []


# Deterministic in ``make test``; MODEL_EXAMPLES=5000 MODEL_RANDOM=1 for a longer, random search.
RegionMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("MODEL_EXAMPLES", "60")),
    stateful_step_count=40,
    derandomize=not os.environ.get("MODEL_RANDOM"),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
)
test_region_core_model = RegionMachine.TestCase


def _cooperative_pair() -> RegionMachine:
    m = _machine(min_members=2)
    m.cooperative = True
    m.join("m0")
    m.join("m1")
    m.settle()
    return m


def test_a_member_restarted_after_its_checkpoint_ack_joins_after_the_cycle_and_publishes_it():
    """Cooperative: m0 acks checkpoint N and dies; its restarted process joins while m1 has not
    answered: the checkpoint completes with m0's answer, then the reset brings the new m0 in
    with its own checkpoint N, so it publishes its interval N (never deletes it)."""
    m = _cooperative_pair()
    m.healthy_time_passes(1.0)  # drain
    m.answer_round()  # drains acked: checkpoint
    seq = m.core.cycles.seq
    m.execute("m0")
    m.crash_after_checkpoint_ack("m0")
    m.restart("m0")
    assert m.core.phase is RegionPhase.CHECKPOINTING
    assert m.core.waiting == {"m1"}
    m.answer_round()  # m1 acks: the checkpoint completes, then the reset for m0
    assert m.core.checkpoints.last_consistent == seq
    assert m.core.checkpoints.members == ["m0", "m1"]
    assert m.core.phase is RegionPhase.RESETTING
    m.settle()
    assert seq in m.published["m0"]
    assert m.violations == []


def test_a_member_restarted_before_its_checkpoint_ack_is_left_out_of_the_cycle():
    """Cooperative: m0 dies while draining; its restarted process joins: the cycle completes with m1
    alone (m0's partitions keep the previous offsets), then the reset with m0's own previous checkpoint."""
    m = _cooperative_pair()
    before = m.core.checkpoints.last_consistent
    m.healthy_time_passes(1.0)  # drain
    seq = m.core.cycles.seq
    m.execute("m1")
    m.ack("m1", True)
    m.die("m0")
    m.restart("m0")  # the cycle goes on without the dead m0: m1 is asked to checkpoint
    assert m.core.phase is RegionPhase.CHECKPOINTING
    assert m.core.waiting == {"m1"}
    assert not any(b["cmd"] in ("drain", "checkpoint") for b in m.sim["m0"].inbox)
    m.answer_round()
    assert m.core.checkpoints.last_consistent == seq
    assert m.core.checkpoints.members == ["m1"]
    assert m.core.checkpoints.own("m0") == before
    reset = [b for b in m.sim["m0"].inbox if b["cmd"] == "reset"]
    assert reset
    assert reset[-1]["own"] == before
    assert not any(b["cmd"] in ("resume", "retire") for b in m.sim["m0"].inbox)
    m.settle()
    assert m.violations == []


def test_a_member_added_during_a_cooperative_cycle_waits_for_it():
    m = _cooperative_pair()
    m.healthy_time_passes(1.0)  # drain
    seq = m.core.cycles.seq
    m.sim["m2"] = SimMember("m2")
    m._join("m2", replace=False)
    assert m.core.phase is RegionPhase.DRAINING
    assert m.core.waiting == {"m0", "m1"}
    m.answer_round()  # drains: checkpoint
    for name in ("m0", "m1"):
        m.execute(name)
        m.ack(name, True)
    assert m.core.checkpoints.last_consistent == seq
    assert m.core.checkpoints.members == ["m0", "m1"]
    assert m.core.phase is RegionPhase.RESETTING
    assert "m2" in m.core.waiting
    assert [b["cmd"] for b in m.sim["m2"].inbox] == ["reset"]  # nothing of the cycle it was not in
    m.settle()
    assert m.violations == []


def test_a_restart_during_a_cycle_of_a_region_that_is_not_cooperative_resets_at_once():
    m = _machine(min_members=2)
    m.join("m0")
    m.join("m1")
    m.settle()
    m.healthy_time_passes(1.0)  # drain
    assert m.core.phase is RegionPhase.DRAINING
    m.die("m0")
    m.restart("m0")
    assert m.core.phase is RegionPhase.RESETTING
    assert m.core.waiting == {"m0", "m1"}


def test_a_zombie_and_the_new_owner_processing_in_the_same_interval_publish_nothing_twice():
    """m1 is given m0's partition while m0 (a zombie) goes on processing it: both claim progress in
    the next checkpoint, which fails (the minimum, the rule before the fence, published record 1 of
    t[0] twice); the reset rewinds both, m0 learns of its loss there, and the region goes on."""
    m = _machine(min_members=2)
    m.join("m0")
    m.join("m1")
    m.settle()
    m.steal("m1", "m0")
    m.settle()
    assert m.continuity_failures == 1
    assert m.violations == []
    assert 0 not in m.sim["m0"].parts
    assert m.core.phase is RegionPhase.RUNNING
    assert m.records[0] == set(range(m.core.checkpoints.offsets[0][2]))  # t[0]: every record once, no gap


def test_a_zombie_claiming_from_behind_the_new_owners_checkpoint_fails_it():
    """m1 takes m0's partition after m1's drain: its first claim is empty and m0's progress is the
    partition's offset; m1 then processes from the old offset: its claim starts behind the region's
    and the checkpoint fails (else records published by m0 would be published again by m1)."""
    m = _machine(min_members=2)
    m.join("m0")
    m.join("m1")
    m.settle()
    m.healthy_time_passes(1.0)  # drain
    for name in ("m0", "m1"):
        m.execute(name)  # each processes its interval and drains
        m.ack(name, True)
    assert m.core.phase is RegionPhase.CHECKPOINTING
    m.steal("m1", "m0")  # after m1's drain: nothing of t[0] in m1's first claim
    m.answer_round()  # the checkpoint completes with m0's progress on t[0]
    assert m.core.phase is RegionPhase.RUNNING
    assert m.continuity_failures == 0
    m.settle()
    assert m.continuity_failures == 1
    assert m.violations == []
    assert m.records[0] == set(range(m.core.checkpoints.offsets[0][2]))
