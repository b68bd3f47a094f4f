"""Running one drill end to end.

:func:`run_drill` (one scenario) does, in order:

1. Lay out the drill directory ``OUT/<scenario>-s<seed>/``: ``output/`` (the
   sinks' files), ``timeline/`` (events), ``faults/`` (triggers), ``state/``
   (member checkpoints), ``coordinator/`` (its durable state), ``logs/``.
2. Use ``--bootstrap`` / ``$KAFKA_BOOTSTRAP_SERVERS``, else start an embedded
   broker (stopped at the end; its pid is what pause-broker stops, so that
   scenario is refused with an external cluster).
3. Create the input topic (``partitions`` partitions) with unique names; the
   new-topic scenario subscribes by pattern, the others by topic name.
4. Start the coordinator process (``coordinator.launcher``), then the producer
   thread (``workload.py``; with ``rate`` > 0 the input keeps arriving while
   the fault happens), then the region's member processes (``harness.py``).
5. Watch the timeline; when the members have processed a seeded random
   fraction (20-60 %) of the input, inject the fault (``faults.py``).
6. Wait (bounded by ``timeout_s``) until the published output holds every
   expected record (produced minus poison) and the fault has played out (a
   pause ended, an armed fault point fired: ``fault_tasks.py``). Progress
   is printed every second. Then wait (bounded, ``settle.py``) until the
   group's committed offsets reach the input's end: a partition moving between
   live members under cooperative rebalancing is committed by its new owner
   only after the group is stable again.
7. End the fault tasks (every paused process is continued), stop the region,
   read the group's committed offsets, stop the coordinator and the broker.
   Every process started here is stopped in ``finally``.
8. Verify the output independently (``verify.py``), analyse the timeline
   (``report.py``), write ``report.json``, ``manifest.json`` and the PNG.

A drill that times out still verifies and reports (its records are then
missing) and fails. The report's ``ok`` is true only if nothing is missing,
duplicated, altered or unexpected, committed offsets are not behind the
output, and the injected fault really fired.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import re
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from cr_consumer.drill import faults as fault_mod
from cr_consumer.drill.controller_watch import ControllerWatch
from cr_consumer.drill.fault_tasks import FaultTasks
from cr_consumer.drill.harness import MEMBER_TIMEOUT_S, PHASE_TIMEOUT_S, start_region
from cr_consumer.drill.plot import plot_timeline
from cr_consumer.drill.report import analyse, build_report, last_completed_checkpoint
from cr_consumer.drill.settle import wait_for_commits
from cr_consumer.drill.timeline import TimelineReader, TimelineWriter
from cr_consumer.drill.verify import (
    CheckpointMissing,
    Manifest,
    count_lines,
    last_checkpoint_offsets,
    published_files,
    read_committed,
    verify,
)
from cr_consumer.drill.workload import Workload
from cr_consumer.testing.broker import ENV_BOOTSTRAP, EmbeddedBroker
from cr_consumer.testing.kafka_util import create_topic, unique_name

log = logging.getLogger(__name__)

#: Faults the region was designed for.
BASIC_SCENARIOS = (
    "kill-member", "kill-coordinator", "add-member", "remove-member",
    "new-topic", "sink-failure", "poison", "reset-storm",
)
#: Untimely faults: a member kept down past its timeout, stopped processes, a
#: crash / pause / lost message at each step of the region protocol.
UNTIMELY_SCENARIOS = (
    "kill-member-long", "pause-member", "pause-coordinator", "pause-broker",
    *fault_mod.POINT_SCENARIOS, "drop-command", "fault-point",
)
SCENARIOS = BASIC_SCENARIOS + UNTIMELY_SCENARIOS
#: Scenarios whose pause must outlast the member timeout (the member is to be dropped).
PAST_MEMBER_TIMEOUT = ("pause-member",)
#: Drain and reset timeout of the region in the scenarios that lose a pushed
#: command (the phase fails by this timeout); others keep the runner's 30 s.
SHORT_PHASE_TIMEOUT_S = 5.0
SHORT_PHASE_SCENARIOS = ("drop-command",)
#: Scenarios that need the broker process the drill starts itself.
EMBEDDED_BROKER_ONLY = ("pause-broker",)
#: The members' partition.assignment.strategy when the drill runs eager.
EAGER_ASSIGNORS = "range,roundrobin"
#: Share of poison records in the poison scenario's input.
POISON_RATIO = 0.02
#: Share of the input produced before the region starts; the rest is produced
#: once the members process records, so the fault lands in a live stream.
WARMUP_SHARE = 0.05
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
#: Bound on waiting for the group's commits to reach the input's end before the
#: region is stopped (settle.py): a moving partition is committed by its new
#: owner after a second rebalance, a join phase of up to about a session
#: timeout each; the bound is SETTLE_BASE_S + SETTLE_SESSIONS session timeouts.
SETTLE_BASE_S = 10.0
SETTLE_SESSIONS = 2
#: Bound on the producer thread's end after the drill stops it.
PRODUCER_JOIN_S = 60.0


@attrs.frozen(kw_only=True)
class DrillConfig:
    scenario: str = attrs.field(validator=attrs.validators.in_(SCENARIOS))
    members: int = 3
    partitions: int = 8
    messages: int = 200_000
    bootstrap: str | None = None
    out: Path = attrs.field(default=Path("drill-out"), converter=Path)
    seed: int = 0
    #: Production rate in records/s; 0 produces as fast as possible.
    rate: float = 0.0
    #: Region checkpoint period.
    period_s: float = 2.0
    session_timeout_ms: int = 6000
    #: The members' consumers rebalance incrementally (the cooperative-sticky
    #: assignor, the region runtime's default); False: eager (range, roundrobin).
    cooperative: bool = True
    #: The members' Kafka client ("kafka-python" or "librdkafka"; None: the default).
    kafka_client: str | None = None
    #: The runner keeps a warm standby member process (``crkafka run``'s default); False: restarts are cold.
    standby: bool = True
    #: Bound on the whole drill after the region starts.
    timeout_s: float = 180.0
    #: Keep the drill directory's output files (the report and plot are always kept).
    keep_output: bool = True
    #: Inject the fault when this fraction of the input is processed; None: seeded random in 0.2-0.6.
    fault_at: float | None = None
    #: Length of the pause scenarios' SIGSTOP (and of a pause fault point).
    pause_s: float = fault_mod.PAUSE_S

    def __attrs_post_init__(self) -> None:
        if self.members < 1:
            raise ValueError(f"--members must be >= 1, got {self.members}")
        if self.scenario == "remove-member" and self.members < 2:
            raise ValueError("the remove-member scenario needs --members >= 2")
        if self.partitions < 1:
            raise ValueError(f"--partitions must be >= 1, got {self.partitions}")
        if self.messages < self.partitions:
            raise ValueError(f"--messages ({self.messages}) must be >= --partitions ({self.partitions})")
        if self.rate < 0:
            raise ValueError(f"--rate must be >= 0, got {self.rate}")
        if self.fault_at is not None and not 0 <= self.fault_at < 1:
            raise ValueError(f"fault_at must be in [0, 1), got {self.fault_at}")
        if self.period_s <= 0 or self.timeout_s <= 0:
            raise ValueError("--period and --timeout must be > 0")
        if not 0 < self.pause_s <= 3600:
            raise ValueError(f"--pause must be in (0, 3600] s, got {self.pause_s}")
        if self.scenario in PAST_MEMBER_TIMEOUT and self.pause_s <= MEMBER_TIMEOUT_S:
            raise ValueError(f"the {self.scenario} scenario pauses past the member timeout ({MEMBER_TIMEOUT_S:g} s): "
                             f"--pause must be longer, got {self.pause_s:g}")
        external = self.bootstrap or os.environ.get(ENV_BOOTSTRAP)
        if self.scenario in EMBEDDED_BROKER_ONLY and external:
            raise ValueError(f"the {self.scenario} scenario SIGSTOPs the broker process, so it needs the embedded "
                             f"broker the drill starts itself; it cannot pause an external cluster ({external}): "
                             f"run it without --bootstrap and without ${ENV_BOOTSTRAP}")


def _progress(msg: str) -> None:
    print(f"[drill {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class _OutputCounter:
    """Counts published lines incrementally (a published file is never rewritten)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.counted: dict[Path, int] = {}

    def count(self) -> int:
        for p in published_files(self.directory):
            if p not in self.counted:
                self.counted[p] = count_lines([p])
        return sum(self.counted.values())


