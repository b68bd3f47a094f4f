"""A stopped drill's verdict: the independent verification, the timeline's analysis and the
report.

:func:`conclude` runs once every process the drill started is stopped
(``scenarios.run_drill``), on what the drill recorded:

1. Save the manifest (``manifest.json``).
2. With the group's committed offsets read, find the last completed checkpoint
   (``report.last_completed_checkpoint``) and its offsets in the members' checkpoint stores
   (``verify.last_checkpoint_offsets``); one that cannot be read fails the drill: the
   committed-offsets check cannot run.
3. Verify the output independently (``verify.py``; the dead-letter output too) and analyse the
   timeline around the fault (``report.py``; with a standby coordinator's takeover, the time to
   the controller's first RESUME on the new leader).
4. Say whether the fault really fired: its tasks (``fault_tasks.py``), or for sink-failure the
   trigger's timeline event; a fault task's error fails the drill.
5. Draw ``timeline.png`` (a plot that fails is reported).
6. Write ``report.json``. Without ``keep_output``, a passed drill's output and state
   directories are removed.

The report's ``ok`` is true only if nothing is missing, duplicated, altered or unexpected (in
the output, and in the dead-letter output with ``dead_letter``), committed offsets are not
behind the output, no transaction is left open in the output topic, and the injected fault
really fired.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path

from cr_consumer.drill.config import DrillConfig
from cr_consumer.drill.coordinator_standby import Takeover
from cr_consumer.drill.delivered import Delivered
from cr_consumer.drill.fault_tasks import FaultTasks
from cr_consumer.drill.faults import FaultRecord
from cr_consumer.drill.manifest import Manifest
from cr_consumer.drill.plot import plot_timeline
from cr_consumer.drill.report import DrillReport, analyse, build_report, last_completed_checkpoint, resume_after
from cr_consumer.drill.timeline import TimelineReader
from cr_consumer.drill.verify import CheckpointMissing, last_checkpoint_offsets, verify

log = logging.getLogger(__name__)


def conclude(
    cfg: DrillConfig,
    drill_dir: Path,
    dirs: dict[str, Path],
    *,
    output: Delivered,
    dead_letters: Delivered | None,
    manifest: Manifest,
    reader: TimelineReader,
    tasks: FaultTasks,
    committed: dict[tuple[str, int], int | None] | None,
    fault_time: float | None,
    end_time: float | None,
    faults: list[FaultRecord],
    error: str | None,
    started: float,
    takeover: Takeover | None = None,
) -> DrillReport:
    """Steps 1-6; returns the report (its ``ok``: the drill passed). ``output``,
    ``dead_letters``: what the sinks and the dead-letter sinks published (``outputs.py``; None:
    no dead-letter sink); ``committed``: the group's committed offsets (None: not read);
    ``started``: the drill's start (epoch seconds), for its elapsed time; ``takeover``: what a
    standby coordinator's takeover showed, else None; ``error``: the drill's error so far."""
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
    result = verify(manifest, output, committed, checkpoint, dead_letters, state=cfg.state)
    analysis = analyse(events, fault_time, end_time)
    takeover_record = None
    if takeover is not None:
        takeover_record = takeover.record(resume_after(events, takeover.served_at, takeover.fault_at, end_time))
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
        sink=cfg.sink.value,
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
        takeover=takeover_record,
    )
    (drill_dir / "report.json").write_text(json.dumps(report, indent=2))
    if not cfg.keep_output and report["ok"]:
        shutil.rmtree(dirs["output"], ignore_errors=True)
        shutil.rmtree(dirs["state"], ignore_errors=True)
    return report


__all__ = ["conclude"]
