"""Consumer-operator figures, side by side in one run against the bare poll loop.

Modes, alternated trial by trial on the same topic (each trial its own group):

* ``bare``: bench/baseline.py's bare kafka-python poll loop;
* ``operator``: one ConsumerOperator (event thread -> queue -> process thread
  -> offset manager -> no-op ``submit_batch``), no region cycles;
* ``operator+cycles``: the same with a drain + checkpoint every second
  (permit blocked, drain, checkpoint, unblock: what the region runtime does);
* ``operator/submit``: per-record ``submit(record)`` no-op instead of the batch form.

Per-record work (``--work-trials N``; each trial a fresh process, so the
collector's state is that of a plain program): a callback doing about a
microsecond of Python per record (:class:`RecordWork`: a dict and a set
update) is given to

* ``work/bare``: the bare poll loop calling it for each record;
* ``work/operator``: ``ConsumerOperator(config, submit=...)`` with the default
  ``gc_policy`` (freeze after ``start()``), as a library user writes it;
* ``work/operator-gc-none``: the same with ``gc_policy="none"`` (the collector
  left alone: the figure before the policy existed);
* ``work/operator-librdkafka``: ``work/operator`` with ``client="librdkafka"``
  (``--work-modes`` picks the modes; the first three by default).

``--client librdkafka`` runs every other operator figure (throughput modes,
drain latency, idle CPU, reset latency) with the librdkafka client.

Both sides import the operator package (the same script). The modes run
alternated, the order reversed every other trial; the figures are medians of
the per-trial ratios to the bare loop of the same trial: records/s and CPU
per record (this process's CPU from the first record to the last, which the
load of other processes on a shared machine does not inflate), plus each
thread's share of that CPU (/proc/self/task).

Throughput is records/s from the first submitted record to the last; the
ratio is against the median of the bare loop in the same run. Drain latency
(stop polling -> commit acknowledged, 4 partitions) is sampled by a drain +
checkpoint every ``--drain-samples-s`` (100 ms) during a separate consuming run.
Also the CPU of one operator on an idle topic (``--idle-s``).

Reset latency after a member joins (a real coordinator process): two members
consume a topic, a third joins; the region (as the runtime would) resets all
three to a merged checkpoint when asked. Reported: from the first revocation
to every member's first tuple after its reset, minus the broker's own
rebalance time (first revocation -> last assignment).

    .venv/bin/python bench/bench_operator.py                      # 1M x 100 B, 4 partitions, 3 trials
    .venv/bin/python bench/bench_operator.py --messages 200000 --trials 3
    .venv/bin/python bench/bench_operator.py --messages 300000 --trials 0 --drain-samples-s 0 \
        --idle-s 0 --reset-trials 0 --work-trials 5              # per-record work only
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from baseline import bare_poll_loop, produce_fixed

from cr_consumer import ConsumerOperator, OperatorConfig, StartKind
from cr_consumer.operator.region import RegionPermit

#: Bound on one operator run, so a stall fails the benchmark instead of hanging it.
RUN_TIMEOUT_S = 300.0
#: The operators' Kafka client (--client): "kafka-python" or "librdkafka".
CLIENT = "kafka-python"
#: Extra consumer properties of the operators (--kafka PROP=VALUE).
EXTRA_KAFKA: dict[str, object] = {}


class RecordWork:
    """About a microsecond of Python per record, as a real callback does:
    a dict update keyed by (partition, offset bucket) and a set insert."""

    def __init__(self) -> None:
        self.bytes_per_key: dict[tuple[int, int], int] = {}
        self.offsets: set[int] = set()

    def __call__(self, record) -> None:
        key = (record.partition, record.offset & 1023)
        self.bytes_per_key[key] = self.bytes_per_key.get(key, 0) + len(record.value)
        self.offsets.add(record.offset)


def thread_cpu() -> dict[str, float]:
    """CPU seconds (user + system) of each thread of this process, by thread name."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        name = names.get(int(tid), f"tid-{tid}")
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


