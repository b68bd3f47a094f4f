"""Pacing of a region's checkpoints after rebalances, from the members' Kafka reports
(no I/O, the loop thread only; owned by :class:`~coordinator.region.state.RegionCore`).

A drain commits offsets, and a commit while the Kafka group rebalances is
refused and makes that consumer rejoin: draining during a join fails the drain,
forces one more reset, and can keep the join from ever finishing. So:

* Members report their Kafka group state in their heartbeats (``kafka``:
  ``member_id``, ``generation``, ``rebalancing``). When every member reports
  one, a periodic drain that is due waits while any member reports
  ``rebalancing`` or the members' generations differ (a rebalance not every
  member has seen yet), for at most ``rebalance_settle_max_s`` past its due
  time; then it starts anyway (a failing drain resets the region).
* A member whose consumer rebalances cooperatively (``cooperative: true`` in
  its report) keeps its partitions and keeps processing through a rebalance,
  and its drain does not commit to Kafka while its group is not stable (the
  checkpoint is the source of truth, cr_consumer/operator/drain_commit.py): its
  rebalance does not defer a checkpoint, only its ``reset_pending`` does (a
  revocation after records were fetched: a reset follows, and its drain would
  fail). Deferring would stop the survivors' output for the whole join.
* While a member has not reported yet (its consumer does not exist yet, or
  its last report was invalid), drains do not wait: it has nothing to commit,
  and the others' reports alone do not say the whole group is settled.

The same reports decide whether a restarted member may remove its dead
predecessor's consumer from the Kafka group (`CheckpointPacing.eviction_blocked`,
see ``EVICT_QUIET_S``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.kafka_report import KafkaReport
from coordinator.region.cadence import MIN_RUN_SHARE
from coordinator.region.model import MemberInfo

log = logging.getLogger(__name__)

#: A restarted member is told its predecessor's Kafka member id (to remove that
#: dead consumer from the group at once) only while the group looks settled:
#: no rejoin hint (a region-triggered Kafka rebalance) in the last
#: EVICT_QUIET_S that some other member has not answered with a settled
#: report since, and no other member reporting a rebalance. Removing a
#: consumer while a rebalance is in progress can leave a tansu group without a
#: leader: the removed consumer stays the leader of the generation being
#: formed, every live consumer joins as a follower, SyncGroup times out and
#: the group rebalances for ever (seen in a reset-storm drill: add-member,
#: kill-member and kill-coordinator within 1 s). The broker's session timeout
#: then removes the dead consumer instead, as without eviction.
EVICT_QUIET_S = 10.0
#: A report counts as "after the rejoin hint" only this long after it: a
#: heartbeat sent before the consumer acted on the hint still says "settled".
HINT_SETTLE_S = 1.0


#: Cooperative members: the first checkpoint after a reset comes this share of
#: the period after the RESUME (see CheckpointPacing.settle_delay): the floor
#: that follows every RESUME (cadence.MIN_RUN_SHARE). A reset rewinds every
#: member to the last checkpoint, so records wait at once: in the gap drills
#: the first member processed records 1-37 ms after the RESUME (60 resets, quiet
#: and loaded machine, bench/gap_timeline.py), well inside a tenth of a 1 s
#: period, and caught up the backlog within 0.13-0.25 s; the first checkpoint
#: publishes part of it, the next one the rest. A quarter period would only make
#: every gap that includes a reset (kill, add, a forced reset) 0.15 s longer.
POST_RESET_PERIOD_SHARE = MIN_RUN_SHARE


class CheckpointPacing:
    """When the next checkpoint may start, and whether the Kafka group is settled.

    `members` is the region core's member table: the core adds and removes
    members and writes their reports; this object only reads it. The counters
    below are written only through this object's methods, by the core."""

    def __init__(self, config: RegionConfig, members: Mapping[str, MemberInfo]) -> None:
        self._config = config
        self._members = members
        #: When the last reset told the consumers to rejoin the group (None: never).
        self.rejoin_hint_at: float | None = None
        self._deferring_since: float | None = None  # a due checkpoint waits for the group to settle

    # ---- inputs (from the core) -------------------------------------------------------
    def rejoin_hinted(self, now: float) -> None:
        self.rejoin_hint_at = now

    def resumed(self) -> None:
        """A reset round completed: a deferral of an earlier due checkpoint is over."""
        self._deferring_since = None

    # ---- decisions ----------------------------------------------------------------------
    def _kafka_reports(self) -> dict[str, KafkaReport] | None:
        """Every member's last Kafka group report, or None when one has not reported
        (or its last report was invalid, coordinator/protocol/region/kafka_report.py step 3)."""
        reports = {n: m.kafka for n, m in self._members.items() if m.kafka is not None}
        if not reports or len(reports) < len(self._members):
            return None
        return reports

    def all_cooperative(self) -> bool:
        """Every member that reported its group state reports cooperative
        rebalancing, and one at least did. A member that has not reported yet
        (a restarted process whose consumer does not exist yet) has nothing to
        commit, so an early drain cannot disturb its join."""
        reports = [m.kafka for m in self._members.values() if m.kafka is not None]
        return bool(reports) and all(r.cooperative for r in reports)

    def group_unsettled(self) -> str | None:
        """Why the Kafka group is rebalancing as the members report it, else None."""
        reports = self._kafka_reports()
        if reports is None:
            return None
        busy = sorted(n for n, r in reports.items() if r.holds_drains)
        if busy:
            return f"members {busy} report a group rebalance in progress"
        eager = [r for r in reports.values() if not r.cooperative]
        generations = {r.generation for r in eager}
        if len(generations) > 1:
            return f"members are in different group generations {sorted(map(str, generations))}"
        return None

    def settle_delay(self) -> float:
        """Time from a RESUME after a reset to the next checkpoint: the period (a
        drain that is due then waits for a settled group, see cycle_due).

        When every member that reports says cooperative rebalancing, a fraction of the
        period (POST_RESET_PERIOD_SHARE): the reset discarded what the members
        produced since the last checkpoint, so the output has already paused
        for up to a period plus the reset; a drain does not disturb their
        rebalances (no Kafka commit while a group is not stable), so the next
        checkpoint comes early and the output resumes sooner."""
        if self.all_cooperative():
            return self._config.period_s * POST_RESET_PERIOD_SHARE
        return self._config.period_s

    def cycle_due(self, now: float, next_cycle_at: float | None) -> bool:
        """Periodic mode: the next checkpoint (due at `next_cycle_at`) is due and the
        group is not rebalancing (or has been for longer than
        rebalance_settle_max_s past the due time)."""
        if next_cycle_at is None or now < next_cycle_at:
            return False
        why = self.group_unsettled()
        if why is None:
            self._deferring_since = None
            return True
        if self._deferring_since is None:
            self._deferring_since = now
            log.info("region %s: checkpoint deferred: %s", self._config.name, why)
        if now - self._deferring_since >= self._config.rebalance_settle_max_s:
            log.warning("region %s: group still not settled after %.1fs (%s); checkpointing anyway",
                        self._config.name, now - self._deferring_since, why)
            self._deferring_since = None
            return True
        return False

    def eviction_blocked(self, joiner: str, now: float) -> str | None:
        """Why the Kafka group may be rebalancing now, so that `joiner` must not remove
        its predecessor's consumer (see EVICT_QUIET_S); None when it may."""
        others = {n: m for n, m in self._members.items() if n != joiner}
        busy = sorted(n for n, m in others.items() if m.kafka is not None and m.kafka.rebalancing)
        if busy:
            return f"members {busy} report a group rebalance"
        hint = self.rejoin_hint_at
        if hint is not None and now - hint < EVICT_QUIET_S:
            silent = sorted(n for n, m in others.items() if m.kafka_at is None or m.kafka_at < hint + HINT_SETTLE_S)
            if silent:
                return f"members {silent} have not reported a settled group since the rejoin hint {now - hint:.1f}s ago"
        return None
