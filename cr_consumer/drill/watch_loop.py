"""A drill's watch loop (steps 5-6 of ``scenarios.run_drill``): from the
region's start until the published output is complete and the fault has
played out.

:meth:`WatchLoop.run`, every :data:`WATCH_PERIOD_S`:

1. Read the new timeline events: records processed (replays included), a
   fault point or sink trigger that fired.
2. Once the members process records, start producing the rest of the input
   (``workload.py``): the fault lands in a live stream.
3. When the processed count passes the trigger (a seeded fraction of the
   input), inject the scenario's fault (``faults.py``), once; its time and
   description stay on the loop (:attr:`~WatchLoop.fault_time`,
   :attr:`~WatchLoop.faults`) even when the loop then fails.
4. Every :data:`CONTROLLER_WATCH_PERIOD_S`, fetch the controller's events.
5. Done when the producer finished, the published output holds every
   expected record (produced minus poison; counted by the sink's
   :class:`OutputCount`: published files, or committed records of the
   output topic; with a dead-letter sink, every produced record among both
   outputs, :class:`SummedCount`) and the fault played out (fired,
   its tasks ended). When the input is consumed first, produce a few more
   records (at most :data:`MAX_NUDGES` times, :data:`NUDGE_PERIOD_S` apart):
   a sink trigger or a fault point needs records to fire.
6. Print progress every :data:`PROGRESS_PERIOD_S`. A failed region raises
   RuntimeError, the drill's deadline TimeoutError.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from coordinator.client import CoordinatorClient
from coordinator.protocol.wire.errors import CoordinatorError, CoordinatorUnavailable
from cr_consumer.drill import faults as fault_mod
from cr_consumer.drill.config import DrillConfig
from cr_consumer.drill.delivered import count_lines, published_files
from cr_consumer.drill.fault_tasks import FaultTasks
from cr_consumer.drill.manifest import Manifest
from cr_consumer.drill.timeline import TimelineReader, TimelineWriter
from cr_consumer.drill.workload import Workload
from cr_consumer.runtime.runner.handle import RegionHandle

log = logging.getLogger(__name__)

#: How often the drill looks at the timeline and the output.
WATCH_PERIOD_S = 0.1
#: How often it fetches the controller's events (they are kept 200 deep).
CONTROLLER_WATCH_PERIOD_S = 0.5
#: How often it prints a progress line.
PROGRESS_PERIOD_S = 1.0
#: sink-failure: when the input is consumed before a sink claimed the trigger,
#: produce a few more records, at most MAX_NUDGES times, NUDGE_PERIOD_S apart.
MAX_NUDGES = 5
NUDGE_PERIOD_S = 2.0
#: Bound on the producer thread's end after the drill stops it.
PRODUCER_JOIN_S = 60.0
#: Bound on one status request, so a dead coordinator delays the watch loop by
#: at most this much per poll.
STATUS_TIMEOUT_S = 0.5


class ControllerWatch:
    """The controller's own view of the drill (step 4): the region controller keeps its
    recent events (``join``, ``leave``, ``phase``, ``checkpoint``, ``reset``, ``resume``,
    ``failed``), stamped with the coordinator's wall clock, in its ``region_status``
    reply; each :meth:`poll` appends the new ones to the drill's timeline as
    ``ctl_<kind>`` events of member ``controller`` (the report's exact recovery
    times). While the coordinator is down or has not seen the region again after
    a restart the request fails and is retried at the next poll; the events a
    killed coordinator had not handed out are lost with it."""

    def __init__(self, endpoint: str, region: str, timeline: TimelineWriter) -> None:
        self.region = region
        self.timeline = timeline
        self.client = CoordinatorClient(endpoint, timeout=STATUS_TIMEOUT_S, try_timeout=STATUS_TIMEOUT_S)
        self._seen: set[tuple[object, ...]] = set()

    def poll(self) -> None:
        try:
            reply = self.client.region_status(self.region, timeout=STATUS_TIMEOUT_S)
        except (CoordinatorUnavailable, CoordinatorError) as exc:
            log.debug("controller status unavailable (%s): retrying at the next poll", exc)
            return
        for e in reply.events:
            f = e.fields
            key = (e.t, e.kind, str(f.get("attempt")), str(f.get("seq")), str(f.get("member")), str(f.get("phase")))
            if key in self._seen:
                continue
            self._seen.add(key)
            self.timeline.event(f"ctl_{e.kind}", t=e.t, member="controller", ctl=dict(f))

    def close(self) -> None:
        self.client.close()


class OutputCount(Protocol):
    """Records the sink has published so far (replays that were published twice included)."""

    def count(self) -> int: ...

    def close(self) -> None:
        """Release what the counts hold open (the drill, when its watch ends)."""


class OutputCounter:
    """The file sink's :class:`OutputCount`: published lines, counted incrementally (a published
    file is never rewritten). The Kafka sink's: ``verify_kafka.KafkaOutputCounter``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.counted: dict[Path, int] = {}

    def count(self) -> int:
        for p in published_files(self.directory):
            if p not in self.counted:
                self.counted[p] = count_lines([p])
        return sum(self.counted.values())

    def close(self) -> None:
        """Nothing held open."""