@contextlib.contextmanager
def _broker(bootstrap: str | None, log_path: Path):
    """Yield ``(bootstrap, pid)``: an external cluster (pid None), else an embedded
    broker started here (its log in the drill's logs) and stopped on exit."""
    address = bootstrap or os.environ.get(ENV_BOOTSTRAP)
    if address:
        yield address, None
        return
    with EmbeddedBroker(log_path=log_path) as broker:
        yield broker.bootstrap, broker.pid


def run_drill(cfg: DrillConfig, progress: Callable[[str], None] = _progress) -> dict[str, Any]:
    rng = random.Random(cfg.seed)
    drill_dir = (cfg.out / f"{cfg.scenario}-s{cfg.seed}").resolve()
    if drill_dir.exists():
        shutil.rmtree(drill_dir)
    dirs = {name: drill_dir / name for name in ("output", "timeline", "faults", "state", "coordinator", "logs")}
    for d in dirs.values():
        d.mkdir(parents=True)
    prefix = unique_name(f"drill-{cfg.scenario}")
    group = f"{prefix}-group"
    manifest = Manifest(group=group)
    drill_tl = TimelineWriter(dirs["timeline"] / "drill.jsonl", "drill")
    reader = TimelineReader(dirs["timeline"])
    faults: list[dict] = []
    error: str | None = None
    fault_time: float | None = None
    topics = [f"{prefix}-in"]
    t_start = time.time()
    committed: dict[tuple[str, int], int | None] | None = None
    end_time: float | None = None
    progress(f"{cfg.scenario}: seed {cfg.seed}, {cfg.members} members, {cfg.partitions} partitions, "
             f"{cfg.messages} messages -> {drill_dir}")

    with contextlib.ExitStack() as stack:
        bootstrap, broker_pid = stack.enter_context(_broker(cfg.bootstrap, dirs["logs"] / "broker.log"))
        from coordinator.launcher import CoordinatorProcess

        region = coordinator = workload = watch = None
        tasks = FaultTasks(drill_tl)
        next_watch = 0.0
        try:
            create_topic(bootstrap, topics[0], cfg.partitions)
            coordinator = CoordinatorProcess(dirs["coordinator"] / "state", http="auto",
                                             log_path=dirs["logs"] / "coordinator.log")
            coordinator.start()
            endpoint = coordinator.endpoint
            if endpoint is None:
                raise RuntimeError("the coordinator started without an endpoint")
            progress(f"broker {bootstrap}, coordinator {endpoint} (pid {coordinator.pid})")
            watch = ControllerWatch(endpoint, group, drill_tl)
            workload = Workload(bootstrap, topics[0], cfg.partitions, cfg.messages, manifest, seed=cfg.seed,
                                rate=cfg.rate, poison_ratio=POISON_RATIO if cfg.scenario == "poison" else 0.0)
            workload.warmup(max(cfg.partitions, int(cfg.messages * WARMUP_SHARE)))
            params = {
                "timeline_dir": str(dirs["timeline"]),
                "fault_dir": str(dirs["faults"]),
                "session_timeout_ms": str(cfg.session_timeout_ms),
            }
            if not cfg.cooperative:  # else the runtime's default (cooperative-sticky)
                params["assignment_strategy"] = EAGER_ASSIGNORS
            if cfg.scenario == "new-topic":
                params["pattern"] = re.escape(prefix) + r"-.*"
            else:
                params["topics"] = topics[0]
            region = start_region(
                pipeline="cr_consumer.drill.pipeline", members=cfg.members, coordinator=endpoint,
                bootstrap=bootstrap, group=group, output_dir=dirs["output"], state_dir=dirs["state"],
                params=params, period_s=cfg.period_s, fault_dir=dirs["faults"],
                phase_timeout_s=SHORT_PHASE_TIMEOUT_S if cfg.scenario in SHORT_PHASE_SCENARIOS else PHASE_TIMEOUT_S,
                kafka_client=cfg.kafka_client, standby=cfg.standby,
            )
            env = fault_mod.DrillEnv(
                bootstrap=bootstrap, region=region, coordinator=coordinator, manifest=manifest,
                manifest_lock=workload.lock, fault_dir=dirs["faults"], timeline=drill_tl, rng=rng, seed=cfg.seed,
                topic_prefix=prefix, partitions=cfg.partitions, messages=cfg.messages, group=group, tasks=tasks,
                pause_s=cfg.pause_s, broker_pid=broker_pid,
            )
            fraction = rng.uniform(0.2, 0.6) if cfg.fault_at is None else cfg.fault_at
            trigger_at = int(fraction * cfg.messages)
            counter = _OutputCounter(dirs["output"])
            deadline = time.monotonic() + cfg.timeout_s
            next_progress = 0.0
            processed = delivered = 0
            fired = False if cfg.scenario == "sink-failure" else None
            nudges, next_nudge = 0, 0.0
            while True:
                now = time.monotonic()
                for e in reader.poll():
                    if e["ev"] == "batch":
                        processed += e["n"]
                    elif e["ev"] == "fault_fired":
                        fired = True
                if processed and not workload.started_at:
                    progress("members are processing: producing the rest of the input"
                             + (f" at {cfg.rate:.0f} records/s" if cfg.rate else ""))
                    workload.start()
                if fault_time is None and processed >= trigger_at:
                    progress(f"injecting {cfg.scenario} after {processed} records ({fraction:.0%} of the input)")
                    fault_time = time.time()
                    faults.append(fault_mod.inject(env, cfg.scenario))
                if now >= next_watch:
                    next_watch = now + CONTROLLER_WATCH_PERIOD_S
                    watch.poll()
                delivered = counter.count()
                if workload.started_at and workload.done.is_set():
                    workload.join(PRODUCER_JOIN_S)
                    with workload.lock:
                        expected = manifest.produced - manifest.poison_count
                    played_out = fired is not False and tasks.done()
                    if fault_time is not None and delivered >= expected and played_out:
                        break
                    if (not played_out and fault_time is not None and delivered >= expected
                            and now >= next_nudge and nudges < MAX_NUDGES):
                        # The input ran out before the fault fired (a sink trigger, a fault
                        # point that needs records) or while it plays out: give it records.
                        nudges += 1
                        next_nudge = now + NUDGE_PERIOD_S
                        progress("the fault has not fired or ended yet and the input is consumed: "
                                 f"producing {cfg.partitions * 10} more records")
                        workload.produce_more(cfg.partitions * 10)
                if now >= next_progress:
                    next_progress = now + PROGRESS_PERIOD_S
                    progress(f"produced {workload.produced}/{cfg.messages}, processed {processed} "
                             f"(incl. replays), published {delivered}, members {sorted(region.running_members())}")
                if region.failed:
                    raise RuntimeError(f"the region failed: {region.failed}")
                if now >= deadline:
                    raise TimeoutError(
                        f"drill did not finish within {cfg.timeout_s:.0f}s: published {delivered}, "
                        f"produced {workload.produced}, fault {'injected' if fault_time else 'not injected'}"
                    )
                time.sleep(WATCH_PERIOD_S)  # the watch loop's period, not a synchronisation
            settle_s = SETTLE_BASE_S + SETTLE_SESSIONS * cfg.session_timeout_ms / 1000
            progress(f"all {delivered} expected records published; waiting at most {settle_s:.0f} s for the "
                     "group's committed offsets to reach the input's end")
            t_settle = time.monotonic()
            settled = wait_for_commits(bootstrap, group, manifest, settle_s)
            drill_tl.event("settle", settled=settled, waited_s=round(time.monotonic() - t_settle, 3))
            progress("stopping the region")
        except Exception as exc:  # turned into the report's error: the drill fails, never hangs
            error = f"{type(exc).__name__}: {exc}"
            log.error("drill %s failed: %s\n%s", cfg.scenario, error, traceback.format_exc())
        finally:
            # Every step runs even if an earlier one fails; failures go into the report.
            cleanup_errors: list[str] = []

            def step(what: str, fn: Callable[[], Any]) -> None:
                try:
                    fn()
                except Exception as exc:
                    log.exception("drill clean-up: %s failed", what)
                    cleanup_errors.append(f"{what}: {exc!r}")

            if watch is not None:
                step("controller watch", watch.poll)
                step("controller watch close", watch.close)
            end_time = time.time()
            drill_tl.event("phase", phase="stopping")
            step("fault tasks", tasks.close)  # first: no member, coordinator or broker stays stopped
            if workload is not None:
                workload.stop()
                if not workload.started_at:
                    workload.done.set()
            if region is not None:
                step("stopping the members", region.stop)
            if workload is not None and workload.started_at:
                step("producer", lambda: workload.join(PRODUCER_JOIN_S))
            if error is None and not cleanup_errors:
                def read() -> None:
                    nonlocal committed
                    committed = read_committed(bootstrap, group)
                step("reading committed offsets", read)
            if coordinator is not None:
                step("stopping the coordinator", coordinator.terminate)
            drill_tl.close()
            if cleanup_errors and error is None:
                error = "; ".join(cleanup_errors)

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
            drawn = plot_timeline(events, drill_dir / "timeline.png",
                                  title=f"drill {cfg.scenario} (seed {cfg.seed})", produced=result.produced)
            plot_path = str(drawn) if drawn is not None else None
        except Exception as exc:  # the plot is an aid; its failure is reported, not hidden
            log.exception("timeline plot failed")
            error = error or f"plot failed: {exc!r}"
    report = build_report(
        scenario=cfg.scenario, seed=cfg.seed, members=cfg.members, partitions=cfg.partitions,
        messages=cfg.messages, verify_result=result, analysis=analysis, faults=faults,
        elapsed_s=time.time() - t_start, out_dir=str(drill_dir), plot=plot_path, error=error,
        fault_fired=fired,
    )
    (drill_dir / "report.json").write_text(json.dumps(report, indent=2))
    if not cfg.keep_output and report["ok"]:
        shutil.rmtree(dirs["output"], ignore_errors=True)
        shutil.rmtree(dirs["state"], ignore_errors=True)
    return report
