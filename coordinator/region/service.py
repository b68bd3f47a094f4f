"""The region controller: a coordinator service that drives consistent regions.

It runs on the coordinator's loop thread (``server.add_service(RegionControllerService())``)
and holds one :class:`~coordinator.region.machine.RegionCore` per region name; the
phases are numbered in ``coordinator/region/machine.py``, the cycle in
``coordinator/region/cycle.py``, the reset round in ``coordinator/region/reset.py``.
This module is the I/O around it: the message handlers (the requests, their
replies and the pushed commands are in ``coordinator/protocol/region/`` and
docs/protocol.md, "Region controller messages"), the pushes and durability; what
the status replies and the metrics show of the regions is
``coordinator/region/reporting.py``'s.

1. Join: the first join of a region creates it with the joiner's config; a
   later join with other settings gets ``INVALID`` naming them, another
   ``index`` ``CR_INDEX_MISMATCH``. Every other request of a member that has
   not joined (this incarnation) gets ``NOT_REGISTERED``: it joins again.
2. Durability: the region document (namespace ``region``) is written with
   ``store.put_document`` and the server syncs the store before it sends any
   reply or push queued in the same loop iteration, so "seq is consistent" is
   on disk before a RESUME naming it leaves the process. On start
   (``on_loaded``) every stored region is rebuilt in phase WAITING.
3. Limits (``LIMIT_EXCEEDED``, nothing changed): a join that would create a
   region beyond ``limits.max_regions`` or add a member beyond
   ``limits.max_members_per_group``. A region without members for
   ``limits.region_expiry_s`` is dropped with its document. A region whose
   tick raises goes FAILED with the reason (logged with the traceback); the
   others and the coordinator go on.
4. Failure: commands are pushes and may be lost (a member's socket
   reconnecting); the member's silence then fails the phase by its timeout
   and the region resets.
5. Abandoned transactions: at each tick a region without members is asked
   whether the coordinator resolves its Kafka transactions itself
   (``coordinator/region/abandoned.py``); a job holds the region's start and
   runs on the service's worker thread (``coordinator/region/txn_worker.py``,
   started with the first job, stopped by ``on_stop``); a member that joins
   cancels it; its outcome is applied on the loop thread (the entries it
   resolved are dropped and persisted) and releases the hold.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import attrs

from coordinator.protocol.region.commands import COMMAND_TYPE, RegionCommand, encode_command
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.messages import (
    RegionAck,
    RegionHeartbeat,
    RegionJoin,
    RegionMemberMessage,
    RegionResetRequest,
    RegionStatusRequest,
)
from coordinator.protocol.region.replies import (
    RegionHeartbeatReply,
    RegionJoinReply,
    RegionLeaveReply,
    RegionPhase,
    RegionPhaseReply,
    RegionTriggerReply,
)
from coordinator.protocol.region.status import RegionReport, RegionsReport
from coordinator.protocol.wire.errors import CrIndexMismatch, Invalid, NotRegistered
from coordinator.protocol.wire.status import CoordinatorStatus
from coordinator.region.abandoned import AbandonedResolve, JobOutcome
from coordinator.region.machine import RegionCore
from coordinator.region.reporting import RegionReporter, update_region_metrics
from coordinator.region.txn_client import TxnClientConfig
from coordinator.region.txn_worker import TxnWorker, entry_resolver
from coordinator.server.api import Request, ServerApi, Service, Timer
from coordinator.server.metrics import CoordinatorMetrics

log = logging.getLogger(__name__)

NAMESPACE = "region"


def _wake_only() -> None:
    """A timer's callback that only wakes the loop: its tick hooks run right after."""


