"""When a region may act: the grid of periodic drains, the pacing of drains
around Kafka rebalances, and the hold after repeated failures (no I/O, the
loop thread only; owned by the cycle and reset drives of
:class:`~coordinator.region.machine.RegionCore`).

Cadence (`slot_of`, `next_drain`). A checkpoint cycle publishes at its RESUME.
Were the next drain due a period after that RESUME, the interval between two
publishes would be the period plus the checkpoint's own time, which grows with
the machine's load (0.5-0.9 s checkpoints made 1.5-1.9 s intervals at a 1 s
period). So drains start on a grid instead:

1. A periodic drain fills a *slot*: the latest point of the grid ``due + k *
   period`` (k >= 0) at or before its start, ``due`` being when it was due. A
   drain a little late (the loop's tick, a short deferral while the Kafka group
   rebalances) keeps the grid's phase, so the lateness does not add up from
   cycle to cycle; the slots that passed while it waited are skipped, never
   run one after the other afterwards (no catch-up burst). A drain deferred by
   the pacing below fills the slot of its start.
2. At the RESUME the next drain is due one period after that slot, but never
   sooner than ``MIN_RUN_SHARE`` of the period after the RESUME (the floor):
   members always get a window to process. When the floor decides, the slots
   the checkpoint overran are skipped and the grid starts again at the floor.
3. A drain that did not start from the grid (a reset's RESUME, an
   operator-driven trigger) is not on it: after a reset the next drain is due
   at the reset's pacing delay (``CheckpointPacing.settle_delay``), and the
   grid starts from that drain.

Pacing (`CheckpointPacing`). A drain commits offsets, and a commit while the
Kafka group rebalances is refused and makes that consumer rejoin: draining
during a join fails the drain, forces one more reset, and can keep the join
from ever finishing. So:

1. Members report their Kafka group state in their heartbeats (``kafka``:
   ``member_id``, ``generation``, ``rebalancing``). When every member reports
   one, a periodic drain that is due waits while any member reports
   ``rebalancing`` or the members' generations differ (a rebalance not every
   member has seen yet), for at most ``rebalance_settle_max_s`` past its due
   time; then it starts anyway (a failing drain resets the region).
2. A member whose consumer rebalances cooperatively (``cooperative: true`` in
   its report) keeps its partitions and keeps processing through a rebalance,
   and its drain does not commit to Kafka while its group is not stable (the
   checkpoint is the source of truth, cr_consumer/operator/drain_commit.py): its
   rebalance does not defer a checkpoint, only its ``reset_pending`` does (a
   revocation after records were fetched: a reset follows, and its drain would
   fail). Deferring would stop the survivors' output for the whole join.
3. While a member has not reported yet (its consumer does not exist yet, or
   its last report was invalid), drains do not wait: it has nothing to commit,
   and the others' reports alone do not say the whole group is settled.
4. The same reports decide whether a restarted member may remove its dead
   predecessor's consumer from the Kafka group (`CheckpointPacing.eviction_blocked`,
   see ``EVICT_QUIET_S``).

Backoff (`ResetHold`, `failure_backoff_s`). A failure reset completes in
milliseconds; without a pause a failure that persists for a second burns
``max_consecutive_resets`` in ~100 ms, and one that comes back after every
reset while other partitions move resets at full speed for ever. So:

1. The k-th failure (k >= 2) of a failure streak (counted by the reset rounds,
   ``coordinator/region/reset.py`` step 2) holds the region: its reset round
   runs at once (members stop and reset, their permits stay blocked), and the
   RESUME waits until ``min(reset_backoff_s * 2^(k-2), reset_backoff_max_s)``
   after the failure. A round that answers before then moves the region from
   RESETTING to BACKOFF; the controller's tick sends the RESUME when the hold
   is over. Forced and membership resets are never held by themselves; a
   forced reset ends the streak and with it the hold. During a hold a member
   that leaves or falls silent is dropped (the hold goes on for the others),
   triggers are answered ``not_now`` and acks of earlier commands are stale;
   a join, a forced reset and another failure: docs/region.md, "The reset"
   step 2, with the worked defaults.
2. Durable: the length of the hold in force is in the region document
   (``backoff_s``, null without one) from the failure until the RESUME, and
   the streak always (``failure_streak``). A coordinator restarted during a
   hold holds its first round (the membership reset that brings the members
   back) that long again, from that round's start: a restart never shortens a
   hold (it may lengthen it by the time already held).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

import attrs

from coordinator.protocol.common.backoff import doubled
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.kafka_report import KafkaReport
from coordinator.region.model import MemberInfo, ResetKind

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------- cadence
#: The floor of cadence step 2, as a share of the period: at least this long between a
#: RESUME and the next drain. It prevents a starved region: with checkpoints as
#: long as the period, a drain due right at the RESUME would leave the members
#: no time to process, and the next checkpoint would publish next to nothing.
#: A tenth keeps the interval between publishes at the period for checkpoints
#: of up to 0.9 period (the loaded machine's 0.5-0.9 s at 1 s) and beyond that
#: stretches the cycle by only 0.1 period; the members still process at least
#: a tenth of the time when every checkpoint takes a whole period (with the
#: RESUME-based rule they had at least half of it, at twice the interval).
MIN_RUN_SHARE = 0.1


@attrs.frozen
class Slot:
    """The grid slot a periodic drain fills (cadence step 1)."""

    at: float
    #: Slots of the grid that passed before the drain started (skipped).
    skipped: int


@attrs.frozen
class NextDrain:
    """When the next periodic drain is due after a checkpoint's RESUME (cadence step 2)."""

    at: float
    #: True when the floor decided (the checkpoint overran the period).
    floored: bool
    #: Slots of the grid the checkpoint overran (skipped).
    skipped: int


