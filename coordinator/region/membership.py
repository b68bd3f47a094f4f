"""Who is in the region: who may join under a member name, and what each member
last said (no I/O, the loop thread only). The controller's side of name claims
(the member's side is ``cr_consumer/runtime/member/name_claim.py``; docs/region.md,
"Member names"). :class:`MemberTable` is owned by
:class:`~coordinator.region.machine.RegionCore`, which decides what a change of
the membership means for the region (a reset, the start, a cycle going on
without a leaver); the table keeps the records (``MemberInfo``).

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
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterator, Mapping

import attrs

from coordinator.protocol.region.kafka_report import KafkaReport
from coordinator.protocol.region.replies import NameHolder, Predecessor
from coordinator.protocol.region.status import MemberStatus
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


__all__ = ["Admission", "JoinKind", "MemberTable", "admit"]
