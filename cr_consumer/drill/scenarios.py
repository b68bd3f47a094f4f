"""Running one drill end to end.

:func:`run_drill` (one scenario) does, in order:

1. Lay out the drill directory ``OUT/<scenario>-s<seed>/``: ``output/`` (the
   file sinks' files), ``timeline/`` (events), ``faults/`` (triggers), ``state/``
   (member checkpoints), ``coordinator/`` (its durable state), ``logs/``.
2. Use ``--bootstrap`` / ``$KAFKA_BOOTSTRAP_SERVERS``, else start an embedded
   broker (stopped at the end; its pid is what pause-broker stops, so that
   scenario is refused with an external cluster).
3. Create the input topic (``partitions`` partitions) with unique names; the
   new-topic scenario subscribes by pattern, the others by topic name. With
   the Kafka sink, also create its topics (the drill's outputs: ``outputs.py``).
4. Start the coordinator process (``coordinator.launcher``); with
   ``coordinator_standby``, a leader and a standby with their log on the drill's
   broker (topic ``<prefix>.coordinator-log``, ``coordinator_standby.py``); the
   members and the drill's clients get both endpoints. Then the producer
   thread (``workload.py``; with ``rate`` > 0 the input keeps arriving while
   the fault happens), then the region's member processes: the runner's
   :class:`~cr_consumer.runtime.runner.region_runner.Region` (the code of
   ``crkafka run``: a member that dies is restarted under the same name, on
   the warm standby unless ``standby`` is False; member logs in
   ``state/logs/``), with ``$CRKAFKA_FAULT_DIR`` set so the drill can arm the
   runtime's fault points; the faults act on it through
   :class:`~cr_consumer.runtime.runner.handle.RegionHandle`.
5. Watch the timeline; when the members have processed a seeded random
   fraction (20-60 %) of the input, inject the fault (``faults.py``).
6. Wait (bounded by ``timeout_s``) until the published output (the files, or
   the output topic's committed records) holds every expected record
   (produced minus poison; with ``dead_letter``, the dead-letter output counted
   in, every produced record) and the fault has played out (a pause ended, an
   armed fault point fired: ``fault_tasks.py``). Progress is printed every
   second. Then wait (bounded, ``settle.py``) until the group's committed
   offsets reach the input's end: a partition moving between live members
   under cooperative rebalancing is committed by its new owner only after the
   group is stable again.
7. End the fault tasks (every paused process is continued), stop the region,
   read the group's committed offsets, stop the coordinator (and the standby); with the Kafka
   sink, read its topics and write the output's batches as stored to ``logs/output-log.txt``
   while the broker still runs; stop the broker. Every process started here is stopped in
   ``finally``.
8. Once every process started is stopped, conclude on what the drill recorded
   (``verdict.py``: verify, analyse, report), with the output the drill's outputs
   hand the verifier (the files read then, or the topics read in step 7).

The scenarios and a drill's settings are in ``config.py``, steps 5-6 in
``watch_loop.py``.

A drill that times out still verifies and reports (its records are then
missing) and fails.
"""

from __future__ import annotations

import contextlib
import logging
import random
import re
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from coordinator.launcher import CoordinatorProcess
from cr_consumer.drill import faults as fault_mod
from cr_consumer.drill.config import (
    BASIC_SCENARIOS,
    EMBEDDED_BROKER_ONLY,
    MAX_RESETS,
    MEMBER_TIMEOUT_S,
    PHASE_TIMEOUT_S,
    SCENARIOS,
    SHORT_PHASE_SCENARIOS,
    SHORT_PHASE_TIMEOUT_S,
    STANDBY_LEASE_S,
    UNTIMELY_SCENARIOS,
    DrillConfig,
)
from cr_consumer.drill.coordinator_standby import start_leader_and_standby
from cr_consumer.drill.fault_tasks import FaultTasks
from cr_consumer.drill.manifest import Manifest
from cr_consumer.drill.outputs import DrillOutputs
from cr_consumer.drill.report import DrillReport
from cr_consumer.drill.settle import wait_for_commits
from cr_consumer.drill.timeline import TimelineReader, TimelineWriter
from cr_consumer.drill.verdict import conclude
from cr_consumer.drill.watch_loop import PRODUCER_JOIN_S, ControllerWatch, WatchLoop
from cr_consumer.drill.workload import ACK_TIMEOUT_S, Workload
from cr_consumer.runtime.fault_points import ENV_FAULT_DIR
from cr_consumer.runtime.runner.handle import RegionHandle
from cr_consumer.runtime.runner.region_runner import Region
from cr_consumer.testing.broker import bootstrap_or_embedded
from cr_consumer.testing.kafka_util import create_topic, group_offsets, unique_name

log = logging.getLogger(__name__)

#: The members' partition.assignment.strategy when the drill runs eager.
EAGER_ASSIGNORS = "range,roundrobin"
#: Share of the input produced before the region starts; the rest is produced
#: once the members process records, so the fault lands in a live stream.
WARMUP_SHARE = 0.05
#: Bound on waiting for the group's commits to reach the input's end before the
#: region is stopped (settle.py): a moving partition is committed by its new
#: owner after a second rebalance, a join phase of up to about a session
#: timeout each; the bound is SETTLE_BASE_S + SETTLE_SESSIONS session timeouts.
SETTLE_BASE_S = 10.0
SETTLE_SESSIONS = 2


