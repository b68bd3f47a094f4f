"""The region controller's reset round and its pacing after rebalances (a mixin of
:class:`~coordinator.region.state.RegionCore`; no I/O, the loop thread only).

The reset:

1. Cause: a member's request (``force`` for rebalances: the consecutive counter
   goes to 0), a failure (the counter goes up), or a membership change (the
   counter is unchanged). While a reset is running, further requests do not
   stack: they are logged and dropped, except one from a member that already
   answered the round (the round restarts). A request that arrived before the
   asker's own answer but was about a revocation after its reset is therefore
   dropped: the member asks again while its source stays in CR_RESET_PENDING
   (``cr_consumer/runtime/member/reset_watch.py``). A member joining during a reset
   restarts the reset round (new attempt) so that it takes part.
2. Past ``max_consecutive_resets`` the region goes to FAILED: it stays there
   (status, metrics; the runner exits non-zero).
3. ``attempt = next_attempt`` (persisted; attempts are never reused, so two
   rounds never mix in a merge), then RESET(last consistent seq, attempt,
   checkpoint members, merged offsets, own) to every member, or
   RESET_TO_INITIAL (attempt) when there is no consistent checkpoint yet.
   ``own`` is the member's own last completed checkpoint (``own_checkpoint``:
   the last consistent one, an earlier one for a member that was away, None
   for a new member): its non-source operators go back to their data of
   ``own``, so intervals it sealed there are published, never deleted.
   A reset caused by a member joining (new or restarted) or leaving gracefully
   carries ``rejoin: true``: a Kafka consumer is joining or has left the
   group, so a rebalance follows; each member asks its consumer to rejoin the
   group at once, so it is revoked during this reset (nothing fetched: no
   further forced reset) instead of at its next Kafka heartbeat, after the
   reset, with records fetched (one more forced reset round).
4. All members answered within ``reset_timeout_s``: RESUME(complete=None),
   phase RUNNING. A failed or late answer retries from step 1 as a failure.

Pacing the next checkpoint (a drain commits offsets, and a commit while the
Kafka group rebalances is refused and makes that consumer rejoin: draining
during a join fails the drain, forces one more reset, and can keep the join
from ever finishing):

* Members report their Kafka group state in their heartbeats (``kafka``:
  ``member_id``, ``generation``, ``rebalancing``). When every member reports
  one, a periodic drain that is due waits while any member reports
  ``rebalancing`` or the members' generations differ (a rebalance not every
  member has seen yet), for at most ``rebalance_settle_max_s`` past its due
  time; then it starts anyway (a failing drain resets the region, as before).
* When a member does not report (an older member), the next checkpoint after
  forced (rebalance) resets waits ``rebalance_settle_s``, doubling per forced
  reset since the last completed checkpoint, up to ``rebalance_settle_max_s``.

The same reports decide whether a restarted member may remove its dead
predecessor's consumer from the Kafka group (``_group_unsettled``, used by the
join in region_state.py; see ``EVICT_QUIET_S``).
"""

from __future__ import annotations

import logging

from coordinator.region.commands import Reset, ResetToInitial, Resume
from coordinator.region.model import Phase, ResetKind

log = logging.getLogger("coordinator.region.state")


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


