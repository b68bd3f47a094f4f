"""Who is in the region: who may join under a member name, and what each member
last said (no I/O, the loop thread only). The controller's side of name claims
(the member's side is ``cr_consumer/runtime/member/name_claim.py``; docs/region.md,
"Member names"), and what a change of the membership costs the region.
:class:`MemberTable` is owned by :class:`~coordinator.region.machine.RegionCore`,
which applies the decisions below (`join_step`, `leave_step`); the table keeps
the records (``MemberInfo``).

A join names (member, incarnation); the table's entry of that name, if any, is
its holder. :func:`admit` answers every ``region_join`` against it, and
:meth:`MemberTable.admit` applies the answer:

1. The holder has the same incarnation: a retry, or a reconnect with a new
   socket (``RETRY``); the entry stays with the new socket, the reply names the
   same predecessor as the first answer did.
2. The holder is another incarnation heard within ``member_timeout_s``, the
   region is not FAILED, and the joiner did not say ``replace``: ``REFUSED``,
   naming the holder (incarnation, pid, host, silent_s), so that the joiner
   can check whether it is gone (same host, pid not running) and join again
   with ``replace``, or give up naming the live duplicate. Nothing changes.
3. No holder: a ``NEW`` member, a fresh record.
4. Otherwise a ``RESTART``: the new incarnation replaces the holder with a
   fresh record, and its reply names the predecessor (incarnation, pid, and
   the Kafka group member id of its last heartbeat report), so that the new
   process removes that dead consumer from the group before it joins (one
   rebalance instead of two, no wait for the broker's session timeout). The
   Kafka member id is withheld (``withheld`` says why) while the group may be
   rebalancing: an eviction then would disturb the rebalance; the session
   timeout removes it instead.
5. Every heartbeat of the current incarnation proves the member alive and
   carries its Kafka group report (:meth:`MemberTable.heartbeat`), kept for
   the pacing of checkpoints (``coordinator/region/timing.py``, which reads
   the table) and for a successor's join. An invalid report
   (``coordinator/protocol/region/kafka_report.py``) drops the last one: the
   member counts as not reporting until a valid one arrives.
6. A member silent for ``member_timeout_s`` (:meth:`MemberTable.silent`) or
   leaving is removed (:meth:`MemberTable.remove`) by the core.

What a membership change costs is decided from the region's phase:

7. A member admitted as new or restarted (`join_step`):
   a. the region is FAILED: nothing follows (the join reply says FAILED);
   b. WAITING: the start (`start_due`), once as many members as expected
      (``min_members``, or the members known before a coordinator restart) or
      every member known before the restart are back, or ``join_grace_s``
      after the first join (one member that never comes back cannot stall
      the region); held while the coordinator resolves the region's Kafka
      transactions itself (``RegionCore.hold_start``);
   c. DRAINING or CHECKPOINTING and every reporting member is cooperative: the
      cycle goes on and completes without the joiner, then the region resets
      for it (docs/region.md, cooperative step 10; `CycleRound.member_joined`);
   d. otherwise a membership reset at once (``rejoin``: the others' consumers
      rejoin the Kafka group now, not at their next Kafka heartbeat).
8. A member removed from the table (`leave_step`; graceful: it said so, else
   it fell silent or was dropped):
   a. the region is FAILED: nothing follows;
   b. nobody is left: WAITING for joins;
   c. RESETTING or BACKOFF: the round (or the hold) goes on without it; its
      partitions move to the others by a Kafka rebalance, which asks for its
      own (forced) reset;
   d. a graceful leave, every reporting member cooperative, and the leaver has
      not answered a checkpoint of the cycle in flight
      (`cooperative_leave_keeps_cycle`): no reset, a cycle in flight goes on
      without it (docs/region.md, cooperative step 9);
   e. WAITING: nothing (the region waits for joins);
   f. otherwise a reset: a membership one (``rejoin``) for a graceful leave, a
      failure for a silent member.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Collection, Iterator, Mapping

import attrs

from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.kafka_report import KafkaReport
from coordinator.protocol.region.replies import NameHolder, Predecessor, RegionPhase
from coordinator.protocol.region.status import MemberStatus
from coordinator.region.cycle import CycleRound
from coordinator.region.model import MemberInfo

log = logging.getLogger(__name__)


class JoinKind(enum.Enum):
    RETRY = "retry"
    REFUSED = "refused"
    NEW = "new"
    RESTART = "restart"


@attrs.frozen
class Admission:
    """The answer to one join (see the module docstring)."""

    kind: JoinKind
    #: RETRY, RESTART: the predecessor the joiner's reply names (None: none).
    predecessor: Predecessor | None = None
    #: REFUSED: the live holder of the name.
    holder: NameHolder | None = None
    #: RESTART: why the predecessor's Kafka member id was withheld (None: it was not).
    withheld: str | None = None


def admit(
    existing: MemberInfo | None,
    incarnation: str,
    now: float,
    *,
    replace: bool,
    region_failed: bool,
    member_timeout_s: float,
    eviction_blocked: Callable[[], str | None],
) -> Admission:
    """Steps 1-4 for a join of ``incarnation`` against the name's holder ``existing``.
    ``eviction_blocked`` is asked only for a restart whose predecessor reported a
    Kafka member id: why the group may be rebalancing now, or None."""
    if existing is None:
        return Admission(JoinKind.NEW)
    if existing.incarnation == incarnation:
        return Admission(JoinKind.RETRY, predecessor=existing.predecessor)
    silent_s = now - existing.last_seen
    if not replace and not region_failed and silent_s < member_timeout_s:
        return Admission(
            JoinKind.REFUSED, holder=NameHolder(existing.incarnation, existing.pid, existing.host, round(silent_s, 3))
        )
    kafka_member_id = existing.kafka.member_id if existing.kafka is not None else None
    withheld = eviction_blocked() if kafka_member_id else None
    predecessor = Predecessor(existing.incarnation, existing.pid, None if withheld else kafka_member_id)
    return Admission(JoinKind.RESTART, predecessor=predecessor, withheld=withheld or None)


class MemberTable(Mapping[str, MemberInfo]):
    """One region's members by name (see the module docstring), read as a
    mapping of member name to its record: written only through this table's
    methods; read by the core and by its `CheckpointPacing` (the members'
    Kafka reports). Not thread-safe."""

    def __init__(self, region: str, member_timeout_s: float) -> None:
        self._region = region
        self._member_timeout_s = member_timeout_s
        self._records: dict[str, MemberInfo] = {}

    def __getitem__(self, name: str) -> MemberInfo:
        return self._records[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._records)

    def __len__(self) -> int:
        return len(self._records)

    def admit(
        self,
        name: str,
        identity: bytes,
        incarnation: str,
        now: float,
        *,
        pid: int | None,
        host: str | None,
        replace: bool,
        region_failed: bool,
        eviction_blocked: Callable[[], str | None],
    ) -> Admission:
        """Steps 1-4: `admit` applied to the table. RETRY: the holder's
        socket and last_seen are refreshed; REFUSED: nothing changes (logged);
        NEW and RESTART: a new record under ``name``, naming its predecessor."""
        existing = self._records.get(name)
        admission = admit(
            existing,
            incarnation,
            now,
            replace=replace,
            region_failed=region_failed,
            member_timeout_s=self._member_timeout_s,
            eviction_blocked=eviction_blocked,
        )
        if admission.kind is JoinKind.RETRY and existing is not None:
            existing.identity = identity  # a retry, or a reconnect with a new socket
            existing.last_seen = now
            return admission
        if admission.kind is JoinKind.REFUSED and admission.holder is not None:
            holder = admission.holder
            log.info(
                "region %s: member name %s is held by live incarnation %s (pid %s on %s, heard %.2fs ago); "
                "join of incarnation %s (pid %s on %s) refused",
                self._region,
                name,
                holder.incarnation,
                holder.pid,
                holder.host,
                holder.silent_s,
                incarnation,
                pid,
                host,
            )
            return admission
        if admission.withheld and existing is not None:
            log.info(
                "region %s: not asking %s to remove its predecessor's consumer %s from the group (%s); "
                "the broker's session timeout will",
                self._region,
                name,
                existing.kafka.member_id if existing.kafka is not None else None,
                admission.withheld,
            )
        self._records[name] = MemberInfo(
            name, identity, incarnation, now, pid, predecessor=admission.predecessor, host=host
        )
        return admission

    def heartbeat(
        self,
        name: str,
        identity: bytes,
        incarnation: str,
        now: float,
        kafka: KafkaReport | None = None,
        kafka_invalid: str | None = None,
        dead_letters: int | None = None,
    ) -> bool:
        """Step 5. False when ``name`` is not a member or another incarnation holds it
        (the sender must join again). ``kafka_invalid``: why the heartbeat's report was
        ignored; logged when a member's reports turn invalid and when they are valid again
        (``coordinator/protocol/region/kafka_report.py``)."""
        m = self._records.get(name)
        if m is None or m.incarnation != incarnation:
            return False
        m.identity = identity
        m.last_seen = now
        m.dead_letters = dead_letters
        if kafka_invalid is not None:
            if m.kafka_invalid is None:
                log.warning(
                    "region %s: member %s sent an invalid Kafka group report (%s); ignored: it counts as "
                    "not reporting until a valid one",
                    self._region,
                    name,
                    kafka_invalid,
                )
            m.kafka, m.kafka_at, m.kafka_invalid = None, None, kafka_invalid
        elif kafka is not None:
            if m.kafka_invalid is not None:
                log.info("region %s: member %s reports its Kafka group state again", self._region, name)
            m.kafka, m.kafka_at, m.kafka_invalid = kafka, now, None
        return True

    def touch(self, name: str, now: float) -> bool:
        """Any message of member ``name`` proves it alive; False for a name that is not a member."""
        m = self._records.get(name)
        if m is None:
            return False
        m.last_seen = now
        return True

    def silent(self, now: float) -> list[tuple[str, float]]:
        """Step 6: (name, seconds silent) of the members not heard for ``member_timeout_s``."""
        return [
            (m.name, now - m.last_seen)
            for m in list(self._records.values())
            if now - m.last_seen > self._member_timeout_s
        ]

    def remove(self, name: str) -> bool:
        """Step 6; False when ``name`` was not a member."""
        return self._records.pop(name, None) is not None

    def status(self, now: float) -> dict[str, MemberStatus]:
        """The members as the region's status shows them, by name."""
        return {
            n: MemberStatus(
                pid=m.pid,
                incarnation=m.incarnation,
                silent_s=round(max(0.0, now - m.last_seen), 3),
                kafka=m.kafka,
                kafka_invalid=m.kafka_invalid,
                dead_letters=m.dead_letters,
            )
            for n, m in sorted(self._records.items())
        }


