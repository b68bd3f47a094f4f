"""The region's member table: who is in the region, and what each member last said.

No I/O, the coordinator's loop thread only. :class:`MemberTable` is owned by
:class:`~coordinator.region.state.RegionCore`, which decides what a change of
the membership means for the region (a reset, the start, a cycle going on
without a leaver); the table only keeps the records (``MemberInfo``):

1. A join is admitted by ``coordinator/region/admission.py`` against the
   name's current holder (:meth:`MemberTable.admit`): a retry refreshes the
   holder's socket, a refusal leaves it (logged with the holder), a new
   member or a restart (new incarnation) puts a fresh record in its place.
2. Every heartbeat of the current incarnation proves the member alive and
   carries its Kafka group report (:meth:`MemberTable.heartbeat`), kept for
   the pacing of checkpoints (``coordinator/region/pacing.py``, which reads
   :attr:`MemberTable.members`) and for a successor's join. An invalid report
   (``coordinator/protocol/region/kafka_report.py``) drops the last one: the member
   counts as not reporting until a valid one arrives.
3. A member silent for ``member_timeout_s`` (:meth:`MemberTable.silent`) or
   leaving is removed (:meth:`MemberTable.remove`) by the core.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from coordinator.protocol.region.kafka_report import KafkaReport
from coordinator.region.admission import Admission, JoinKind, admit
from coordinator.region.model import MemberInfo

log = logging.getLogger(__name__)


class MemberTable:
    """One region's members by name (see the module docstring). Not thread-safe."""

    #: Member name -> its record: written only through this table's methods; read
    #: by the core and by its `CheckpointPacing` (the members' Kafka reports).
    members: dict[str, MemberInfo]

    def __init__(self, region: str, member_timeout_s: float) -> None:
        self._region = region
        self._member_timeout_s = member_timeout_s
        self.members = {}

    def admit(self, name: str, identity: bytes, incarnation: str, now: float, *, pid: int | None,
              host: str | None, replace: bool, region_failed: bool,
              eviction_blocked: Callable[[], str | None]) -> Admission:
        """Step 1: ``admission.admit`` applied to the table. RETRY: the holder's
        socket and last_seen are refreshed; REFUSED: nothing changes (logged);
        NEW and RESTART: a new record under ``name``, naming its predecessor."""
        existing = self.members.get(name)
        admission = admit(existing, incarnation, now, replace=replace, region_failed=region_failed,
                          member_timeout_s=self._member_timeout_s, eviction_blocked=eviction_blocked)
        if admission.kind is JoinKind.RETRY and existing is not None:
            existing.identity = identity  # a retry, or a reconnect with a new socket
            existing.last_seen = now
            return admission
        if admission.kind is JoinKind.REFUSED and admission.holder is not None:
            holder = admission.holder
            log.info("region %s: member name %s is held by live incarnation %s (pid %s on %s, heard %.2fs ago); "
                     "join of incarnation %s (pid %s on %s) refused", self._region, name, holder["incarnation"],
                     holder["pid"], holder["host"], holder["silent_s"], incarnation, pid, host)
            return admission
        if admission.withheld and existing is not None:
            log.info("region %s: not asking %s to remove its predecessor's consumer %s from the group (%s); "
                     "the broker's session timeout will", self._region, name,
                     existing.kafka.member_id if existing.kafka is not None else None, admission.withheld)
        self.members[name] = MemberInfo(name, identity, incarnation, now, pid, predecessor=admission.predecessor,
                                        host=host)
        return admission

    def heartbeat(self, name: str, identity: bytes, incarnation: str, now: float,
                  kafka: KafkaReport | None = None, kafka_invalid: str | None = None) -> bool:
        """Step 2. False when ``name`` is not a member or another incarnation holds it
        (the sender must join again). ``kafka_invalid``: why the heartbeat's report was
        ignored; logged when a member's reports turn invalid and when they are valid again
        (``coordinator/protocol/region/kafka_report.py``, step 3)."""
        m = self.members.get(name)
        if m is None or m.incarnation != incarnation:
            return False
        m.identity = identity
        m.last_seen = now
        if kafka_invalid is not None:
            if m.kafka_invalid is None:
                log.warning("region %s: member %s sent an invalid Kafka group report (%s); ignored: it counts as "
                            "not reporting until a valid one", self._region, name, kafka_invalid)
            m.kafka, m.kafka_at, m.kafka_invalid = None, None, kafka_invalid
        elif kafka is not None:
            if m.kafka_invalid is not None:
                log.info("region %s: member %s reports its Kafka group state again", self._region, name)
            m.kafka, m.kafka_at, m.kafka_invalid = kafka, now, None
        return True

    def touch(self, name: str, now: float) -> bool:
        """Any message of member ``name`` proves it alive; False for a name that is not a member."""
        m = self.members.get(name)
        if m is None:
            return False
        m.last_seen = now
        return True

    def silent(self, now: float) -> list[tuple[str, float]]:
        """Step 3: (name, seconds silent) of the members not heard for ``member_timeout_s``."""
        return [(m.name, now - m.last_seen) for m in list(self.members.values())
                if now - m.last_seen > self._member_timeout_s]

    def remove(self, name: str) -> bool:
        """Step 3; False when ``name`` was not a member."""
        return self.members.pop(name, None) is not None

    def status(self, now: float) -> dict[str, dict[str, Any]]:
        """The members as the region's status shows them."""
        return {
            n: {"pid": m.pid, "incarnation": m.incarnation, "silent_s": round(now - m.last_seen, 3),
                "kafka": m.kafka.to_dict() if m.kafka is not None else None,
                "kafka_invalid": m.kafka_invalid}
            for n, m in sorted(self.members.items())
        }


__all__ = ["MemberTable"]
