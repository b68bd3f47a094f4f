"""Pipeline throughput of a 3-member region (1 s period) vs the bare kafka-python poll loop.

Same input for both (one topic, ``--partitions`` partitions, ``--messages`` x
100-byte records, produced once), same machine, same run, same number of
record-handling processes, same partitions per process, same
max.poll.records (500):

* baseline: 3 processes, each a bare ``KafkaConsumer.poll`` loop over a third
  of the partitions (assigned, from the beginning), counting the records (it
  gets the same ``ConsumerRecord``s with value bytes as the pipeline's source).
  The processes import, connect and seek first, then start polling together
  (a "go" line on stdin), as the members of a region start together.
* pipeline: ``crkafka run``'s runner with 3 member processes, a 1 s checkpoint
  period, Kafka source -> exactly-once file sink (``passthrough``: every record
  written as a JSON line, published per checkpoint).

Steady-state windows, per process:

* baseline: from its first record to its last; rate = records / that time;
  CPU = its CPU time (process_time) over the same window.
* pipeline: output files 2..k-1 of a member (files are published once per
  checkpoint: the first interval holds the group join, the last one idles
  after the input ran out, so both are excluded): rate = their records /
  (mtime of file k-1 - mtime of file 1); CPU = the member's CPU time over the
  same window (the bench samples every member's /proc CPU time every 50 ms).

The figures are the ratio pipeline rate / baseline rate per member (median of
the members; goal >= 0.8), the total rates, and the ratio of CPU time per
record (baseline / pipeline; excludes start-up: imports, group join). The load
average before each round is printed too (the machine may be shared).

    .venv/bin/python bench/bench_pipeline.py [--messages 600000] [--rounds 3] [--bootstrap HOST:PORT]

Same-run before/after: ``--before-tree DIR`` (a copy of the tree to compare
with, e.g. ``git archive main | tar -x -C DIR``) runs each round's pipeline a
second time with the member processes importing DIR's code, the order of
before and after alternating round by round; both get CPU ratios against the
same round's bare loops.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Period of the CPU-time samples of the member processes.
CPU_SAMPLE_S = 0.05
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from cr_consumer.runtime.runner.region_runner import Region
from cr_consumer.testing.broker import bootstrap_or_embedded
from cr_consumer.testing.kafka_util import create_topic, producer, unique_name

BARE = r"""
import json, os, sys, time
from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
bootstrap, topic, parts, expected = sys.argv[1], sys.argv[2], [int(p) for p in sys.argv[3].split(",")], int(sys.argv[4])
mode, group = sys.argv[5], sys.argv[6]
# "-opfetch": the operator's fetch settings (cr_consumer/operator/config.py) instead of Kafka's defaults
fetch = {"fetch_max_bytes": 1024 * 1024, "fetch_max_wait_ms": 100} if mode.endswith("-opfetch") else {}
if mode.startswith("assign"):
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, max_poll_records=500, **fetch)
    tps = [TopicPartition(topic, p) for p in parts]
    c.assign(tps)
    c.seek_to_beginning(*tps)
else:  # "group": a member of one consumer group, as the pipeline's sources are
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False, max_poll_records=500,
                      auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=1000, **fetch)

    class Hold(ConsumerRebalanceListener):  # nothing is fetched before "go"
        def on_partitions_revoked(self, revoked):
            pass

        def on_partitions_assigned(self, assigned):
            c.pause(*assigned)

    c.subscribe([topic], listener=Hold())
    join_deadline = time.monotonic() + 120
    while len(c.assignment()) != len(parts):  # the range assignor gives each member its share once all joined
        if c.poll(timeout_ms=200):
            raise SystemExit("bare group member: records before go")
        if time.monotonic() > join_deadline:
            raise SystemExit(f"bare group member: assignment {sorted(c.assignment())} after 120 s")
print("ready", flush=True)
sys.stdin.readline()  # "go": every process starts polling at the same time
if not mode.startswith("assign"):
    c.resume(*c.assignment())