class Counter:
    def __init__(self, n: int) -> None:
        self.n = n
        self.seen = 0
        self.first = None
        self.last = None
        self.done = threading.Event()
        self.threads_first: dict[str, float] | None = None
        self.threads_last: dict[str, float] = {}

    def batch(self, records) -> None:
        if self.first is None:
            self.first = time.perf_counter()
            self.cpu_first = time.process_time()
        self.seen += len(records)
        if self.seen >= self.n:
            self.last = time.perf_counter()
            self.cpu_last = time.process_time()
            self.done.set()

    def record(self, _record) -> None:
        if self.first is None:
            self.first = time.perf_counter()
            self.cpu_first = time.process_time()
            self.threads_first = thread_cpu()
        self.seen += 1
        if self.seen >= self.n:
            self.last = time.perf_counter()
            self.cpu_last = time.process_time()
            self.threads_last = thread_cpu()
            self.done.set()

    def threads(self) -> dict[str, float] | None:
        if self.threads_first is None:
            return None
        return {k: round(v - self.threads_first.get(k, 0.0), 3) for k, v in self.threads_last.items()}


def _config(bootstrap, topic, **kw) -> OperatorConfig:
    return OperatorConfig(
        bootstrap_servers=bootstrap,
        group_id=f"bench-op-{uuid.uuid4().hex[:8]}",
        operator_name="m0",
        topics=[topic],
        start_position=StartKind.EARLIEST,
        drain_timeout_s=30,
        reset_timeout_s=30,
        consumer_properties={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000, **EXTRA_KAFKA},
        **{"client": CLIENT, **kw},
    )


def run_operator(
    bootstrap, topic, n, *, cycle_every_s=None, per_record=False, work=None, on_started=None, block_lead_s=0.0, **config
) -> dict:
    """One operator reads ``n`` records of ``topic``; ``on_started(op)``, if given,
    runs once the operator has started (before the drain cycles); each cycle
    blocks the permit ``block_lead_s`` before it calls the drain (a runtime's
    drain signal, then its pipeline flush)."""
    counter = Counter(n)
    permit = RegionPermit()
    if work is not None:

        def submit(record) -> None:
            work(record)
            counter.record(record)

        op = ConsumerOperator(_config(bootstrap, topic, **config), submit, permit=permit)
    elif per_record:
        op = ConsumerOperator(_config(bootstrap, topic, **config), counter.record, permit=permit)
    else:
        op = ConsumerOperator(_config(bootstrap, topic, **config), submit_batch=counter.batch, permit=permit)
    drains_ms: list[float] = []
    stop = threading.Event()

    def cycles():
        seq = 0
        while not stop.wait(cycle_every_s):
            if counter.first is None:
                continue
            seq += 1
            permit.block(30)
            if block_lead_s:
                time.sleep(block_lead_s)
            t0 = time.perf_counter()
            op.drain()
            drains_ms.append((time.perf_counter() - t0) * 1000)
            op.checkpoint(seq)
            permit.unblock()

    op.start()
    driver = None
    try:
        if on_started is not None:
            on_started(op)
        if cycle_every_s:
            driver = threading.Thread(target=cycles, daemon=True)
            driver.start()
        if not counter.done.wait(RUN_TIMEOUT_S):
            raise TimeoutError(f"operator saw {counter.seen} of {n} records")
    finally:
        stop.set()
        if driver is not None:
            driver.join(30)
        op.close()
    seconds = counter.last - counter.first
    return {
        "records": counter.seen,
        "seconds": seconds,
        "records_per_s": counter.seen / seconds,
        "cpu_s": counter.cpu_last - counter.cpu_first,
        "drains": len(drains_ms),
        "drain_ms": drains_ms,
        "thread_cpu_s": counter.threads(),
    }