class SummedCount:
    """The :class:`OutputCount` of several outputs together (the output and the dead-letter output)."""

    def __init__(self, counts: list[OutputCount]) -> None:
        self.counts = counts

    def count(self) -> int:
        return sum(c.count() for c in self.counts)

    def close(self) -> None:
        for c in self.counts:
            c.close()


class WatchLoop:
    """See the module docstring; one per drill, run on the drill's thread."""

    def __init__(
        self,
        cfg: DrillConfig,
        env: fault_mod.DrillEnv,
        *,
        region: RegionHandle,
        workload: Workload,
        manifest: Manifest,
        reader: TimelineReader,
        tasks: FaultTasks,
        watch: ControllerWatch,
        output: OutputCount,
        fraction: float,
        progress: Callable[[str], None],
    ) -> None:
        self._cfg = cfg
        self._env = env
        self._region = region
        self._workload = workload
        self._manifest = manifest
        self._reader = reader
        self._tasks = tasks
        self._watch = watch
        self._counter = output
        self._fraction = fraction
        self._progress = progress
        #: Step 3: when the fault was injected (epoch seconds), and what it did.
        self.fault_time: float | None = None
        self.faults: list[fault_mod.FaultRecord] = []
        #: Published records at the last look.
        self.delivered = 0
        #: Records produced to let the fault fire or play out: how often, and not before when.
        self._nudges = 0
        self._next_nudge = 0.0

    def run(self) -> int:
        """Steps 1-6; returns the published record count."""
        cfg, workload = self._cfg, self._workload
        trigger_at = int(self._fraction * cfg.messages)
        deadline = time.monotonic() + cfg.timeout_s
        next_progress = next_watch = 0.0
        processed = 0
        fired = False if cfg.scenario == "sink-failure" else None
        self._nudges, self._next_nudge = 0, 0.0
        while True:
            now = time.monotonic()
            batches, fault_fired = self._poll_timeline()
            processed += batches
            if fault_fired:
                fired = True
            if processed and not workload.started_at:
                self._progress(
                    "members are processing: producing the rest of the input"
                    + (f" at {cfg.rate:.0f} records/s" if cfg.rate else "")
                )
                workload.start()
            if self.fault_time is None and processed >= trigger_at:
                self._progress(
                    f"injecting {cfg.scenario} after {processed} records ({self._fraction:.0%} of the input)"
                )
                self.fault_time = time.time()
                self.faults.append(fault_mod.inject(self._env, cfg.scenario))
            if now >= next_watch:
                next_watch = now + CONTROLLER_WATCH_PERIOD_S
                self._watch.poll()
            delivered = self.delivered = self._counter.count()
            if workload.started_at and workload.done.is_set() and self._all_published(now, delivered, fired):
                return delivered
            if now >= next_progress:
                next_progress = now + PROGRESS_PERIOD_S
                self._progress(
                    f"produced {workload.produced}/{cfg.messages}, processed {processed} "
                    f"(incl. replays), published {delivered}, members "
                    f"{sorted(self._region.running_members())}"
                )
            if self._region.failed:
                raise RuntimeError(f"the region failed: {self._region.failed}")
            if now >= deadline:
                raise TimeoutError(
                    f"drill did not finish within {cfg.timeout_s:.0f}s: published {delivered}, "
                    f"produced {workload.produced}, fault {'injected' if self.fault_time else 'not injected'}"
                )
            time.sleep(WATCH_PERIOD_S)  # the watch loop's period, not a synchronisation

    def _poll_timeline(self) -> tuple[int, bool]:
        """Records processed since the last look (replays included), and whether a fault fired."""
        processed, fired = 0, False
        for e in self._reader.poll():
            if e["ev"] == "batch":
                processed += e["n"]
            elif e["ev"] == "fault_fired":
                fired = True
        return processed, fired

    def _all_published(self, now: float, delivered: int, fired: bool | None) -> bool:
        """The producer is done: True once the fault was injected, has played out and
        every expected record is published; else, when the input ran out first, give
        the fault more records (at most MAX_NUDGES times, NUDGE_PERIOD_S apart)."""
        cfg, workload, manifest = self._cfg, self._workload, self._manifest
        workload.join(PRODUCER_JOIN_S)
        with workload.lock:
            expected = manifest.produced if cfg.dead_letter else manifest.produced - manifest.poison_count
        played_out = fired is not False and self._tasks.done()
        if self.fault_time is not None and delivered >= expected and played_out:
            return True
        if (
            not played_out
            and self.fault_time is not None
            and delivered >= expected
            and now >= self._next_nudge
            and self._nudges < MAX_NUDGES
        ):
            # The input ran out before the fault fired (a sink trigger, a fault
            # point that needs records) or while it plays out: give it records.
            self._nudges += 1
            self._next_nudge = now + NUDGE_PERIOD_S
            self._progress(
                "the fault has not fired or ended yet and the input is consumed: "
                f"producing {cfg.partitions * 10} more records"
            )
            workload.produce_more(cfg.partitions * 10)
        return False


__all__ = ["PRODUCER_JOIN_S", "WATCH_PERIOD_S", "OutputCount", "OutputCounter", "SummedCount", "WatchLoop"]