class RegionControllerService(Service):
    """Plugs the region controller into a :class:`ServerApi`."""

    def __init__(self, txn_client: TxnClientConfig | None = None) -> None:
        """``txn_client``: how the coordinator connects to the sinks' clusters (step 5;
        None: plaintext)."""
        self._txn_client = txn_client or TxnClientConfig()
        self.regions: dict[str, RegionCore] = {}
        self.reporter = RegionReporter()  # the regions' events, status and metrics
        self._empty_since: dict[str, float] = {}  # region -> when it was last seen without members
        # One timer at the earliest periodic drain due (see _wake_for_drains), and its deadline.
        self._wake: Timer | None = None
        self._wake_at: float | None = None
        # region -> when the coordinator resolves its transactions itself (step 5), and the
        # worker thread that does it (started with the first job)
        self._abandoned: dict[str, AbandonedResolve] = {}
        self._worker: TxnWorker | None = None

    # ------------------------------------------------------------------ service API
    def attach(self, server: ServerApi) -> None:
        self._server = server
        if isinstance(server.metrics, CoordinatorMetrics):
            self.reporter.metrics = server.metrics.regions
        server.add_handler(RegionJoin.TYPE, RegionJoin, self._on_join)
        server.add_handler(RegionHeartbeat.TYPE, RegionHeartbeat, self._on_heartbeat)
        server.add_handler("region_trigger", RegionMemberMessage, self._on_trigger)
        server.add_handler("region_leave", RegionMemberMessage, self._on_leave)
        server.add_handler(RegionAck.TYPE, RegionAck, self._on_ack)
        server.add_handler(RegionResetRequest.TYPE, RegionResetRequest, self._on_reset_request)
        server.add_handler(RegionStatusRequest.TYPE, RegionStatusRequest, self._on_status)

    def on_loaded(self) -> None:
        for name, doc in self.server.store.documents(NAMESPACE).items():
            try:
                config = RegionConfig.from_dict(doc["config"])
                self.regions[name] = self._make_core(config, doc)
            except (KeyError, TypeError, ValueError) as exc:
                # Never start afresh: that would forget the last consistent checkpoint
                # (sources back to their initial offsets, published output repeated).
                # FAILED in memory only, the document kept for a coordinator that can read it.
                reason = (
                    f"the stored region document is unusable ({type(exc).__name__}: {exc}); the region is not "
                    f"started afresh, which would repeat published output: run a coordinator version that "
                    f"reads it, or start the pipeline under another --group"
                )
                log.error("region %s: %s", name, reason)
                core = self.regions[name] = self._make_core(RegionConfig(name=name), None)
                core.fail(reason, time.monotonic(), persist=False)
                continue
            log.info(
                "region %s restored: phase %s, last consistent checkpoint %s, members before restart %s",
                name,
                self.regions[name].phase.value,
                self.regions[name].checkpoints.last_consistent,
                self.regions[name].known_members,
            )

    def on_tick(self, now: float) -> None:
        """Tick every region; a tick that raises fails THAT region (FAILED with the
        reason, logged with the traceback) and the others go on. Then regions
        without members for ``limits.region_expiry_s`` are dropped."""
        for name, core in list(self.regions.items()):
            try:
                core.tick(now)
            except Exception as exc:
                log.exception("region %s: tick failed; the region goes to FAILED", name)
                self._fail(name, core, f"internal error in the region's tick: {type(exc).__name__}: {exc}", now)
        self._expire_regions(now)
        self._resolve_abandoned(now)
        self._wake_for_drains(now)

    def on_stop(self) -> None:
        """The worker's job in flight is cancelled and its thread ended (bounded)."""
        if self._worker is not None:
            self._worker.stop()

    def _resolve_abandoned(self, now: float) -> None:
        """Step 5: start the jobs due, cancel those of regions a member joined."""
        for name, core in self.regions.items():
            plan = self._abandoned.setdefault(name, AbandonedResolve())
            failed = core.phase is RegionPhase.FAILED
            if core.members and not failed:
                plan.cancel()
            members, entries = len(core.members), core.checkpoints.transactions.entries()
            job = plan.due(name, now, members=members, entries=entries, failed=failed)
            if job is None:
                continue
            log.info(
                "region %s: %s for %.0fs; the coordinator resolves the Kafka transactions of %s itself",
                name,
                "FAILED" if failed else "no member",
                plan.after_s,
                [e.member for e in job.entries],
            )
            core.hold_start(True)
            if self._worker is None:
                self._worker = TxnWorker(self._report_resolved, entry_resolver(self._txn_client))
            self._worker.submit(job)

    def _report_resolved(self, outcome: JobOutcome) -> None:
        """The worker thread's report: the outcome is applied on the loop thread."""
        self.server.call_soon_threadsafe(lambda: self._on_resolved(outcome))

    def _on_resolved(self, outcome: JobOutcome) -> None:
        """Step 5's outcome, on the loop thread."""
        name = outcome.job.region
        plan = self._abandoned.get(name)
        retry = plan.finished(outcome, time.monotonic()) if plan is not None else None
        core = self.regions.get(name)
        if core is None:
            return  # expired meanwhile: its document is gone
        core.hold_start(False)
        core.resolved_elsewhere(outcome.resolved, outcome.failed)
        if retry is not None:
            log.warning(
                "region %s: the coordinator could not resolve the Kafka transactions of %s; next try in %.0fs "
                "(or by the first member that joins)",
                name,
                sorted(outcome.failed),
                retry,
            )

    def _wake_for_drains(self, now: float) -> None:
        """Keep one timer at the earliest ``RegionCore.wake_at`` later than ``now``
        (a periodic drain due, the end of a backoff hold): the loop then ticks at
        that time, not up to ``TICK_S`` (0.1 s) later when no request arrives, so
        drains start on their grid slots and a held RESUME leaves when its hold
        ends (timing.py). A drain already due (deferred while the group
        rebalances) needs no timer."""
        due: float | None = None
        for core in self.regions.values():
            at = core.wake_at
            if at is not None and at > now:
                due = at if due is None else min(due, at)
        if due is None or due == self._wake_at:
            return
        if self._wake is not None:
            self._wake.cancel()
        self._wake_at = due
        self._wake = self.server.schedule(due - now, _wake_only)

    def _fail(self, name: str, core: RegionCore, reason: str, now: float) -> None:
        try:
            core.fail(reason[:2000], now)
        except Exception:
            log.exception("region %s: could not mark the region FAILED (%s)", name, reason)

    def _expire_regions(self, now: float) -> None:
        expiry = self.server.limits.region_expiry_s
        for name, core in list(self.regions.items()):
            if core.members:
                self._empty_since.pop(name, None)
                continue
            since = self._empty_since.setdefault(name, now)
            if now - since < expiry:
                continue
            log.info(
                "region %s: no member for %.0fs (region expiry %.0fs): dropped with its state",
                name,
                now - since,
                expiry,
            )
            self.server.store.put_document(NAMESPACE, name, None)
            self.server.mark_dirty()
            del self.regions[name]
            self._abandoned.pop(name, None)
            self.reporter.forget(name)
            del self._empty_since[name]

    def add_status(self, status: CoordinatorStatus) -> CoordinatorStatus:
        return attrs.evolve(status, regions=self.reporter.statuses(self.regions))

    def update_metrics(self, metrics: CoordinatorMetrics) -> None:
        """Loop thread, every metrics refresh: the regions' counters and gauges."""
        update_region_metrics(metrics.regions, self.regions)

    # ------------------------------------------------------------------ plumbing
    def _make_core(self, config: RegionConfig, doc: dict[str, Any] | None) -> RegionCore:
        name = config.name
        server = self.server

        def send(member: str, command: RegionCommand) -> None:
            region = self.regions.get(name)
            info = region.members.get(member) if region is not None else None
            if info is None:
                return
            server.push(info.identity, COMMAND_TYPE, encode_command(name, command))

        def persist(document: dict[str, Any]) -> None:
            server.store.touch(name)  # a region's name is its Kafka group: retention activity
            server.store.put_document(NAMESPACE, name, document)
            server.mark_dirty()

        return RegionCore(config, send, persist, doc, on_event=lambda event: self.reporter.record(name, event))

    def _core(self, region: str) -> RegionCore:
        core = self.regions.get(region)
        if core is None:
            raise NotRegistered(f"region {region!r} is unknown: members must send region_join first")
        return core

    def _known(self, region: str, member: str, incarnation: str) -> RegionCore:
        core = self._core(region)
        m = core.members.get(member)
        if m is None or m.incarnation != incarnation:
            raise NotRegistered(f"member {member!r} (incarnation {incarnation}) has not joined region {region!r}")
        return core

    # ------------------------------------------------------------------ handlers
    def _on_join(self, req: Request, msg: RegionJoin) -> RegionJoinReply:
        try:
            config = RegionConfig.from_dict({**msg.config, "name": msg.region})
        except (TypeError, ValueError) as exc:
            raise Invalid(f"region {msg.region!r}: bad config: {exc}") from None
        core = self.regions.get(msg.region)
        if core is None:
            limit = self.server.limits.max_regions
            if len(self.regions) >= limit:
                raise self.server.limit_counter.exceeded(
                    "max_regions",
                    f"the coordinator holds {len(self.regions)} regions (limit {limit}); "
                    f"region {msg.region!r} not created",
                )
            core = self.regions[msg.region] = self._make_core(config, None)
            log.info("region %s created by %s: %s", msg.region, msg.member, config)
        elif core.phase is RegionPhase.FAILED:
            pass  # whatever its settings, the joiner is told the region FAILED and why
        elif config.index != core.config.index:
            raise CrIndexMismatch(
                f"region {msg.region!r} has index {core.config.index}; member {msg.member!r} joined with {config.index}"
            )
        else:
            differ = core.config.same_settings(config)
            if differ:
                raise Invalid(
                    f"region {msg.region!r} already runs with other settings: {differ} "
                    f"(have {[getattr(core.config, d) for d in differ]}, "
                    f"member {msg.member!r} sent {[getattr(config, d) for d in differ]}); "
                    f"start every member with the same region settings"
                )
        limit = self.server.limits.max_members_per_group
        if msg.member not in core.members and len(core.members) >= limit:
            raise self.server.limit_counter.exceeded(
                "max_members_per_group",
                f"region {msg.region!r} has {len(core.members)} members (limit {limit}); {msg.member!r} not joined",
            )
        return core.join(msg.member, req.identity, msg.incarnation, req.received, msg.pid, msg.host, msg.replace)

    def _on_heartbeat(self, req: Request, msg: RegionHeartbeat) -> RegionHeartbeatReply:
        core = self._core(msg.region)
        self.server.store.touch(msg.region)  # retention activity of the region's group
        if not core.members.heartbeat(
            msg.member, req.identity, msg.incarnation, req.received, msg.kafka, msg.kafka_invalid, msg.dead_letters
        ):
            raise NotRegistered(
                f"member {msg.member!r} (incarnation {msg.incarnation}) is not in region {msg.region!r}: join again"
            )
        return RegionHeartbeatReply(core.phase, core.checkpoints.last_consistent)

    def _on_trigger(self, req: Request, msg: RegionMemberMessage) -> RegionTriggerReply:
        core = self._known(msg.region, msg.member, msg.incarnation)
        return core.trigger(msg.member, req.received)

    def _on_leave(self, req: Request, msg: RegionMemberMessage) -> RegionLeaveReply:
        core = self.regions.get(msg.region)
        if core is not None:
            # The leaver publishes what its own last completed checkpoint covers (it
            # may have missed the RESUME that names it) before it exits; a process
            # the region already dropped is told None (RegionCore.leave_reply).
            complete = core.leave_reply(msg.member, msg.incarnation)
            m = core.members.get(msg.member)
            if m is not None and m.incarnation == msg.incarnation:
                core.leave(msg.member, req.received)
            return RegionLeaveReply(core.checkpoints.last_consistent, complete)
        return RegionLeaveReply(None, None)

    def _on_ack(self, req: Request, msg: RegionAck) -> RegionPhaseReply:
        core = self._known(msg.region, msg.member, msg.incarnation)
        self.server.store.touch(msg.region)  # retention activity of the region's group
        core.ack(
            msg.member,
            msg.command,
            msg.seq,
            msg.attempt,
            msg.ok,
            msg.error,
            req.received,
            msg.offsets,
            rebalance=msg.rebalance,
            transactions=msg.transactions,
        )
        return RegionPhaseReply(core.phase)

    def _on_reset_request(self, req: Request, msg: RegionResetRequest) -> RegionPhaseReply:
        core = self._known(msg.region, msg.member, msg.incarnation)
        core.request_reset(msg.member, msg.force, msg.reason, req.received)
        return RegionPhaseReply(core.phase)

    def _on_status(self, req: Request, msg: RegionStatusRequest) -> RegionReport | RegionsReport:
        if msg.region is not None:
            return self.reporter.report(msg.region, self._core(msg.region))  # NOT_REGISTERED for an unknown region
        return self.reporter.reports(self.regions)