WORK_MODES = ("work/bare", "work/operator", "work/operator-gc-none", "work/operator-librdkafka")


def work_trial(mode: str, bootstrap: str, topic: str, n: int) -> dict:
    """One per-record-work trial in this (fresh) process; see the module docstring."""
    work = RecordWork()
    if mode == "work/bare":
        r = bare_poll_loop(bootstrap, topic, n, on_record=work)
    elif mode == "work/operator":
        r = run_operator(bootstrap, topic, n, work=work)
    elif mode == "work/operator-gc-none":
        r = run_operator(bootstrap, topic, n, work=work, gc_policy="none")
    elif mode == "work/operator-librdkafka":
        r = run_operator(bootstrap, topic, n, work=work, client="librdkafka")
    else:
        raise SystemExit(f"unknown work mode {mode!r}")
    r.pop("drain_ms", None)
    import gc

    r["gc_collections"] = [g["collections"] for g in gc.get_stats()]
    r["gc_frozen"] = gc.get_freeze_count()
    return r


def profile_work(bootstrap: str, topic: str, n: int, out: Path) -> None:
    """Each work mode once under py-spy --gil --threads; summaries printed and saved."""
    from profile_util import print_summary, py_spy_record, summarise

    out.mkdir(parents=True, exist_ok=True)
    for mode in WORK_MODES:
        raw = out / (mode.replace("/", "_") + ".txt")
        py_spy_record(
            [
                sys.executable,
                __file__,
                "--work-trial",
                mode,
                "--bootstrap",
                bootstrap,
                "--topic",
                topic,
                "--messages",
                str(n),
            ],
            raw,
            gil=True,
        )
        s = summarise(raw)
        (out / (mode.replace("/", "_") + ".summary.json")).write_text(json.dumps(s, indent=2))
        print_summary(mode, s)


def work_trials(bootstrap: str, topic: str, n: int, trials: int, modes=WORK_MODES) -> dict:
    """``trials`` rounds of every work mode, each a fresh process, the order
    reversed every other round; ratios per round against that round's bare loop."""
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    for trial in range(trials):
        order = list(modes) if trial % 2 == 0 else list(reversed(modes))
        for mode in order:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--work-trial",
                    mode,
                    "--bootstrap",
                    bootstrap,
                    "--topic",
                    topic,
                    "--messages",
                    str(n),
                ],
                capture_output=True,
                text=True,
                timeout=RUN_TIMEOUT_S + 60,
            )
            if out.returncode != 0:
                raise RuntimeError(f"{mode} trial failed: {out.stderr[-2000:]}")
            r = json.loads(out.stdout.strip().splitlines()[-1])
            runs[mode].append(r)
            print(
                f"work trial {trial} {mode:22s} {r['records_per_s']:10.0f} rec/s, "
                f"cpu {r['cpu_s'] / r['records'] * 1e6:.2f} us/rec, gc collections {r['gc_collections']}",
                flush=True,
            )
    bare = runs["work/bare"]
    summary: dict = {
        "trials": trials,
        "messages": n,
        "median_records_per_s": {},
        "rate_ratio": {},
        "cpu_ratio": {},
        "rate_ratios": {},
        "cpu_ratios": {},
        "thread_cpu_share": {},
    }
    for mode, rs in runs.items():
        summary["median_records_per_s"][mode] = round(statistics.median(r["records_per_s"] for r in rs))
        if mode == "work/bare":
            continue
        rate = [r["records_per_s"] / b["records_per_s"] for r, b in zip(rs, bare)]
        cpu = [(b["cpu_s"] / b["records"]) / (r["cpu_s"] / r["records"]) for r, b in zip(rs, bare)]
        summary["rate_ratios"][mode] = [round(x, 3) for x in rate]
        summary["cpu_ratios"][mode] = [round(x, 3) for x in cpu]
        summary["rate_ratio"][mode] = round(statistics.median(rate), 3)
        summary["cpu_ratio"][mode] = round(statistics.median(cpu), 3)
        shares: dict[str, list[float]] = {}
        for r in rs:
            total = sum((r.get("thread_cpu_s") or {}).values()) or 1.0
            for name, v in (r.get("thread_cpu_s") or {}).items():
                shares.setdefault(name, []).append(v / total)
        summary["thread_cpu_share"][mode] = {k: round(statistics.median(v), 3) for k, v in shares.items()}
    return summary


