"""A drill's outcome (step 8 of ``scenarios.run_drill``), once every process
it started is stopped: what it records, checks and writes.

:func:`conclude`:

1. Save the manifest of what was produced (``manifest.json``).
2. Read the timeline; with the group's committed offsets read, find the last
   completed checkpoint and its offsets (a checkpoint that cannot be read fails
   the drill: the committed-offsets check cannot run).
3. Verify the output independently (``verify.py``: nothing missing,
   duplicated, altered or unexpected; committed offsets not behind the
   output) and analyse the timeline around the fault (``report.py``).
4. Say whether the injected fault really fired (its tasks, or the sink
   trigger's timeline event); a fault task's error fails the drill.
5. Draw the timeline (``timeline.png``; a plot that fails is reported).
6. Write ``report.json``; without ``keep_output``, a passed drill's output
   and state directories are removed.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path

from cr_consumer.drill.config import DrillConfig
from cr_consumer.drill.fault_tasks import FaultTasks
from cr_consumer.drill.faults import FaultRecord
from cr_consumer.drill.manifest import Manifest
from cr_consumer.drill.plot import plot_timeline
from cr_consumer.drill.report import DrillReport, analyse, build_report, last_completed_checkpoint
from cr_consumer.drill.timeline import TimelineReader
from cr_consumer.drill.verify import CheckpointMissing, last_checkpoint_offsets, verify

log = logging.getLogger(__name__)


def conclude(
    cfg: DrillConfig,
    drill_dir: Path,
    dirs: dict[str, Path],
    *,
    manifest: Manifest,
    reader: TimelineReader,
    tasks: FaultTasks,
    committed: dict[tuple[str, int], int | None] | None,
    fault_time: float | None,
    end_time: float | None,
    faults: list[FaultRecord],
    error: str | None,
    started: float,
) -> DrillReport:
    """Steps 1-6; returns the report (its ``ok``: the drill passed); ``started``: the
    drill's start (epoch seconds), for its elapsed time."""
    manifest.save(drill_dir / "manifest.json")
    events = reader.all_events()
    checkpoint = None
    last_seq = last_completed_checkpoint(events)
    if committed is not None and last_seq is not None:
        try:
            checkpoint = (last_seq, last_checkpoint_offsets(dirs["state"], last_seq))
        except (CheckpointMissing, OSError, ValueError) as exc:  # the check cannot run: the drill fails
            log.error("drill %s: %s", cfg.scenario, exc)
            error = error or f"committed-offsets check: {exc}"
    result = verify(manifest, dirs["output"], committed, checkpoint)
    analysis = analyse(events, fault_time, end_time)
    fired = tasks.all_fired()
    if cfg.scenario == "sink-failure":
        fired = any(e["ev"] == "fault_fired" for e in events)
    if tasks.errors:
        error = error or "fault: " + "; ".join(tasks.errors)
    plot_path = None
    if events:
        try:
            drawn = plot_timeline(
                events,
                drill_dir / "timeline.png",
                title=f"drill {cfg.scenario} (seed {cfg.seed})",
                produced=result.produced,
            )
            plot_path = str(drawn) if drawn is not None else None
        except Exception as exc:  # the plot is an aid; its failure is reported, not hidden
            log.exception("timeline plot failed")
            error = error or f"plot failed: {exc!r}"
    report = build_report(
        scenario=cfg.scenario,
        seed=cfg.seed,
        members=cfg.members,
        partitions=cfg.partitions,
        messages=cfg.messages,
        verify_result=result,
        analysis=analysis,
        faults=faults,
        elapsed_s=time.time() - started,
        out_dir=str(drill_dir),
        plot=plot_path,
        error=error,
        fault_fired=fired,
    )
    (drill_dir / "report.json").write_text(json.dumps(report, indent=2))
    if not cfg.keep_output and report["ok"]:
        shutil.rmtree(dirs["output"], ignore_errors=True)
        shutil.rmtree(dirs["state"], ignore_errors=True)
    return report


__all__ = ["conclude"]
