"""What the region controller shows about its regions: status replies and metrics.

The region controller service (``coordinator/region/service.py``) owns one
:class:`RegionReporter`; everything here runs on the loop thread and only reads
the regions' cores.

1. Events: every event a region's core reports (``on_event``) is recorded with
   its wall-clock time, the newest EVENTS_KEPT per region. A completed
   checkpoint and a reset round started are also kept apart, the newest
   RECENT_KEPT of each.
2. Durations: a checkpoint that became consistent and a reset round that
   resumed are observed by the region duration histograms (when the server
   has metrics).
3. Status: a region's status is its core's (``RegionCore.status``) with its
   recent checkpoints and resets, newest first. A ``region_status`` request
   naming a region gets a `RegionReport` with its newest EVENTS_SHOWN events,
   oldest first; one naming none a `RegionsReport` of every region.
4. Metrics: every metrics refresh replaces the regions' counters and gauges
   with one sample per region.
5. A dropped region's records go with it (``forget``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping

import attrs

from coordinator.protocol.region.replies import RegionPhase
from coordinator.protocol.region.status import (
    CheckpointMark,
    EventRecord,
    RegionReport,
    RegionsReport,
    RegionStatus,
    ResetMark,
)
from coordinator.region.events import CheckpointCompleted, PhaseChanged, RegionEvent, ResetResumed, event_record
from coordinator.region.machine import RegionCore
from coordinator.server.metrics import RegionMetrics, RegionSample

#: Recent events kept per region for the status reply (bounded memory).
EVENTS_KEPT = 200
#: Recent completed checkpoints and reset rounds kept per region for the status
#: page and ``crkafka status`` (kept apart from the events: the phase changes of
#: a busy region would push them out of EVENTS_KEPT within minutes).
RECENT_KEPT = 10
#: The newest events a ``region_status`` reply naming the region carries (its
#: size stays small whatever EVENTS_KEPT is).
EVENTS_SHOWN = 50


class RegionReporter:
    """The regions' recent events, checkpoints and resets, and what is shown from them."""

    def __init__(self) -> None:
        self.events: dict[str, deque[EventRecord]] = {}
        self.recent_checkpoints: dict[str, deque[CheckpointMark]] = {}
        self.recent_resets: dict[str, deque[ResetMark]] = {}
        #: The duration histograms (None: the server has no metrics).
        self.metrics: RegionMetrics | None = None

    def record(self, region: str, event: RegionEvent) -> None:
        """Steps 1 and 2: one event of ``region``'s core."""
        t = time.time()
        self.events.setdefault(region, deque(maxlen=EVENTS_KEPT)).append(event_record(event, t))
        self._observe(region, event)
        if isinstance(event, CheckpointCompleted):
            self.recent_checkpoints.setdefault(region, deque(maxlen=RECENT_KEPT)).append(CheckpointMark(t, event.seq))
        elif isinstance(event, PhaseChanged) and event.phase is RegionPhase.RESETTING:
            self.recent_resets.setdefault(region, deque(maxlen=RECENT_KEPT)).append(ResetMark(t, event.why))

    def _observe(self, region: str, event: RegionEvent) -> None:
        metrics = self.metrics
        if metrics is None:
            return
        if isinstance(event, CheckpointCompleted):
            metrics.checkpoint_done(region, event.checkpoint_ms / 1000)
        elif isinstance(event, ResetResumed):
            metrics.reset_done(region, event.reset_ms / 1000)

    def forget(self, region: str) -> None:
        """Step 5."""
        self.events.pop(region, None)
        self.recent_checkpoints.pop(region, None)
        self.recent_resets.pop(region, None)

    def status(self, region: str, core: RegionCore, now: float) -> RegionStatus:
        """Step 3: one region's status."""
        return attrs.evolve(
            core.status(now),
            recent_checkpoints=tuple(reversed(self.recent_checkpoints.get(region, ()))),
            recent_resets=tuple(reversed(self.recent_resets.get(region, ()))),
        )

    def statuses(self, regions: Mapping[str, RegionCore]) -> dict[str, RegionStatus]:
        """Step 3: every region's status."""
        now = time.monotonic()
        return {name: self.status(name, core, now) for name, core in regions.items()}

    def report(self, region: str, core: RegionCore) -> RegionReport:
        """Step 3: the reply to a ``region_status`` request naming ``region``."""
        events = tuple(self.events.get(region, ()))[-EVENTS_SHOWN:]
        return RegionReport(self.status(region, core, time.monotonic()), events)

    def reports(self, regions: Mapping[str, RegionCore]) -> RegionsReport:
        """Step 3: the reply to a ``region_status`` request naming no region."""
        return RegionsReport(self.statuses(regions))


def update_region_metrics(metrics: RegionMetrics, regions: Mapping[str, RegionCore]) -> None:
    """Step 4."""
    metrics.update(
        (
            RegionSample(
                name=name,
                phase=core.phase.value,
                last_consistent=core.checkpoints.last_consistent,
                checkpoints=core.cycles.completed,
                resets=core.resets.rounds,
                consecutive_resets=core.resets.consecutive,
                failed=core.phase is RegionPhase.FAILED,
                members=len(core.members),
                failure_streak=core.resets.streak,
            )
            for name, core in regions.items()
        ),
        (phase.value for phase in RegionPhase),
    )