def _progress(msg: str) -> None:
    print(f"[drill {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _fresh_dirs(cfg: DrillConfig) -> tuple[Path, dict[str, Path]]:
    """The drill's directory (emptied) and its sub-directories by name."""
    drill_dir = (cfg.out / f"{cfg.scenario}-s{cfg.seed}").resolve()
    if drill_dir.exists():
        shutil.rmtree(drill_dir)
    dirs = {name: drill_dir / name for name in ("output", "timeline", "faults", "state", "coordinator", "logs")}
    for d in dirs.values():
        d.mkdir(parents=True)
    return drill_dir, dirs


def _pipeline_params(
    cfg: DrillConfig, dirs: dict[str, Path], prefix: str, topic: str, outputs: DrillOutputs
) -> dict[str, str]:
    """The drill pipeline's parameters: where it writes its timeline and finds its faults, what it
    reads, where it writes."""
    params = {
        "timeline_dir": str(dirs["timeline"]),
        "fault_dir": str(dirs["faults"]),
        "session_timeout_ms": str(cfg.session_timeout_ms),
        "sink": cfg.sink.value,
        "dead_letter": "true" if cfg.dead_letter else "false",
        "state": "true" if cfg.state else "false",
    }
    params.update(outputs.params())
    if not cfg.cooperative:  # else the runtime's default (cooperative-sticky)
        params["assignment_strategy"] = EAGER_ASSIGNORS
    if cfg.scenario == "new-topic":
        params["pattern"] = re.escape(prefix) + r"-.*"
    else:
        params["topics"] = topic
    return params


class _CleanUp:
    """Every step runs even if an earlier one fails; failures go into the report."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def step(self, what: str, fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception as exc:
            log.exception("drill clean-up: %s failed", what)
            self.errors.append(f"{what}: {exc!r}")


def _stop_the_drill(
    cleanup: _CleanUp,
    drill_tl: TimelineWriter,
    tasks: FaultTasks,
    *,
    watch: ControllerWatch | None,
    workload: Workload | None,
    region: RegionHandle | None,
) -> float:
    """Stop the faults, the producer and the members (the coordinator and the
    broker stay up); the time the drill's stopping phase began."""
    if watch is not None:
        cleanup.step("controller watch", watch.poll)
        cleanup.step("controller watch close", watch.close)
    end_time = time.time()
    drill_tl.event("phase", phase="stopping")
    cleanup.step("fault tasks", tasks.close)  # first: no member, coordinator or broker stays stopped
    if workload is not None:
        workload.stop()
        if not workload.started_at:
            workload.done.set()
    if region is not None:
        cleanup.step("stopping the members", region.stop)
    if workload is not None and workload.started_at:
        cleanup.step("producer", lambda: workload.join(PRODUCER_JOIN_S))
    return end_time


def run_drill(cfg: DrillConfig, progress: Callable[[str], None] = _progress) -> DrillReport:
    rng = random.Random(cfg.seed)
    drill_dir, dirs = _fresh_dirs(cfg)
    prefix = unique_name(f"drill-{cfg.scenario}")
    group = f"{prefix}-group"
    manifest = Manifest(group=group)
    drill_tl = TimelineWriter(dirs["timeline"] / "drill.jsonl", "drill")
    reader = TimelineReader(dirs["timeline"])
    error: str | None = None
    loop: WatchLoop | None = None
    env: fault_mod.DrillEnv | None = None
    topics = [f"{prefix}-in"]
    outputs = DrillOutputs.of(cfg, prefix, dirs["output"])
    t_start = time.time()
    committed: dict[tuple[str, int], int | None] | None = None
    end_time: float | None = None
    progress(
        f"{cfg.scenario}: seed {cfg.seed}, {cfg.members} members, {cfg.partitions} partitions, "
        f"{cfg.messages} messages -> {drill_dir}"
    )

    with contextlib.ExitStack() as stack:
        bootstrap, broker_pid = stack.enter_context(bootstrap_or_embedded(cfg.bootstrap, dirs["logs"] / "broker.log"))
        region = coordinator = standby = workload = watch = None
        tasks = FaultTasks(drill_tl)
        try:
            create_topic(bootstrap, topics[0], cfg.partitions)
            outputs.create(bootstrap)
            if cfg.coordinator_standby:
                coordinator, standby = start_leader_and_standby(
                    bootstrap, dirs["coordinator"], dirs["logs"], f"{prefix}.coordinator-log", STANDBY_LEASE_S
                )
                progress(
                    f"broker {bootstrap}, coordinator leader {coordinator.endpoint} (pid {coordinator.pid}), "
                    f"standby {standby.endpoint} (pid {standby.pid})"
                )
            else:
                coordinator = CoordinatorProcess(
                    dirs["coordinator"] / "state", http="auto", log_path=dirs["logs"] / "coordinator.log"
                )
                coordinator.start()
                progress(f"broker {bootstrap}, coordinator {coordinator.endpoint} (pid {coordinator.pid})")
            endpoint = ",".join(p.endpoint for p in (coordinator, standby) if p is not None and p.endpoint)
            if not endpoint:
                raise RuntimeError("the coordinator started without an endpoint")
            watch = ControllerWatch(endpoint, group, drill_tl)
            workload = Workload(
                bootstrap,
                topics[0],
                cfg.partitions,
                cfg.messages,
                manifest,
                seed=cfg.seed,
                rate=cfg.rate,
                poison_ratio=cfg.poison_ratio,
                marked_poison=cfg.dead_letter,
                ack_timeout_s=ACK_TIMEOUT_S + cfg.pause_s,
            )
            workload.warmup(max(cfg.partitions, int(cfg.messages * WARMUP_SHARE)))
            phase_timeout_s = SHORT_PHASE_TIMEOUT_S if cfg.scenario in SHORT_PHASE_SCENARIOS else PHASE_TIMEOUT_S
            region = Region(
                "cr_consumer.drill.pipeline",
                members=cfg.members,
                bootstrap=bootstrap,
                coordinator=endpoint,
                group=group,
                output_dir=dirs["output"],
                state_dir=dirs["state"],
                period_s=cfg.period_s,
                member_timeout_s=MEMBER_TIMEOUT_S,
                max_consecutive_resets=MAX_RESETS,
                drain_timeout_s=phase_timeout_s,
                reset_timeout_s=phase_timeout_s,
                params=dict(_pipeline_params(cfg, dirs, prefix, topics[0], outputs)),
                env={ENV_FAULT_DIR: str(dirs["faults"])},
                kafka_client=cfg.kafka_client,
                standby=cfg.standby,
            ).start()
            env = fault_mod.DrillEnv(
                bootstrap=bootstrap,
                region=region,
                coordinator=coordinator,
                manifest=manifest,
                manifest_lock=workload.lock,
                fault_dir=dirs["faults"],
                timeline=drill_tl,
                rng=rng,
                seed=cfg.seed,
                topic_prefix=prefix,
                partitions=cfg.partitions,
                messages=cfg.messages,
                group=group,
                tasks=tasks,
                pause_s=cfg.pause_s,
                broker_pid=broker_pid,
                standby=standby,
            )
            fraction = rng.uniform(0.2, 0.6) if cfg.fault_at is None else cfg.fault_at
            output = outputs.counter(bootstrap)
            try:
                loop = WatchLoop(
                    cfg,
                    env,
                    region=region,
                    workload=workload,
                    manifest=manifest,
                    reader=reader,
                    tasks=tasks,
                    watch=watch,
                    output=output,
                    fraction=fraction,
                    progress=progress,
                )
                delivered = loop.run()
            finally:
                output.close()
            settle_s = SETTLE_BASE_S + SETTLE_SESSIONS * cfg.session_timeout_ms / 1000
            progress(
                f"all {delivered} expected records published; waiting at most {settle_s:.0f} s for the "
                "group's committed offsets to reach the input's end"
            )
            t_settle = time.monotonic()
            settled = wait_for_commits(bootstrap, group, manifest, settle_s)
            drill_tl.event("settle", settled=settled, waited_s=round(time.monotonic() - t_settle, 3))
            progress("stopping the region")
        except Exception as exc:  # noqa: BLE001 - turned into the report's error: the drill fails, never hangs
            error = f"{type(exc).__name__}: {exc}"
            log.error("drill %s failed: %s\n%s", cfg.scenario, error, traceback.format_exc())
        finally:
            cleanup = _CleanUp()
            end_time = _stop_the_drill(cleanup, drill_tl, tasks, watch=watch, workload=workload, region=region)
            if error is None and not cleanup.errors:

                def read() -> None:
                    nonlocal committed
                    committed = dict(group_offsets(bootstrap, group))

                cleanup.step("reading committed offsets", read)
            if coordinator is not None:
                cleanup.step("stopping the coordinator", coordinator.terminate)
            if standby is not None:
                cleanup.step("stopping the standby coordinator", standby.terminate)
            outputs.read_topics(bootstrap, cleanup.step, dirs["logs"] / "output-log.txt")
            drill_tl.close()
            if cleanup.errors and error is None:
                error = "; ".join(cleanup.errors)

    return conclude(
        cfg,
        drill_dir,
        dirs,
        output=outputs.published(),
        dead_letters=outputs.dead_letters(),
        manifest=manifest,
        reader=reader,
        tasks=tasks,
        committed=committed,
        fault_time=loop.fault_time if loop is not None else None,
        end_time=end_time,
        faults=loop.faults if loop is not None else [],
        error=error,
        started=t_start,
        takeover=env.takeover if env is not None else None,
    )


__all__ = ["BASIC_SCENARIOS", "EMBEDDED_BROKER_ONLY", "SCENARIOS", "UNTIMELY_SCENARIOS", "DrillConfig", "run_drill"]