def slot_of(due: float | None, started: float, period_s: float) -> Slot:
    """Cadence step 1: the slot of a drain that starts at ``started`` and was due at ``due``
    (None, or a due time after ``started``: it was not due on the grid, the slot is
    its start)."""
    if due is None or started < due:
        return Slot(started, 0)
    k = math.floor((started - due) / period_s)
    return Slot(due + k * period_s, k)


def next_drain(slot: float, resumed_at: float, period_s: float) -> NextDrain:
    """Cadence step 2: the next drain after a checkpoint whose drain filled ``slot`` and
    whose RESUME went out at ``resumed_at``."""
    on_grid = slot + period_s
    floor = resumed_at + MIN_RUN_SHARE * period_s
    if on_grid >= floor:
        return NextDrain(on_grid, False, 0)
    return NextDrain(floor, True, max(1, math.floor((floor - slot) / period_s)))


# ---------------------------------------------------------------------- pacing
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
#: that follows every RESUME (MIN_RUN_SHARE). A reset rewinds every
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
        (or its last report was invalid, ``coordinator/protocol/region/kafka_report.py``)."""
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
            log.warning(
                "region %s: group still not settled after %.1fs (%s); checkpointing anyway",
                self._config.name,
                now - self._deferring_since,
                why,
            )
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


# ---------------------------------------------------------------------- backoff
def failure_backoff_s(streak: int, config: RegionConfig) -> float:
    """Backoff step 2: the hold after the ``streak``-th failure of a streak (0: none); a
    pure function of the streak (the durable count), the project's one doubling formula."""
    if streak < 2:
        return 0.0
    return doubled(config.reset_backoff_s, streak - 2, config.reset_backoff_max_s)


class ResetHold:
    """The hold in force (backoff steps 1-2): when the RESUME may be sent, and how long
    the hold is. ``ResetDrive`` (``coordinator/region/reset.py``) calls `on_cause` for every counted cause,
    `left` when a round has every answer and on every tick while holding,
    `resumed` at the RESUME, `restore` once after a coordinator restart."""

    def __init__(self, config: RegionConfig) -> None:
        self._config = config
        self.until: float | None = None  # the RESUME's earliest time (None: no hold)
        self.length_s: float | None = None  # the hold's length (durable until the RESUME)
        self._restored_s: float | None = None  # a hold to apply to the first round after a restart

    def on_cause(self, kind: ResetKind, streak: int, consecutive: int, now: float) -> None:
        """A reset cause, counted (``streak`` and ``consecutive`` after the count). Backoff steps 1-4."""
        if kind is ResetKind.FORCE:
            if self.length_s is not None:
                log.info(
                    "region %s: a forced reset clears the backoff hold of %.2fs",
                    self._config.name,
                    self.length_s,
                )
            self._clear()
        elif kind is ResetKind.FAILURE:
            self._restored_s = None
            delay = failure_backoff_s(streak, self._config)
            if delay > 0:
                self.until = max(self.until or 0.0, now + delay)
                self.length_s = delay
                log.info(
                    "region %s: failure %d of a failure streak (%d since the last progress, max %d): its RESUME "
                    "waits %.2fs (backoff)",
                    self._config.name,
                    streak,
                    consecutive,
                    self._config.max_consecutive_resets,
                    delay,
                )
            else:  # the first failure of a streak: no hold (a restored one is dropped with the old streak)
                self._clear()
        elif self._restored_s is not None:  # membership: the first round after a restart (backoff step 2)
            self.until, self.length_s = now + self._restored_s, self._restored_s
            self._restored_s = None
            log.info(
                "region %s: the first reset after a coordinator restart holds its RESUME %.2fs (the hold in "
                "force when the coordinator stopped)",
                self._config.name,
                self.length_s,
            )

    def left(self, now: float) -> float | None:
        """Seconds until the RESUME may be sent; None when it may be sent now."""
        if self.until is None or now >= self.until:
            return None
        return self.until - now

    def resumed(self) -> float | None:
        """The RESUME is sent: the hold is over. Returns its length (None: none)."""
        length = self.length_s
        self._clear()
        return length

    def restore(self, length_s: float | None) -> None:
        """Backoff step 4: from the durable document, before any round."""
        self._restored_s = length_s
        self.length_s = length_s

    def _clear(self) -> None:
        self.until = None
        self.length_s = None
        self._restored_s = None