class _Timed:
    """A submit_batch that remembers when each batch arrived."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.count = 0

    def __call__(self, records) -> None:
        self.times.append(time.monotonic())
        self.count += len(records)

    def first_after(self, t: float) -> float | None:
        for x in self.times:
            if x >= t:
                return x
        return None


class _BenchRegion:
    """What the region runtime does on a reset request: block every member's
    permit, reset each (concurrently) to the merged offsets given as a
    one-member checkpoint, unblock."""

    def __init__(self, merged) -> None:
        self.members = []
        self.merged = merged
        self.requests = 0
        self.done_at: dict[str, float] = {}
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._running = False

    def request_reset(self, *, force: bool, reason: str) -> None:
        with self._lock:
            self.requests += 1
            if self._running:
                return
            self._running = True
        threading.Thread(target=self._cycle, daemon=True).start()

    def _cycle(self) -> None:
        from cr_consumer.operator.checkpoint import OperatorCheckpoint

        ops = list(self.members)
        try:
            for op in ops:
                op.permit.block(30)
            threads = []
            for op in ops:
                data = OperatorCheckpoint(op.name, (op.name,), self.merged).encode()
                t = threading.Thread(target=self._reset_one, args=(op, data))
                t.start()
                threads.append(t)
            for t in threads:
                t.join(60)
        finally:
            for op in ops:
                op.permit.unblock()
            with self._lock:
                self._running = False

    def _reset_one(self, op, data) -> None:
        try:
            op.reset(1, data, 0)
            self.done_at[op.name] = time.monotonic()
        except BaseException as exc:  # noqa: BLE001 - reported by the bench
            self.errors.append(exc)


def reset_latency_trial(bootstrap, coordinator, topic, partitions, n) -> dict:
    """Two members consume; a third joins. Latency = from the first revocation
    to every member's first tuple after its reset, minus the broker's
    rebalance time (first revocation -> last assignment)."""
    from cr_consumer.kafka.client import TopicPartition

    group = f"bench-reset-{uuid.uuid4().hex[:8]}"
    merged = {TopicPartition(topic, p): 0 for p in range(partitions)}
    region = _BenchRegion(merged)
    revoked: list[float] = []
    assigned: dict[str, float] = {}
    sinks: dict[str, _Timed] = {}

    def member(name):
        sink = _Timed()
        sinks[name] = sink
        cfg = OperatorConfig(
            bootstrap_servers=bootstrap,
            group_id=group,
            operator_name=name,
            topics=[topic],
            coordinator=coordinator,
            start_position=StartKind.EARLIEST,
            drain_timeout_s=10,
            reset_timeout_s=20,
            client=CLIENT,
            consumer_properties={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000},
        )
        op = ConsumerOperator(cfg, submit_batch=sink, permit=RegionPermit(), region=region)
        orig_revoked, orig_assigned = op.rebalancer.on_revoked, op.rebalancer.on_assigned

        def on_revoked(tps, *, lost):
            if tps:
                revoked.append(time.monotonic())
            orig_revoked(tps, lost=lost)

        def on_assigned(tps):
            assigned[name] = time.monotonic()
            orig_assigned(tps)

        op.rebalancer.on_revoked = on_revoked
        op.rebalancer.on_assigned = on_assigned
        region.members.append(op)
        return op.start()

    ops = [member("m0"), member("m1")]
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while sum(s.count for s in sinks.values()) < n or not all(
            op.metrics()["nAssignedPartitions"] == partitions // 2 for op in ops
        ):
            if time.monotonic() > deadline:
                raise TimeoutError("two members did not consume the topic")
            time.sleep(0.05)
        ops.append(member("m2"))
        while True:
            if time.monotonic() > deadline or region.errors:
                raise TimeoutError(f"reset did not complete: {region.errors}")
            if len(region.done_at) == 3:
                snap_assigned = dict(assigned)
                firsts = {
                    name: sinks[name].first_after(max(region.done_at[name], snap_assigned.get(name, 0)))
                    for name in sinks
                }
                if all(firsts.values()):
                    break
            time.sleep(0.01)
    finally:
        for op in ops:
            op.close()
    t_rev = min(revoked)
    t_asg = max(snap_assigned.values())
    total = max(firsts.values()) - t_rev
    broker = t_asg - t_rev
    detail = {
        name: {
            "assigned_ms": round((snap_assigned[name] - t_rev) * 1000),
            "reset_done_ms": round((region.done_at[name] - t_rev) * 1000),
            "first_tuple_ms": round((firsts[name] - t_rev) * 1000),
        }
        for name in sorted(sinks)
    }
    return {
        "total_ms": total * 1000,
        "broker_rebalance_ms": broker * 1000,
        "reset_ms": (total - broker) * 1000,
        "reset_requests": region.requests,
        "members": detail,
    }


def idle_cpu(bootstrap, topic, seconds: float) -> float:
    """Percent of a core this process spends on one assigned operator with nothing to consume."""
    op = ConsumerOperator(_config(bootstrap, topic), submit_batch=lambda _records: None, permit=RegionPermit())
    op.start()
    try:
        deadline = time.monotonic() + 60
        while op.metrics()["nAssignedPartitions"] == 0:
            if time.monotonic() > deadline:
                raise TimeoutError("the idle operator was not assigned partitions within 60 s")
            time.sleep(0.05)  # polling a metric another thread sets, bounded by the deadline
        cpu0, t0 = time.process_time(), time.monotonic()
        time.sleep(seconds)  # the measurement window itself
        return (time.process_time() - cpu0) / (time.monotonic() - t0) * 100
    finally:
        op.close()


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else None


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--modes", default="bare,operator,operator+cycles,operator/submit")
    ap.add_argument(
        "--drain-samples-s",
        type=float,
        default=0.1,
        help="> 0: run the drain-latency measurement, a drain every this many seconds while consuming",
    )
    ap.add_argument(
        "--idle-s",
        type=float,
        default=5.0,
        help="> 0: CPU of one operator on an idle topic, sampled over this many seconds (0: skip)",
    )
    ap.add_argument("--reset-trials", type=int, default=3, help="member-join reset-latency trials (0: skip)")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument(
        "--work-trials",
        type=int,
        default=0,
        help="> 0: the per-record-work modes, this many alternated trials (each a fresh process)",
    )
    ap.add_argument(
        "--profile-dir",
        default=None,
        help="run each work mode once more under py-spy --gil, stacks and a summary in this directory",
    )
    ap.add_argument("--work-trial", default=None, help=argparse.SUPPRESS)  # one trial, in a child process
    ap.add_argument("--topic", default=None, help=argparse.SUPPRESS)
    ap.add_argument(
        "--client",
        choices=("kafka-python", "librdkafka"),
        default="kafka-python",
        help="the operators' Kafka client (the bare loop is always kafka-python)",
    )
    ap.add_argument(
        "--kafka",
        action="append",
        default=[],
        metavar="PROP=VALUE",
        help="an extra consumer property of the operators (repeatable)",
    )
    ap.add_argument(
        "--work-modes",
        default=",".join(WORK_MODES[:3]),
        help=f"comma-separated per-record-work modes (of {', '.join(WORK_MODES)})",
    )
    ap.add_argument(
        "--no-gc-freeze",
        action="store_true",
        help="do not gc.freeze() the start-up heap before the trials (the member runtime freezes it)",
    )
    return ap.parse_args()


def _work(args: argparse.Namespace, bootstrap: str) -> dict | None:
    """The per-record-work trials and profiles (--work-trials, --profile-dir), on a topic of their own."""
    from cr_consumer.testing.kafka_util import create_topic, unique_name

    work = None
    if args.work_trials > 0 or args.profile_dir:
        work_topic = create_topic(bootstrap, unique_name("bench-work"), args.partitions)
        produce_fixed(bootstrap, work_topic, args.messages)
    if args.work_trials > 0:
        work = work_trials(
            bootstrap, work_topic, args.messages, args.work_trials, modes=tuple(args.work_modes.split(","))
        )
        print("per-record work: " + json.dumps({k: work[k] for k in ("rate_ratio", "cpu_ratio")}), flush=True)
    if args.profile_dir:
        profile_work(bootstrap, work_topic, args.messages, Path(args.profile_dir))
    return work


def _throughput(bootstrap: str, topic: str, n: int, modes: list[str], trials: int) -> dict[str, list[dict]]:
    """Each mode once per trial, the modes alternated."""
    results: dict[str, list[dict]] = {m: [] for m in modes}
    for trial in range(trials):
        for mode in modes:
            if mode == "bare":
                r = bare_poll_loop(bootstrap, topic, n)
            elif mode == "operator":
                r = run_operator(bootstrap, topic, n)
            elif mode == "operator+cycles":
                r = run_operator(bootstrap, topic, n, cycle_every_s=1.0)
            elif mode == "operator/submit":
                r = run_operator(bootstrap, topic, n, per_record=True)
            else:
                raise SystemExit(f"unknown mode {mode!r}")
            results[mode].append(r)
            print(
                f"trial {trial} {mode:16s} {r['records_per_s']:10.0f} rec/s ({r['seconds']:.2f}s, "
                f"cpu {r['cpu_s'] / r['records'] * 1e6:.2f} us/rec)",
                flush=True,
            )
    return results


def _drain_latency(bootstrap: str, topic: str, n: int, every_s: float) -> dict:
    """Drain latency: a drain + checkpoint every ``every_s`` while consuming."""
    r = run_operator(bootstrap, topic, n, cycle_every_s=every_s)
    drain = {
        "samples": len(r["drain_ms"]),
        "p50_ms": pct(r["drain_ms"], 0.5),
        "p90_ms": pct(r["drain_ms"], 0.9),
        "p99_ms": pct(r["drain_ms"], 0.99),
        "max_ms": max(r["drain_ms"]) if r["drain_ms"] else None,
    }
    print(
        "drain latency: " + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in drain.items()),
        flush=True,
    )
    return drain


def _reset_latencies(bootstrap: str, partitions: int, trials: int) -> list[dict]:
    """Member-join reset latency, ``trials`` times, against a coordinator of its own."""
    import tempfile

    from coordinator.launcher import CoordinatorProcess
    from cr_consumer.testing.kafka_util import create_topic, unique_name

    resets = []
    small = create_topic(bootstrap, unique_name("bench-reset"), partitions)
    produce_fixed(bootstrap, small, 20_000)
    with tempfile.TemporaryDirectory() as state, CoordinatorProcess(Path(state)) as coord:
        for trial in range(trials):
            r = reset_latency_trial(bootstrap, coord.endpoint, small, partitions, 20_000)
            resets.append(r)
            print(
                f"reset trial {trial}: {json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in r.items()})}",
                flush=True,
            )
    return resets


def _summary(
    args: argparse.Namespace,
    results: dict[str, list[dict]],
    *,
    drain: dict | None,
    idle: float | None,
    work: dict | None,
    resets: list[dict],
) -> dict:
    base = statistics.median(r["records_per_s"] for r in results["bare"]) if results.get("bare") else None
    pair = {}  # per trial: mode / bare of the same trial (robust to load drifting between trials)
    cpu = {}  # CPU seconds of this process per record, bare / mode (robust to other processes' load)
    if results.get("bare"):
        for mode, runs in results.items():
            if mode == "bare" or not runs:
                continue
            pair[mode] = round(
                statistics.median(r["records_per_s"] / b["records_per_s"] for r, b in zip(runs, results["bare"])), 3
            )
            cpu[mode] = round(
                statistics.median(
                    (b["cpu_s"] / b["records"]) / (r["cpu_s"] / r["records"]) for r, b in zip(runs, results["bare"])
                ),
                3,
            )
    summary = {
        "client": args.client,
        "messages": args.messages,
        "partitions": args.partitions,
        "trials": args.trials,
        "median_records_per_s": {},
        "ratio_to_bare": {},
        "median_pair_ratio": pair,
        "cpu_efficiency_vs_bare": cpu,
        "drain_latency": drain,
        "idle_cpu_percent": idle,
        "per_record_work": work,
        "reset_after_join_ms": {
            "trials": len(resets),
            "median_reset_ms": statistics.median(r["reset_ms"] for r in resets) if resets else None,
            "max_reset_ms": max(r["reset_ms"] for r in resets) if resets else None,
            "median_broker_rebalance_ms": statistics.median(r["broker_rebalance_ms"] for r in resets)
            if resets
            else None,
        },
    }
    for mode, runs in results.items():
        if not runs:
            continue
        med = statistics.median(r["records_per_s"] for r in runs)
        summary["median_records_per_s"][mode] = round(med)
        if base:
            summary["ratio_to_bare"][mode] = round(med / base, 3)
    return summary


def main() -> None:
    from cr_consumer.testing.broker import bootstrap_or_embedded
    from cr_consumer.testing.kafka_util import create_topic, unique_name

    args = _args()
    global CLIENT
    CLIENT = args.client
    from cr_consumer.kafka.properties import parse_items, typed

    EXTRA_KAFKA.update({k: typed(v) for k, v in parse_items(args.kafka).items()})
    if args.work_trial:
        print(json.dumps(work_trial(args.work_trial, args.bootstrap, args.topic, args.messages)))
        return
    modes = args.modes.split(",")
    with bootstrap_or_embedded(args.bootstrap) as bootstrap:
        topic = create_topic(bootstrap, unique_name("bench-op"), args.partitions)
        t0 = time.monotonic()
        if args.trials > 0:
            produce_fixed(bootstrap, topic, args.messages)
        print(
            f"produced {args.messages} x 100 B to {args.partitions} partitions in {time.monotonic() - t0:.1f}s",
            flush=True,
        )
        work = _work(args, bootstrap)
        if not args.no_gc_freeze:
            # As the member runtime does once running (cr_consumer/runtime/member/process.py):
            # the ~40k start-up objects (modules, clients) out of the cyclic GC's
            # full collections, which otherwise re-scan them for ~20 ms about once
            # a second, stalling whichever drain they hit (bare loop and operator alike).
            gc.collect()
            gc.freeze()
        n = args.messages
        results = _throughput(bootstrap, topic, n, modes, args.trials)
        drain = None
        if args.drain_samples_s > 0 and args.trials > 0:
            drain = _drain_latency(bootstrap, topic, n, args.drain_samples_s)
        idle = None
        if args.idle_s > 0:
            idle = idle_cpu(bootstrap, create_topic(bootstrap, unique_name("bench-idle"), args.partitions), args.idle_s)
            print(f"idle operator: {idle:.1f} % of a core", flush=True)
        resets = []
        if args.reset_trials > 0:
            resets = _reset_latencies(bootstrap, args.partitions, args.reset_trials)
    summary = _summary(args, results, drain=drain, idle=idle, work=work, resets=resets)
    print(json.dumps(summary, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "runs": results}, indent=2))


if __name__ == "__main__":
    main()
