"""A member's Kafka group state, for the region controller (member side).

Three things the control channel (``control.py``) does with the member's Kafka
source (a ``ConsumerOperator``):

* ``group_report(source)``: what each ``region_heartbeat`` carries as
  ``kafka`` (a ``KafkaReport``: ``{member_id, generation, rebalancing}``). ``rebalancing`` is true
  while the consumer is not in a stable group generation (joining, or revoked
  and not yet assigned again) or the source waits for a reset after a
  revocation. The controller does not start a periodic drain while a member
  reports it (a commit during a join is refused and makes that consumer
  rejoin), see ``coordinator/region/timing.py``. A source with cooperative
  rebalancing adds ``cooperative: true`` and ``reset_pending`` (waits for a
  reset after a revocation): its drains go on through a rebalance (no Kafka
  commit until the group is stable), so only ``reset_pending`` defers them.
* ``evict_predecessor(config, member_id)``: run by a restarted member when
  the controller's join reply names the Kafka member id of the incarnation it
  replaces (a process that was killed). It removes that consumer from the
  group (LeaveGroup on its behalf, the admin API's ``remove_group_members``),
  before this process's own consumer joins: otherwise the group first forms a
  generation that still holds the dead consumer (its partitions unconsumed)
  and rebalances once more when the broker's session timeout expires, each
  rebalance forcing a region reset. Failure (old broker, no access, the member
  already gone) is logged and the member goes on: the session timeout then
  removes the dead consumer as before.
* ``request_rejoin(source)``: on a reset command with ``rejoin: true`` (a
  member joined or left gracefully, see ``coordinator/region/reset.py``);
  eager sources only.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from coordinator.protocol.region.kafka_report import KafkaReport

if TYPE_CHECKING:
    from cr_consumer.kafka.client import GroupMembership
    from cr_consumer.operator.config import OperatorConfig
    from cr_consumer.operator.states import ClientState

log = logging.getLogger(__name__)

#: Bound on the eviction (find the group coordinator + LeaveGroup), so a broker
#: that does not answer delays the restarted member's start by at most this.
EVICT_TIMEOUT_MS = 3000


class GroupSource(Protocol):
    """What these functions read of the member's Kafka source (a ``ConsumerOperator``)."""

    @property
    def group_metadata(self) -> GroupMembership | None:
        """The group snapshot the event thread takes after each poll (None before the first)."""
        ...

    @property
    def joining(self) -> bool: ...

    @property
    def state(self) -> ClientState | None: ...

    @property
    def cooperative(self) -> bool:
        """The consumer rebalances incrementally (OperatorConfig.cooperative)."""
        ...

    def request_rejoin(self) -> bool:
        """Queue a rejoin for the event thread; False when there is no consumer (yet)."""
        ...


def group_report(source: GroupSource) -> KafkaReport | None:
    """The source's Kafka group state, or None before its consumer exists.
    Reads the snapshot the event thread takes after each poll: the consumer
    itself is only touched on the event thread."""
    meta = source.group_metadata
    if meta is None:
        return None
    from cr_consumer.operator.states import ClientState

    reset_pending = source.state is ClientState.CR_RESET_PENDING
    rebalancing = meta.rebalancing or source.joining or reset_pending
    if source.cooperative:
        return KafkaReport(meta.member_id, meta.generation, rebalancing, cooperative=True, reset_pending=reset_pending)
    return KafkaReport(meta.member_id, meta.generation, rebalancing)


def request_rejoin(source: GroupSource) -> bool:
    """Ask the source's consumer to rejoin its group at its next poll (the
    controller's ``rejoin`` hint on a reset: a consumer joined or left the group,
    so a rebalance is coming; being revoked now, during the reset, costs no
    further reset). Queued as an event for the source's event thread.
    False when there is no consumer (yet), or when the source rebalances
    incrementally: a survivor loses no partition in a cooperative rebalance
    (the broker brings it in through its heartbeat), and its rejoin at the very
    moment a restarted member removes its predecessor's consumer (the same
    join starts both) can leave a tansu group led by the removed consumer, a
    join that never completes (docs/drills.md, findings)."""
    if source.cooperative:
        return False
    return source.request_rejoin()


def evict_predecessor(config: OperatorConfig, member_id: str) -> bool:
    """Remove ``member_id`` (a dead predecessor's consumer) from ``config.group_id``
    (:mod:`cr_consumer.kafka.kafka_python.admin`). True when the broker confirmed
    it; False (logged) otherwise."""
    from cr_consumer.kafka.kafka_python.admin import admin_settings, remove_group_member

    try:
        settings = admin_settings(
            config.bootstrap_servers,
            dict(config.consumer_properties),
            request_timeout_ms=EVICT_TIMEOUT_MS,
            client_id=f"{config.operator_name}-evict",
        )
        error = remove_group_member(settings, config.group_id, member_id, "restarted member")
        if error is None:
            log.info(
                "%s: removed the predecessor's consumer %s from group %s",
                config.operator_name,
                member_id,
                config.group_id,
            )
            return True
        log.info(
            "%s: the broker did not remove %s from group %s (%s); the session timeout will",
            config.operator_name,
            member_id,
            config.group_id,
            error,
        )
        return False
    except Exception:  # an optimisation: the session timeout removes it anyway
        log.warning(
            "%s: could not remove the predecessor's consumer %s from group %s; the broker's session timeout will",
            config.operator_name,
            member_id,
            config.group_id,
            exc_info=True,
        )
        return False
