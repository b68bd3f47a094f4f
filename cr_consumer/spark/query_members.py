"""The query's members in its consumer group and its coordinator group: they
join at the planner's first trigger (its step 1, ``planner.py``) and leave at
its ``close()``.

1. :func:`start_members`: each member is registered in the query's coordinator
   group, given the planner's handover check, and started (its thread joins
   the consumer group).
2. :func:`wait_joined`: each member's first assignment is awaited, all of them
   within one bound (:func:`join_timeout_s`); a member that failed raises its
   own error, one with no assignment in time fails the query
   (:class:`~cr_consumer.spark.planning_failed.PlanningFailed`, saying why a
   join can take that long and which setting shortens it).
3. :func:`leave`: each member is closed (it leaves the consumer group) and
   unregistered from the coordinator group, then the coordinator client is
   closed; an unregistration that fails is logged and the rest goes on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from cr_consumer.kafka.client import TopicPartition
from cr_consumer.spark.client_properties import session_timeout_ms
from cr_consumer.spark.member_requests import HANDOVER_TIMEOUT_S
from cr_consumer.spark.membership import GroupMember
from cr_consumer.spark.options import SourceOptions
from cr_consumer.spark.planning_failed import PlanningFailed

if TYPE_CHECKING:
    from coordinator.client import CoordinatorClient

log = logging.getLogger(__name__)

#: Margin of the first-assignment wait beyond the group's own bounds (the
#: members' start, the broker's JoinGroup/SyncGroup round trips, a loaded machine).
JOIN_MARGIN_S = 30.0


def join_timeout_s(options: SourceOptions) -> float:
    """Bound on the members' first assignment. A join into a group with other
    members completes only when each of them has rejoined: one learns of the
    rebalance at its next heartbeat, then may hold it for up to
    HANDOVER_TIMEOUT_S (a query handing over its batch in flight), and a broker
    may wait up to a session timeout for a member that does not rejoin (tansu
    completes every join that late). So: a session timeout, the handover and a
    margin."""
    return session_timeout_ms(options) / 1000 + HANDOVER_TIMEOUT_S + JOIN_MARGIN_S


def start_members(
    members: list[GroupMember],
    client: CoordinatorClient,
    coordinator_group: str,
    region_index: int,
    handover: Callable[[set[TopicPartition]], bool],
) -> None:
    """Step 1: register and start each of ``members``."""
    for member in members:
        client.register(coordinator_group, region_index, member.name)
        member.handover = handover
        member.start()


def wait_joined(members: list[GroupMember], options: SourceOptions, group: str) -> None:
    """Step 2: return once each of ``members`` has its first assignment from ``group``."""
    bound = join_timeout_s(options)
    deadline = time.monotonic() + bound
    for member in members:
        if not member.wait_joined(max(0.0, deadline - time.monotonic())):
            member.check()
            raise PlanningFailed(
                f"{member.name} got no assignment from group {group!r} within {bound:.0f}s: the group's "
                f"other members did not rejoin (each may hold a rebalance for {HANDOVER_TIMEOUT_S:.0f}s to hand "
                f"over its batch in flight); a broker that completes joins only after a session timeout "
                f"needs a shorter kafka.session.timeout.ms (now {session_timeout_ms(options)} ms)"
            )


def leave(members: list[GroupMember], client: CoordinatorClient, coordinator_group: str) -> None:
    """Step 3: every member leaves its groups, then ``client`` is closed."""
    for member in members:
        member.close()
    for member in members:
        try:
            client.unregister(coordinator_group, member.name)
        except Exception:  # closing: logged with its traceback, the rest goes on
            log.exception("crkafka: unregistering %s failed", member.name)
    client.close()


__all__ = ["JOIN_MARGIN_S", "join_timeout_s", "leave", "start_members", "wait_joined"]