n, n_first, first, last, cpu_first, cpu_last = 0, 0, None, None, None, None
times_first = times_last = None
deadline = time.monotonic() + 600
while n < expected and time.monotonic() < deadline:
    batch = c.poll(timeout_ms=500)
    if batch:
        n += sum(len(recs) for recs in batch.values())
        if first is None:  # the clock starts after the first poll: its records are not in the window
            first, cpu_first, n_first = time.monotonic(), time.process_time(), n
            times_first = (time.thread_time(), *os.times()[:2])
        last, cpu_last = time.monotonic(), time.process_time()
        times_last = (time.thread_time(), *os.times()[:2])
split = [b - a for a, b in zip(times_first, times_last)] if times_first else [0.0, 0.0, 0.0]
print(json.dumps({"n": n, "window_n": n - n_first, "first": first, "last": last, "cpu": time.process_time(),
                  "window_cpu": (cpu_last or 0.0) - (cpu_first or 0.0), "window_main_thread": split[0],
                  "window_user": split[1], "window_system": split[2]}), flush=True)
sys.stdin.readline()  # "close": a group member that left early would make the others rebalance mid-run
c.close()
"""

PASSTHROUGH = '''
import time

from cr_consumer.runtime import KafkaSource, Operator, Pipeline


class CountSink(Operator):
    """Counts records; appends "count wall-time" to its file at each checkpoint (not
    exactly-once: the 'runtime without the file sink' variant, --count-sink)."""

    kind = "count_sink"

    def __init__(self, path):
        super().__init__()
        self.path, self.n = path, 0

    def process_batch(self, records):
        self.n += len(records)
        return []

    def checkpoint(self, seq):
        with open(self.path, "a") as f:
            f.write(f"{self.n} {time.time()}\\n")
        return super().checkpoint(seq)


def build(ctx):
    p = Pipeline(KafkaSource(topics=[ctx.param("topic")], options={"start_position": "earliest"}))
    if ctx.param("sink", "file") == "count":
        ctx.output_dir.mkdir(parents=True, exist_ok=True)
        return p.sink(CountSink(ctx.output_dir / (ctx.member + ".count")))
    return p.sink(ctx.file_sink())
'''


def produce_input(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    p = producer(bootstrap)
    value = b"x" * 100
    for i in range(n):
        p.send(topic, value=value, partition=i % partitions)
    p.flush()
    p.close()


def bare(bootstrap: str, topic: str, partitions: int, n: int, members: int, mode: str) -> dict:
    """``members`` bare poll loops, each over its share of the partitions:
    ``assign`` (assigned explicitly, no group) or ``group`` (one consumer group,
    range assignment, as the pipeline's sources; the join is not timed)."""
    shares = [[p for p in range(partitions) if p % members == m] for m in range(members)]
    if mode.startswith("group"):  # the range assignor's split: consecutive partitions per member
        size = partitions // members
        shares = [list(range(m * size, (m + 1) * size)) for m in range(members)]
        if partitions % members:
            raise ValueError("--bare-mode group needs partitions divisible by members")
    group = unique_name("bench-bare")
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                BARE,
                bootstrap,
                topic,
                ",".join(map(str, g)),
                str(n // partitions * len(g)),
                mode,
                group,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for g in shares
    ]
    for p in procs:  # all connected and seeked: start them together
        if p.stdout.readline().strip() != "ready":
            raise RuntimeError("a bare poll loop failed to start")
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    results = [json.loads(p.stdout.readline()) for p in procs]  # (each loop has a 600 s deadline)
    for p in procs:
        p.communicate("close\n", timeout=60)
    rates = [r["window_n"] / max(1e-9, r["last"] - r["first"]) for r in results]
    span = max(r["last"] for r in results) - min(r["first"] for r in results)
    window_n = max(1, sum(r["window_n"] for r in results))
    return {
        "per_member": rates,
        "total": sum(rates),
        "total_over_span": window_n / span,
        "cpu_us_per_record": 1e6 * sum(r["window_cpu"] for r in results) / window_n,
        # where it goes: the polling thread, and user / system time (os.times, tick-sampled)
        "cpu_split_us_per_record": {
            k: round(1e6 * sum(r[f"window_{k}"] for r in results) / window_n, 3)
            for k in ("main_thread", "user", "system")
        },
        "cpu_us_per_record_with_startup": 1e6 * sum(r["cpu"] for r in results) / max(1, sum(r["n"] for r in results)),
    }


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a live process (Linux /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _thread_cpu(pid: int) -> dict[int, tuple[float, float]]:
    """{thread id: (utime, stime)} of a live process's threads (Linux /proc), in seconds."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):  # the thread ended meanwhile
            continue
        out[int(task.name)] = (int(fields[11]) / tick, int(fields[12]) / tick)
    return out


#: ``py-spy dump`` names a thread as 'Thread 12345 (idle): "cr-event-member-0"' (12345: the OS thread id).
_DUMP_THREAD = re.compile(r'^Thread (?:0x[0-9A-Fa-f]+ )?\(?(\d+)\)? \([^)]*\): "(.*)"')


def thread_names(pid: int) -> dict[int, str]:
    """{OS thread id: Python thread name} of a live process, from ``py-spy dump``
    (empty without py-spy); the non-Python threads (zmq's, librdkafka's) carry their
    own names in /proc/PID/task/TID/comm."""
    from profile_util import py_spy

    out: dict[int, str] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[int(task.name)] = (task / "comm").read_text().strip()
        except (FileNotFoundError, ProcessLookupError):
            continue
    exe = py_spy()
    if exe is None:
        return out
    dump = subprocess.run([exe, "dump", "--nonblocking", "--pid", str(pid)], capture_output=True, text=True, timeout=60)
    for line in dump.stdout.splitlines():
        m = _DUMP_THREAD.match(line.strip())
        if m:
            out[int(m[1])] = m[2]
    return out


#: py-spy dumps per member before its threads are taken as named (see pipeline()).
NAME_TRIES = 10


def _has_event_thread(names: dict[int, str] | None) -> bool:
    return names is not None and any(n.startswith("cr-event-") for n in names.values())


def thread_role(name: str) -> str:
    """The member's threads grouped by role (the member's and kafka-python's thread names)."""
    for prefix, role in (
        ("cr-event-", "event (kafka-python poll)"),
        ("cr-process-", "process (pipeline, sink)"),
        ("region-io-", "control channel I/O"),
        ("MainThread", "control (commands)"),
        ("kafka", "kafka-python IO"),
        ("ZMQ", "zmq"),
    ):
        if name.startswith(prefix):
            return role
    return f"other ({name})"


class CpuSampler:
    """Samples the CPU time of a set of processes every :data:`CPU_SAMPLE_S`
    (wall clock ``time.time()``, the clock of file mtimes)."""

    def __init__(self, pids: Callable[[], dict[str, int | None]], threads: bool = False) -> None:
        self._pids = pids
        self.samples: dict[str, list[tuple[float, float]]] = {}
        #: With ``threads``: per process, (wall time, {thread id: (utime, stime)}) samples.
        self.thread_samples: dict[str, list[tuple[float, dict[int, tuple[float, float]]]]] = {}
        self._threads = threads
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def _run(self) -> None:
        while not self._stop.wait(CPU_SAMPLE_S):
            for name, pid in self._pids().items():
                if pid:
                    try:
                        self.samples.setdefault(name, []).append((time.time(), _cpu_seconds(pid)))
                        if self._threads and name != "coordinator":
                            self.thread_samples.setdefault(name, []).append((time.time(), _thread_cpu(pid)))
                    except (FileNotFoundError, ProcessLookupError):  # exited meanwhile
                        pass

    def threads_between(self, name: str, t0: float, t1: float) -> dict[int, tuple[float, float]]:
        """{thread id: (user s, system s)} of ``name`` between the samples nearest to t0 and t1."""
        s = self.thread_samples.get(name) or []
        if len(s) < 2:
            return {}
        a = min(s, key=lambda x: abs(x[0] - t0))[1]
        b = min(s, key=lambda x: abs(x[0] - t1))[1]
        return {tid: (u - a.get(tid, (0.0, 0.0))[0], k - a.get(tid, (0.0, 0.0))[1]) for tid, (u, k) in b.items()}

    def between(self, name: str, t0: float, t1: float) -> float | None:
        """CPU seconds of ``name`` between wall times t0 and t1 (linear interpolation)."""
        s = self.samples.get(name) or []
        if len(s) < 2 or t0 < s[0][0] or t1 > s[-1][0]:
            return None

        def at(t: float) -> float:
            for (ta, ca), (tb, cb) in itertools.pairwise(s):
                if ta <= t <= tb:
                    return ca + (cb - ca) * (t - ta) / max(1e-9, tb - ta)
            return s[-1][1]

        return at(t1) - at(t0)


def tree_python(tree: Path, work: Path) -> str:
    """An interpreter that runs the member processes from another source tree:
    this interpreter with ``tree`` first on PYTHONPATH (before the tree the
    runner puts there). For same-run before/after figures (``--before-tree``)."""
    shim = work / "python-before"
    # PYTHONSAFEPATH: ``python -m`` would otherwise put the working directory
    # first on sys.path, ahead of ``tree`` (a run from this checkout would import it).
    shim.write_text(
        f'#!/bin/sh\nPYTHONSAFEPATH=1 PYTHONPATH={tree}${{PYTHONPATH:+:$PYTHONPATH}} exec {sys.executable} "$@"\n'
    )
    shim.chmod(0o755)
    return str(shim)


def pipeline(
    bootstrap: str,
    topic: str,
    n: int,
    members: int,
    work: Path,
    drop: bool,
    period: float,
    profile: Path | None = None,
    profile_s: int = 8,
    profile_gil: bool = True,
    python: str = sys.executable,
    thread_cpu: bool = False,
    kafka: dict[str, str | int] | None = None,
) -> dict:
    """One pipeline round; with ``profile``, member-0 is sampled by py-spy
    (``--gil``: the thread holding the GIL; else every thread running on a CPU,
    system calls included) for ``profile_s`` seconds once its output appears
    (collapsed stacks to that file). With ``thread_cpu``, every member thread's
    user and system CPU over the member's window, by role (``threads``)."""
    work.mkdir(parents=True, exist_ok=True)
    module = work / "passthrough.py"
    module.write_text(PASSTHROUGH)
    out = work / ("out-drop" if drop else "out")
    region = Region(
        str(module),
        members=members,
        bootstrap=bootstrap,
        output_dir=out,
        state_dir=work / ("state-drop" if drop else "state"),
        period_s=period,
        params={"topic": topic, "sink": "count" if drop else "file"},
        kafka={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, **(kafka or {})},
        log_level="WARNING",
        python=python,
    )
    region.start()
    coordinator = region.coordinator_proc.pid if region.coordinator_proc is not None else None
    sampler = CpuSampler(lambda: {**region.pids(), "coordinator": coordinator}, threads=thread_cpu)
    sampler.start()
    lines_of: dict[Path, int] = {}  # published files never change: each is counted once (cheaply)
    profiler = None
    names: dict[str, dict[int, str]] = {}  # per member: thread id -> name (thread_cpu)
    name_tries: dict[str, int] = {}  # per member: py-spy dumps taken so far (thread_cpu)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            count = _published(out, drop, lines_of)
            if count >= n:
                break
            if thread_cpu and count > 0:
                _name_threads(region, names, name_tries)
            if profile is not None and profiler is None and count > 0:
                profiler = _start_profiler(region, profile, profile_s, profile_gil)
            time.sleep(0.5)
        if profiler is not None:
            profiler.join(profile_s + 30)
        report = region.report()
        (work / "status.json").write_text(json.dumps(report.to_body()))
        cpu = sum(_cpu_seconds(pid) for pid in region.pids().values() if pid)
    finally:
        sampler.stop()
        region.stop()
    per_member = []
    window_cpu, window_records = 0.0, 0
    windows: list[tuple[float, float]] = []
    by_role: dict[str, tuple[float, float]] = {}  # thread role -> (user s, system s) over the members' windows
    role_records = 0
    for name in region.members:
        intervals = _intervals(out, name, drop)
        if intervals is None:
            continue
        lines, mtimes = intervals
        per_member.append(sum(lines[1:]) / max(1e-9, mtimes[-1] - mtimes[0]))
        member_cpu = sampler.between(name, mtimes[0], mtimes[-1])
        if thread_cpu:
            _add_cpu_by_role(by_role, sampler.threads_between(name, mtimes[0], mtimes[-1]), names.get(name, {}))
            role_records += sum(lines[1:])
        if member_cpu is not None:
            window_cpu += member_cpu
            window_records += sum(lines[1:])
            windows.append((mtimes[0], mtimes[-1]))
    coordinator_cpu = None
    if windows:  # the coordinator's CPU over the members' common span, per record of that span
        t0, t1 = min(w[0] for w in windows), max(w[1] for w in windows)
        span_cpu = sampler.between("coordinator", t0, t1)
        if span_cpu is not None and window_records:
            coordinator_cpu = 1e6 * span_cpu / window_records
    # total: the sum of the members' steady rates (their windows differ by a checkpoint or so)
    return {
        "per_member": per_member,
        "total": sum(per_member),
        "coordinator_cpu_us_per_record": coordinator_cpu,
        "checkpoints": report.region.checkpoints,
        "resets": report.region.reset.resets,
        # DRAINING -> RUNNING of each checkpoint cycle (the controller's events): the flow's stops
        "checkpoint_ms": [e.fields["checkpoint_ms"] for e in report.events if e.kind == "checkpoint"],
        "cpu_us_per_record": 1e6 * window_cpu / window_records if window_records else float("nan"),
        "cpu_us_per_record_with_startup": 1e6 * cpu / n,
        "threads_us_per_record": {
            role: [round(1e6 * u / role_records, 3), round(1e6 * k / role_records, 3)]
            for role, (u, k) in sorted(by_role.items())
        }
        if role_records
        else None,
    }


def _name_threads(region: Region, names: dict[str, dict[int, str]], name_tries: dict[str, int]) -> None:
    """Each member's thread names (thread id -> name), for the CPU by role."""
    # py-spy's dump of a busy process sometimes misses threads: a member whose
    # event thread has no name yet is dumped again at the next turn (bounded),
    # else its event thread's CPU lands in "other (python)".
    for name, pid in region.pids().items():
        if pid and name_tries.get(name, 0) < NAME_TRIES and not _has_event_thread(names.get(name)):
            name_tries[name] = name_tries.get(name, 0) + 1
            names[name] = thread_names(pid)


def _start_profiler(region: Region, profile: Path, profile_s: int, profile_gil: bool) -> threading.Thread:
    """py-spy on the first member (by name) for ``profile_s`` seconds, on a thread."""
    from profile_util import py_spy_record

    pid = region.pids()[min(region.pids())]  # the first member by name
    profiler = threading.Thread(
        target=py_spy_record,
        args=(None, profile),
        kwargs={"pid": pid, "duration_s": profile_s, "gil": profile_gil},
        daemon=True,
    )
    profiler.start()
    return profiler


def _add_cpu_by_role(
    by_role: dict[str, tuple[float, float]], threads: dict[int, tuple[float, float]], names: dict[int, str]
) -> None:
    """Add each thread's (user s, system s) to its role's."""
    for tid, (user, system) in threads.items():
        role = thread_role(names.get(tid, f"tid {tid}"))
        u, k = by_role.get(role, (0.0, 0.0))
        by_role[role] = (u + user, k + system)


def _published(out: Path, drop: bool, lines_of: dict[Path, int]) -> int:
    """Records published so far: the counting sink's last count per member, else the
    lines of the published files (each counted once, in ``lines_of``)."""
    if drop:
        return sum(int(f.read_text().split()[-2]) for f in out.glob("*.count") if f.read_text().strip())
    for f in out.glob("*.jsonl"):
        if f not in lines_of:
            lines_of[f] = f.read_bytes().count(b"\n")
    return sum(lines_of.values())


def _intervals(out: Path, name: str, drop: bool) -> tuple[list[int], list[float]] | None:
    """A member's full checkpoint intervals: (records, end time) of each; None without two."""
    if drop:  # (count, time) per checkpoint: an interval that added records stands for a file
        path = out / f"{name}.count"
        marks = path.read_text().split() if path.exists() else []
        intervals, prev = [], 0
        for count, t in zip(marks[::2], marks[1::2]):
            if int(count) > prev:
                intervals.append((int(count) - prev, float(t)))
                prev = int(count)
        intervals = intervals[:-1]
        if len(intervals) < 2:
            return None
        return [k for k, _ in intervals], [t for _, t in intervals]
    files = sorted(out.glob(f"{name}-*.jsonl"))
    # Files 2..k-1 only: the first interval includes the group join, the last one
    # idles after the input ran out (its file is published at the next checkpoint).
    files = files[:-1]
    if len(files) < 2:  # no full interval after the first one
        return None
    return [f.read_bytes().count(b"\n") for f in files], [f.stat().st_mtime for f in files]


def _round_row(
    load: float, full: dict, bases: dict[str, dict], before: dict | None, count_only: dict | None, *, thread_cpu: bool
) -> dict:
    """One round's figures: the pipeline's, and its ratios to each bare loop (the first
    mode's are the headline ones), to the before tree's and to the counting sink's."""
    m = statistics.median(full["per_member"]) if full["per_member"] else 0.0
    row = {
        "load_avg_1m": round(load, 2),
        "pipeline_per_member": round(m),
        "pipeline_total": round(full["total"]),
        "checkpoints": full["checkpoints"],
        "resets": full["resets"],
        "pipeline_cpu_us_per_record": round(full["cpu_us_per_record"], 2),
        "pipeline_cpu_us_with_startup": round(full["cpu_us_per_record_with_startup"], 2),
        "coordinator_cpu_us_per_record": (
            round(full["coordinator_cpu_us_per_record"], 3)
            if full["coordinator_cpu_us_per_record"] is not None
            else None
        ),
    }
    for k, (mode, base) in enumerate(bases.items()):
        tag = "" if k == 0 else f"_vs_{mode}"  # the first mode is the headline ratio
        b = statistics.median(base["per_member"])
        row.update(
            {
                f"bare_{mode}_per_process": round(b),
                f"bare_{mode}_total": round(base["total"]),
                f"bare_{mode}_cpu_us_per_record": round(base["cpu_us_per_record"], 2),
                f"bare_{mode}_cpu_us_with_startup": round(base["cpu_us_per_record_with_startup"], 2),
                f"ratio_per_member{tag}": round(m / b, 3),
                f"ratio_total{tag}": round(full["total"] / base["total"], 3),
                f"cpu_ratio{tag}": round(base["cpu_us_per_record"] / full["cpu_us_per_record"], 3),
            }
        )
        if before is not None:
            row[f"before_cpu_ratio{tag}"] = round(base["cpu_us_per_record"] / before["cpu_us_per_record"], 3)
            row[f"before_ratio_per_member{tag}"] = round(
                (statistics.median(before["per_member"]) if before["per_member"] else 0.0) / b, 3
            )
        if count_only is not None:
            row[f"count_sink_cpu_ratio{tag}"] = round(base["cpu_us_per_record"] / count_only["cpu_us_per_record"], 3)
    if thread_cpu:
        row["pipeline_threads_us_per_record"] = full["threads_us_per_record"]  # role: [user, system]
        row.update(
            {f"bare_{mode}_split_us_per_record": base["cpu_split_us_per_record"] for mode, base in bases.items()}
        )
        if before is not None:
            row["before_threads_us_per_record"] = before["threads_us_per_record"]
    row["checkpoint_ms_median_max"] = _median_max(full["checkpoint_ms"])
    if before is not None:
        row["before_checkpoint_ms_median_max"] = _median_max(before["checkpoint_ms"])
        row["before_cpu_us_per_record"] = round(before["cpu_us_per_record"], 2)
    if count_only is not None:
        row["count_sink_cpu_us_per_record"] = round(count_only["cpu_us_per_record"], 2)
    row["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
    return row


def _report(args: argparse.Namespace, modes: list[str], rounds: list[dict]) -> dict:
    """The medians over the rounds."""
    report = {
        "messages": args.messages,
        "partitions": args.partitions,
        "members": args.members,
        "period_s": args.period,
        "bare_modes": modes,
        "rounds": rounds,
        "median_ratio_per_member": statistics.median(r["ratio_per_member"] for r in rounds),
        "median_ratio_total": statistics.median(r["ratio_total"] for r in rounds),
        "median_cpu_ratio": statistics.median(r["cpu_ratio"] for r in rounds),
    }
    if args.before_tree:
        report["median_before_cpu_ratio"] = statistics.median(r["before_cpu_ratio"] for r in rounds)
        report["median_before_ratio_per_member"] = statistics.median(r["before_ratio_per_member"] for r in rounds)
    for mode in modes[1:]:
        report[f"median_ratio_per_member_vs_{mode}"] = statistics.median(
            r[f"ratio_per_member_vs_{mode}"] for r in rounds
        )
        report[f"median_cpu_ratio_vs_{mode}"] = statistics.median(r[f"cpu_ratio_vs_{mode}"] for r in rounds)
    return report


def _median_max(values: list[float]) -> list[float] | None:
    return [round(statistics.median(values), 1), round(max(values), 1)] if values else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=600_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--period", type=float, default=1.0)
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="bare/pipeline pairs, interleaved so that load from other processes hits both",
    )
    parser.add_argument(
        "--count-sink",
        action="store_true",
        help="also run each round with a counting sink instead of the file sink (runtime cost alone)",
    )
    parser.add_argument(
        "--bare-mode",
        choices=("group", "assign", "both", "group+opfetch"),
        default="both",
        help="baseline poll loops as members of one consumer group (as the pipeline's sources), "
        "with explicitly assigned partitions, or both (default; the ratio is against group); "
        "group+opfetch: group, and group with the operator's fetch.max.bytes / fetch.max.wait.ms",
    )
    parser.add_argument("--bootstrap")
    parser.add_argument(
        "--before-tree",
        default=None,
        metavar="DIR",
        help="also run each round's pipeline from this source tree (e.g. `git archive main`), "
        "alternating the order with this tree's: before/after CPU ratios in the same run",
    )
    parser.add_argument(
        "--thread-cpu",
        action="store_true",
        help="per-thread user/system CPU of the members (by role) and of the bare loops (poll "
        "thread, user, system), us per record over the same windows",
    )
    parser.add_argument(
        "--profile-dir",
        default=None,
        help="after the rounds, one more pipeline round with member-0 sampled by py-spy --gil",
    )
    parser.add_argument("--profile-seconds", type=int, default=8, help="with --profile-dir: how long to sample")
    parser.add_argument(
        "--profile-cpu",
        action="store_true",
        help="with --profile-dir: sample every thread on a CPU (system calls included), not --gil",
    )
    parser.add_argument(
        "--member-kafka",
        action="append",
        default=[],
        metavar="PROPERTY=VALUE",
        help="a Kafka property for this tree's members only (not --before-tree's, not the bare "
        "loops'): e.g. the before/after of a default",
    )
    parser.add_argument(
        "--keep-work",
        action="store_true",
        help="keep the work directory (every round's output: ~1 GB per million records)",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    try:
        return run(args, work)
    finally:
        if args.keep_work:
            print(f"work directory kept: {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)


def run(args: argparse.Namespace, work: Path) -> int:
    """The rounds (see the module docstring); figures printed as JSON."""
    rounds = []
    member_kafka: dict[str, str | int] = {
        k: int(v) if v.isdigit() else v for k, v in (item.split("=", 1) for item in args.member_kafka)
    }
    with bootstrap_or_embedded(args.bootstrap) as bootstrap:
        topic = create_topic(bootstrap, unique_name("bench-pipeline"), args.partitions)
        t0 = time.monotonic()
        produce_input(bootstrap, topic, args.messages, args.partitions)
        print(f"produced {args.messages} x 100 B in {time.monotonic() - t0:.1f}s", flush=True)
        modes = {"both": ["group", "assign"], "group+opfetch": ["group", "group-opfetch"]}.get(
            args.bare_mode, [args.bare_mode]
        )
        for i in range(args.rounds):
            load = os.getloadavg()[0]
            bases = {mode: bare(bootstrap, topic, args.partitions, args.messages, args.members, mode) for mode in modes}
            before = None
            if args.before_tree and i % 2 == 0:  # before first in even rounds, after first in odd ones
                before = pipeline(
                    bootstrap,
                    topic,
                    args.messages,
                    args.members,
                    work / f"round-{i}-before",
                    drop=False,
                    period=args.period,
                    python=tree_python(Path(args.before_tree), work),
                    thread_cpu=args.thread_cpu,
                )
            full = pipeline(
                bootstrap,
                topic,
                args.messages,
                args.members,
                work / f"round-{i}",
                drop=False,
                period=args.period,
                thread_cpu=args.thread_cpu,
                kafka=member_kafka,
            )
            if args.before_tree and i % 2 == 1:
                before = pipeline(
                    bootstrap,
                    topic,
                    args.messages,
                    args.members,
                    work / f"round-{i}-before",
                    drop=False,
                    period=args.period,
                    python=tree_python(Path(args.before_tree), work),
                    thread_cpu=args.thread_cpu,
                )
            count_only = (
                pipeline(
                    bootstrap,
                    topic,
                    args.messages,
                    args.members,
                    work / f"round-{i}-count",
                    drop=True,
                    period=args.period,
                )
                if args.count_sink
                else None
            )
            row = _round_row(load, full, bases, before, count_only, thread_cpu=args.thread_cpu)
            rounds.append(row)
            print(f"round {i}: {row}", flush=True)
            if not args.keep_work:  # the round's output is counted: free the disk for the next rounds
                for done in work.glob(f"round-{i}*"):
                    shutil.rmtree(done, ignore_errors=True)
        if args.profile_dir:
            from profile_util import print_summary, summarise

            out = Path(args.profile_dir)
            out.mkdir(parents=True, exist_ok=True)
            pipeline(
                bootstrap,
                topic,
                args.messages,
                args.members,
                work / "profiled",
                drop=False,
                period=args.period,
                profile=out / "member-0.txt",
                profile_gil=not args.profile_cpu,
                profile_s=args.profile_seconds,
            )
            summary = summarise(out / "member-0.txt")
            (out / "member-0.summary.json").write_text(json.dumps(summary, indent=2))
            print_summary("pipeline member-0 (py-spy --gil)", summary)
    if not rounds:
        return 0
    report = _report(args, modes, rounds)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