class JoinStep(enum.Enum):
    """Step 7: what follows a new or restarted member's join."""

    NOTHING = "nothing"  # 7a: FAILED
    START = "start"  # 7b: WAITING: start once the expected members are back
    AFTER_CYCLE = "after_cycle"  # 7c: the cycle goes on without it; its reset follows
    RESET = "reset"  # 7d: a membership reset now


class LeaveStep(enum.Enum):
    """Step 8: what follows a member's removal."""

    NOTHING = "nothing"  # 8a, 8e: FAILED, or WAITING with members left
    WAIT = "wait"  # 8b: nobody left
    ROUND_GOES_ON = "round_goes_on"  # 8c: the reset round (or hold) goes on without it
    CYCLE_GOES_ON = "cycle_goes_on"  # 8d: a cooperative graceful leave: no reset
    RESET = "reset"  # 8f


def join_step(phase: RegionPhase, all_cooperative: bool) -> JoinStep:
    """Step 7. ``all_cooperative``: every reporting member reports cooperative
    rebalancing (``CheckpointPacing.all_cooperative``)."""
    if phase is RegionPhase.FAILED:
        return JoinStep.NOTHING
    if phase is RegionPhase.WAITING:
        return JoinStep.START
    if phase in (RegionPhase.DRAINING, RegionPhase.CHECKPOINTING) and all_cooperative:
        return JoinStep.AFTER_CYCLE
    return JoinStep.RESET


