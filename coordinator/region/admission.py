"""Who may join a region under a member name: the controller's side of name claims
(the member's side is ``cr_consumer/runtime/member/name_claim.py``; docs/region.md,
"Member names"). No I/O and no state: the member table
(:class:`coordinator.region.members.MemberTable`) asks :func:`admit` at every
``region_join`` and keeps the records; ``RegionCore`` acts on the answer.

A join names (member, incarnation); the member table's entry of that name, if
any, is its holder:

1. The holder has the same incarnation: a retry, or a reconnect with a new
   socket (``RETRY``); the entry stays, the reply names the same predecessor
   as the first answer did.
2. The holder is another incarnation heard within ``member_timeout_s``, the
   region is not FAILED, and the joiner did not say ``replace``: ``REFUSED``,
   naming the holder (incarnation, pid, host, silent_s), so that the joiner
   can check whether it is gone (same host, pid not running) and join again
   with ``replace``, or give up naming the live duplicate.
3. No holder: a ``NEW`` member.
4. Otherwise a ``RESTART``: the new incarnation replaces the holder, and its
   reply names the predecessor (incarnation, pid, and the Kafka group member
   id of its last heartbeat report), so that the new process removes that dead
   consumer from the group before it joins (one rebalance instead of two, no
   wait for the broker's session timeout). The Kafka member id is withheld
   (``withheld`` says why) while the group may be rebalancing: an eviction
   then would disturb the rebalance; the session timeout removes it instead.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import attrs

from coordinator.region.model import MemberInfo


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
    predecessor: dict[str, Any] | None = None
    #: REFUSED: the live holder of the name.
    holder: dict[str, Any] | None = None
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
        return Admission(JoinKind.REFUSED, holder={"incarnation": existing.incarnation, "pid": existing.pid,
                                                   "host": existing.host, "silent_s": round(silent_s, 3)})
    predecessor = {"incarnation": existing.incarnation, "pid": existing.pid,
                   "kafka_member_id": existing.kafka.member_id if existing.kafka is not None else None}
    withheld = eviction_blocked() if predecessor["kafka_member_id"] else None
    if withheld:
        predecessor["kafka_member_id"] = None
    return Admission(JoinKind.RESTART, predecessor=predecessor, withheld=withheld or None)
