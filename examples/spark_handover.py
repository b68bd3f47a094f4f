"""Spark applications in one consumer group, stopped in the middle of a batch.

Scale a ``crkafka`` pipeline out and back in: a second application (its own
checkpoint location and output) joins the group of a running one with the
default consumer settings, the group moves partitions to it, then an
application stops in the middle of a batch (a clean ``query.stop()`` on
SIGTERM, or a kill -9). Each application writes ``(partition, offset,
value)`` with Spark's parquet sink; a Python UDF that sleeps per row makes
every batch slow, so a batch is in flight at each stop. The check: across
every application's committed output (what the parquet sink's
``_spark_metadata`` log lists), each produced record exactly once, with the
value produced at its offset, and the group's committed offsets at the end of
every partition.

Two sub-commands:

``run``       one application (used by ``scenario``): runs until SIGTERM.
``scenario``  a story on an embedded broker (or ``--bootstrap``) and
              coordinator, with input produced at a steady rate throughout:

    python examples/spark_handover.py scenario            # the handover: two applications
    python examples/spark_handover.py scenario --faults   # three applications, three stops

The handover: the first application runs alone, the second joins, and the
first is stopped for good by SIGTERM. The faults: the first runs alone, the
second joins and is killed -9 for good (a taker: the first takes its
partitions back), the third joins, the first is stopped by SIGTERM (the third
takes everything) and restarted from its checkpoint location (its replay
leaves the range the third read alone, and the third gives it partitions),
then the third is killed -9 for good (a giver: the first takes everything).

The figures it prints are the ones ``bench/bench_spark_handover.py`` collects:
the second application's first rows after its start (baseline: the first
application's, which joins an empty group), and the first application's
longest output stall while the group rebalances, from the second's start to
the second's first rows (baseline: its median time between two committed
batches while alone).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

#: Bound on each wait of the scenario (an application's first rows, a join, the rest of the input).
STEP_TIMEOUT_S = 240.0
#: Bound on an application's exit after SIGTERM (query.stop() and spark.stop()).
STOP_TIMEOUT_S = 90.0


# ----------------------------------------------------------------------------- run
def cmd_run(args) -> int:
    from cr_consumer.spark.session import local_session

    spark = local_session(f"crkafka-handover-{Path(args.workdir).name}", cores=1)
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    delay = args.row_delay_ms / 1000

    @F.udf(LongType())
    def slow(offset):  # the application's per-record work
        time.sleep(delay)
        return offset

    df = (
        spark.readStream.format("crkafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("kafka.group.id", args.group)
        .option("subscribe", args.topic)
        .option("coordinator", args.coordinator)
        .option("startingOffsets", args.starting_offsets)
        .option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
        .load()
    )
    out = (
        df.select("partition", slow(F.col("offset")).alias("offset"), F.col("value").cast("string"))
        .writeStream.format("parquet")
        .option("path", str(Path(args.workdir) / "out"))
        .option("checkpointLocation", str(Path(args.workdir) / "checkpoint"))
        .start()
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"query {out.id} started", flush=True)
    rc = 0
    try:
        while not stop.wait(0.2):
            if out.exception() is not None:
                print(f"query failed: {out.exception()}", file=sys.stderr, flush=True)
                rc = 1
                break
    finally:
        out.stop()
        spark.stop()
    print("stopped", flush=True)
    return rc


# ------------------------------------------------------------------------ output
def committed_files(out: Path) -> list[Path]:
    """The parquet files the sink committed: those its ``_spark_metadata`` log lists."""
    meta = out / "_spark_metadata"
    files: set[str] = set()
    for entry in sorted(meta.glob("*")) if meta.is_dir() else []:
        if entry.name.startswith("."):
            continue
        lines = entry.read_text().splitlines()
        for line in lines[1:]:  # the first line is the log's version
            doc = json.loads(line)
            if doc.get("action", "add") == "add":
                files.add(doc["path"])
    return [Path(urlparse(p).path) for p in sorted(files)]


def output_records(out: Path) -> collections.Counter:
    """(partition, offset, value) -> times in the committed output."""
    import pyarrow.parquet as pq

    seen: collections.Counter = collections.Counter()
    for path in committed_files(out):
        table = pq.read_table(path, columns=["partition", "offset", "value"])
        seen.update(
            zip(
                table.column("partition").to_pylist(),
                table.column("offset").to_pylist(),
                table.column("value").to_pylist(),
            )
        )
    return seen


def batch_times(out: Path) -> list[float]:
    """When each committed batch of the sink was written (its metadata entry's mtime)."""
    meta = out / "_spark_metadata"
    if not meta.is_dir():
        return []
    return sorted(p.stat().st_mtime for p in meta.glob("*") if not p.name.startswith("."))


# ---------------------------------------------------------------------- scenario
class App:
    """One application: its own work directory, process group and log."""

    def __init__(self, name: str, args, base: Path, starting_offsets: str) -> None:
        self.name = name
        self.workdir = base / name
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.cmd = [
            sys.executable,
            __file__,
            "run",
            "--bootstrap",
            args.bootstrap,
            "--coordinator",
            args.coordinator,
            "--topic",
            args.topic,
            "--group",
            args.group,
            "--workdir",
            str(self.workdir),
            "--starting-offsets",
            starting_offsets,
            "--row-delay-ms",
            str(args.row_delay_ms),
            "--max-offsets-per-trigger",
            str(args.max_offsets_per_trigger),
        ]
        self.start()

    def start(self) -> None:
        """Start the application's process; after a stop, a restart from its checkpoint
        location (Spark then ignores ``startingOffsets``), logging to the same file."""
        self.started = time.monotonic()
        with open(self.workdir / "app.log", "a") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def out(self) -> Path:
        return self.workdir / "out"

    def records(self) -> collections.Counter:
        return output_records(self.out)

    def has_rows(self) -> bool:
        return bool(committed_files(self.out))

    def _batches(self, log: str) -> set[int]:
        path = self.workdir / "checkpoint" / log if log != "_spark_metadata" else self.out / log
        return {int(p.name) for p in path.glob("[0-9]*") if p.name.isdigit()} if path.is_dir() else set()

    def planned(self) -> set[int]:
        """Batches in Spark's offset log."""
        return self._batches("offsets")

    def last_committed(self) -> int:
        """The newest batch in the parquet sink's log (-1: none)."""
        return max(self._batches("_spark_metadata"), default=-1)

    def in_flight(self) -> bool:
        """A batch is planned (in Spark's offset log) and its output is not committed
        (not in the parquet sink's log, so not in Spark's commit log either)."""
        return bool(self.planned() - self._batches("_spark_metadata") - self._batches("commits"))

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {self.tail()}")

    def tail(self) -> str:
        return (self.workdir / "app.log").read_text()[-3000:]

    def terminate(self) -> None:
        """SIGTERM to the driver: the application stops its query (query.stop()) and exits."""
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(STOP_TIMEOUT_S)

    def kill(self) -> None:
        """kill -9 of the whole application: driver, JVM, source runner, Python workers."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(STOP_TIMEOUT_S)


def wait_for(cond, what: str, *apps: App, timeout_s: float = STEP_TIMEOUT_S, period_s: float = 0.2) -> float:
    """Seconds until ``cond()`` (asked every ``period_s``); fails when an app exits or ``timeout_s`` passes."""
    t0 = time.monotonic()
    while not cond():
        for app in apps:
            app.check_alive()
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(period_s)
    return time.monotonic() - t0


def stop_in_flight(app: App, *others: App, kill: bool) -> bool:
    """Stop ``app`` right after it planned a new batch, long before that batch's sink can
    commit (its work takes the UDF's time per record), while ``others`` run on; True when
    the batch's output never became visible (the stop landed in flight, not in the instant
    between the sink's commit and the group commit: ``cr_consumer/spark/ownership.py``)."""
    seen = max(app.planned(), default=-1)
    wait_for(lambda: max(app.planned(), default=-1) > seen, f"a new batch of {app.name}", app, *others, period_s=0.02)
    if kill:
        app.kill()
    else:
        app.terminate()
    return app.in_flight()


def longest_stall(times: list[float], since: float, until: float) -> float:
    """The longest time without a committed batch within ``[since, until]`` (wall clock)."""
    points = [since] + [t for t in times if since < t < until] + [until]
    return max(b - a for a, b in itertools.pairwise(points))


def run_scenario(args, base: Path, *, faults: bool, alone_s: float = 0.0) -> dict:
    """The handover, or the faults (``faults``), of the module docstring; returns
    the story's figures and its verdict.

    ``args``: bootstrap, coordinator, topic (4 partitions, empty), group, rate,
    row_delay_ms, max_offsets_per_trigger. ``alone_s``: how long the first
    application runs alone before the second starts (its cadence alone, the
    stall figure's baseline, needs a few batches).

    1. The input starts, at ``rate`` records/s until step 4.
    2. The first application starts alone; the second joins once the first has
       rows.
    3. The stops of the story (``_handover`` or ``_faults``), each right after
       the stopped application planned a new batch; the story returns the
       application left reading, the survivor.
    4. Once two seconds' worth of input more is produced (the survivor has
       input from after the last stop to read), the input stops; the verdict
       waits for every produced record in the union of the outputs and for
       the group's commits at the end of every partition."""
    from cr_consumer.drill.manifest import Manifest
    from cr_consumer.drill.workload import Workload

    manifest = Manifest(group=args.group)
    workload = Workload(args.bootstrap, args.topic, 4, total=10**9, manifest=manifest, rate=args.rate).start()
    apps: list[App] = []
    figures: dict = {}
    try:
        first = App("first", args, base, "earliest")
        apps.append(first)
        figures["first_first_rows_s"] = wait_for(first.has_rows, "the first application's rows", first)
        time.sleep(alone_s)
        wall_joined = time.time()
        alone = batch_times(first.out)
        figures["first_median_gap_s"] = (
            statistics.median(b - a for a, b in itertools.pairwise(alone)) if len(alone) > 2 else None
        )
        second = App("second", args, base, "committed")
        apps.append(second)
        figures["second_first_rows_s"] = wait_for(second.has_rows, "the second application's rows", first, second)
        figures["first_longest_stall_s"] = longest_stall(batch_times(first.out), wall_joined, time.time())
        story = _faults if faults else _handover
        survivor = story(args, base, apps, figures)
        produced_at_stop = workload.produced
        wait_for(
            lambda: workload.produced >= produced_at_stop + 2 * args.rate,  # about two seconds of input
            "input produced after the last stop",
            survivor,
        )
        workload.stop()
        workload.join(60)
        figures.update(_verdict(args, manifest, apps, survivor))
        return figures
    finally:
        workload.stop()
        for app in apps:
            if app.proc.poll() is None:
                app.kill()


def _handover(args, base: Path, apps: list[App], figures: dict) -> App:
    """The first, the giver, stopped for good by SIGTERM; the second reads on."""
    first, second = apps
    figures["giver_in_flight_at_stop"] = stop_in_flight(first, second, kill=False)
    return second


def _faults(args, base: Path, apps: list[App], figures: dict) -> App:
    """A taker killed -9 for good; the giver stopped by SIGTERM and restarted; the
    other giver killed -9 for good. The first reads on."""
    first, second = apps
    figures["taker_in_flight_at_kill"] = stop_in_flight(second, first, kill=True)  # the first takes its partitions back
    third = App("third", args, base, "committed")
    apps.append(third)
    wait_for(third.has_rows, "the third application's rows", first, third)
    figures["giver_in_flight_at_stop"] = stop_in_flight(first, third, kill=False)  # the third takes everything
    before = max(first.planned(), default=-1)
    first.start()  # from its checkpoint location: the replay of its batch in flight, then new batches
    wait_for(lambda: first.last_committed() > before, "a new batch of the restarted first application", first, third)
    figures["giver_in_flight_at_kill"] = stop_in_flight(third, first, kill=True)  # the first takes everything
    return first


def _verdict(args, manifest, apps: list[App], survivor: App) -> dict:
    """Every produced record in the union of the outputs, once and with its value,
    and the group's commits at the end of every partition (``survivor`` reads on)."""
    from cr_consumer.testing.kafka_util import committed_offsets

    expected = {(p, o, v) for (_t, p), values in manifest.values.items() for o, v in values.items()}
    ends = {p: o + 1 for (_t, p), o in manifest.last_offsets().items()}

    def union() -> collections.Counter:
        return sum((app.records() for app in apps), collections.Counter())

    wait_for(lambda: set(union()) >= expected, "every record in the outputs", survivor, period_s=2.0)
    committed: dict[int, int] = {}

    def at_end() -> bool:
        committed.clear()
        committed.update(committed_offsets(args.bootstrap, args.group, args.topic))
        return committed == ends

    with contextlib.suppress(TimeoutError):  # the verdict says where the commits stopped
        wait_for(at_end, "the commits", survivor, timeout_s=60)
    outputs = union()
    figures = {
        "produced": len(expected),
        "duplicates": sum(1 for c in outputs.values() if c > 1),
        "missing": len(expected - set(outputs)),
        "unexpected": len(set(outputs) - expected),
        "committed": committed,
        "ends": ends,
        "per_app": {app.name: sum(app.records().values()) for app in apps},
    }
    figures["ok"] = figures["duplicates"] == figures["missing"] == figures["unexpected"] == 0 and committed == ends
    return figures


def cmd_scenario(args) -> int:
    from coordinator.launcher import CoordinatorProcess
    from cr_consumer.testing.broker import ENV_BOOTSTRAP, EmbeddedBroker
    from cr_consumer.testing.kafka_util import create_topic, unique_name

    base = Path(args.workdir or tempfile.mkdtemp(prefix="crkafka-handover-"))
    base.mkdir(parents=True, exist_ok=True)
    bootstrap = args.bootstrap or os.environ.get(ENV_BOOTSTRAP)
    with (
        EmbeddedBroker(log_path=base / "broker.log") if not bootstrap else GivenBroker(bootstrap) as broker,
        CoordinatorProcess(state_dir=base / "coordinator") as coord,
    ):
        args.bootstrap, args.coordinator = broker.bootstrap, coord.endpoint
        args.topic, args.group = create_topic(args.bootstrap, unique_name("handover"), 4), unique_name("handover")
        result = run_scenario(args, base, faults=args.faults, alone_s=10.0)
    print(json.dumps(result), flush=True)
    print("EXACTLY ONCE: OK" if result["ok"] else f"EXACTLY ONCE: FAILED (logs in {base})")
    return 0 if result["ok"] else 1


class GivenBroker:
    """A broker given by address (a real cluster): nothing to start or stop."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def __enter__(self) -> GivenBroker:
        return self

    def __exit__(self, *exc) -> None:
        return None


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--row-delay-ms", type=float, default=2.0, help="the UDF's sleep per record")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=600)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="one application")
    for name in ("bootstrap", "coordinator", "topic", "group", "workdir"):
        run.add_argument(f"--{name}", required=True)
    run.add_argument("--starting-offsets", default="earliest")
    scenario = sub.add_parser("scenario", help="join, stop for good, verify exactly once")
    scenario.add_argument("--bootstrap", default=None, help="a running cluster (default: an embedded broker)")
    scenario.add_argument("--workdir", default=None)
    scenario.add_argument("--rate", type=float, default=150.0, help="records/s produced throughout")
    scenario.add_argument("--faults", action="store_true", help="three applications, three stops (else the handover)")
    for p in (run, scenario):
        add_load_arguments(p)
    args = parser.parse_args(argv)
    return cmd_run(args) if args.command == "run" else cmd_scenario(args)


if __name__ == "__main__":
    sys.exit(main())