def leave_step(
    phase: RegionPhase,
    name: str,
    *,
    graceful: bool,
    members_left: bool,
    all_cooperative: bool,
    cycle: CycleRound,
    waiting: Collection[str],
) -> LeaveStep:
    """Step 8 for ``name`` (already removed from the table); ``waiting``: the
    members the current phase awaits."""
    if phase is RegionPhase.FAILED:
        return LeaveStep.NOTHING
    if not members_left:
        return LeaveStep.WAIT
    if phase is RegionPhase.RESETTING or phase is RegionPhase.BACKOFF:
        return LeaveStep.ROUND_GOES_ON
    if graceful and all_cooperative and cooperative_leave_keeps_cycle(phase, name, cycle, waiting):
        return LeaveStep.CYCLE_GOES_ON
    if phase is RegionPhase.WAITING:
        return LeaveStep.NOTHING
    return LeaveStep.RESET


def cooperative_leave_keeps_cycle(phase: RegionPhase, name: str, cycle: CycleRound, waiting: Collection[str]) -> bool:
    """Step 8d, in a cooperative region: the leaver has not answered a checkpoint
    of the cycle in flight (RUNNING; DRAINING, where no offsets are collected
    yet; CHECKPOINTING while it is still awaited). No checkpoint then holds its
    offsets beyond the last consistent one: its partitions keep that
    checkpoint's offsets (carried forward) until their next owners, assigned by
    the Kafka rebalance, start there; what it processed since is never published
    (its leave reply names its last completed checkpoint)."""
    if phase is RegionPhase.RUNNING or phase is RegionPhase.DRAINING:
        return True
    if phase is RegionPhase.CHECKPOINTING and cycle.is_joiner(name):
        # a joiner whose predecessor did not answer: not in the cycle
        return not cycle.has_checkpointed(name)
    return phase is RegionPhase.CHECKPOINTING and name in waiting


def start_due(
    members: Collection[str], known: Collection[str], config: RegionConfig, first_join_at: float | None, now: float
) -> bool:
    """Step 7b: whether the WAITING region starts now, with ``members`` joined;
    ``known``: the members of the durable document (before a coordinator
    restart); ``first_join_at``: the first join since the region waits."""
    if not members:
        return False
    expected = max(config.min_members, len(known))
    all_known_back = bool(known) and set(known) <= set(members)
    grace_over = first_join_at is not None and now - first_join_at >= config.join_grace_s
    return len(members) >= expected or all_known_back or grace_over


__all__ = [
    "Admission",
    "JoinKind",
    "JoinStep",
    "LeaveStep",
    "MemberTable",
    "admit",
    "cooperative_leave_keeps_cycle",
    "join_step",
    "leave_step",
    "start_due",
]