class ResetMixin:
    """Reset rounds and checkpoint pacing; state lives in RegionCore."""

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
        if kind is ResetKind.FORCE:
            self.consecutive_resets = 0
            self.forced_since_checkpoint += 1
        elif kind is ResetKind.FAILURE:
            self.consecutive_resets += 1
        if self.consecutive_resets > self.config.max_consecutive_resets:
            self.fail(f"{self.consecutive_resets - 1} consecutive resets did not bring the region "
                      f"back (max {self.config.max_consecutive_resets}); last cause: {why}", now)
            return
        self.attempt = self.next_attempt
        self.next_attempt += 1
        self.resets += 1
        self._save()
        self._goto(Phase.RESETTING, f"attempt {self.attempt} ({kind.value}, consecutive "
                                    f"{self.consecutive_resets}): {why}")
        if self.reset_started_at is None:
            self.reset_started_at = now
        self._on_event("reset", {"attempt": self.attempt, "cause": kind.value, "why": why,
                                 "seq": self.last_consistent})
        self.waiting = set(self.members)
        self.deadline = now + self.config.reset_timeout_s
        if rejoin:
            self.rejoin_hint_at = now
        if self.last_consistent is None:
            self._broadcast(self.waiting, ResetToInitial(self.attempt, rejoin=rejoin))
        else:
            for name in sorted(self.waiting):  # each member's own checkpoint (own_checkpoint)
                self._send(name, Reset(self.last_consistent, self.attempt, self.checkpoint_members,
                                       self.checkpoint_offsets, self.own_checkpoint(name), rejoin=rejoin))

    def _maybe_reset_done(self, now: float) -> None:
        if self.phase is not Phase.RESETTING or self.waiting:
            return
        took = now - (self.reset_started_at or now)
        self.reset_started_at = None
        self._goto(Phase.RUNNING, f"reset attempt {self.attempt} complete ({took * 1000:.0f} ms since the first cause)")
        self._on_event("resume", {"attempt": self.attempt, "reset_ms": round(took * 1000, 1)})
        self._broadcast(self.members, Resume(None))
        self.last_resume_at = now
        self.deadline = None
        self.next_cycle_at = now + self.settle_delay()
        self._deferring_since = None

    # ------------------------------------------------------------------ pacing
    def _kafka_reports(self) -> dict[str, dict] | None:
        """Every member's last Kafka group report, or None when one has not reported."""
        reports = {n: m.kafka for n, m in self.members.items()}
        if not reports or any(r is None for r in reports.values()):
            return None
        return reports

    def group_unsettled(self) -> str | None:
        """Why the Kafka group is rebalancing as the members report it, else None."""
        reports = self._kafka_reports()
        if reports is None:
            return None
        busy = sorted(n for n, r in reports.items() if r.get("rebalancing"))
        if busy:
            return f"members {busy} report a group rebalance in progress"
        generations = {r.get("generation") for r in reports.values()}
        if len(generations) > 1:
            return f"members are in different group generations {sorted(map(str, generations))}"
        return None

    def settle_delay(self) -> float:
        """Time from a RESUME after a reset to the next checkpoint: the period when
        every member reports its group state (the drain then waits for a settled
        group, see cycle_due), else longer after rebalances (rebalance_settle_s)."""
        n = self.forced_since_checkpoint
        if n == 0 or self._kafka_reports() is not None:
            return self.config.period_s
        settle = min(self.config.rebalance_settle_max_s, self.config.rebalance_settle_s * 2 ** (n - 1))
        return max(self.config.period_s, settle)

    def cycle_due(self, now: float) -> bool:
        """Periodic mode: the next checkpoint is due and the group is not rebalancing
        (or has been for longer than rebalance_settle_max_s past the due time)."""
        if self.next_cycle_at is None or now < self.next_cycle_at:
            return False
        why = self.group_unsettled()
        if why is None:
            self._deferring_since = None
            return True
        if self._deferring_since is None:
            self._deferring_since = now
            log.info("region %s: checkpoint deferred: %s", self.config.name, why)
        if now - self._deferring_since >= self.config.rebalance_settle_max_s:
            log.warning("region %s: group still not settled after %.1fs (%s); checkpointing anyway",
                        self.config.name, now - self._deferring_since, why)
            self._deferring_since = None
            return True
        return False

    def _group_unsettled(self, joiner: str, now: float) -> str | None:
        """Why the Kafka group may be rebalancing now (see EVICT_QUIET_S), else None."""
        others = {n: m for n, m in self.members.items() if n != joiner}
        busy = sorted(n for n, m in others.items() if (m.kafka or {}).get("rebalancing"))
        if busy:
            return f"members {busy} report a group rebalance"
        hint = self.rejoin_hint_at
        if hint is not None and now - hint < EVICT_QUIET_S:
            silent = sorted(n for n, m in others.items() if m.kafka_at is None or m.kafka_at < hint + HINT_SETTLE_S)
            if silent:
                return f"members {silent} have not reported a settled group since the rejoin hint {now - hint:.1f}s ago"
        return None
