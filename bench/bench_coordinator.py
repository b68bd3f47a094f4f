"""Coordinator server figures: durable control-variable writes/s and checkpoint-merge latency.

Everything goes through a real ``cr-coordinator`` process (launcher) over real
ZeroMQ sockets, on a state dir on the same disk as the repository (real fsync).
Baselines are measured in the same run:

* writes: the raw fsync rate of this disk (64-byte append + fsync, one
  thread), and one client writing one entry per request sequentially. The
  concurrent single-entry figure divided by the raw fsync rate shows the group
  commit (several writes per fsync); entries per fsync is read from the
  store's fsync counter.
* merges: the ping round trip of the same sockets.

Merge latency: for each round, N-1 members (raw DEALER sockets, one thread)
send their contribution, then a ping on the same socket (FIFO per connection,
so when the pong is back the contribution is pending in the server); then the
last contribution is sent at t0 and the latency is the time until ALL N
replies have arrived. "wall/round" is measured separately with N threads
using CoordinatorClient.merge_checkpoint (client library, threads, GIL and
all): from the round's start barrier until every thread has its merged map.

    .venv/bin/python bench/bench_coordinator.py            # full run (~1-2 min)
    .venv/bin/python bench/bench_coordinator.py --quick    # shorter
    .venv/bin/python bench/bench_coordinator.py --merge-only 8 --rounds 1000 --trials 5
    .venv/bin/python bench/bench_coordinator.py --merge-only 8 --rounds 1000 --trials 6 --before-tree DIR
    .venv/bin/python bench/bench_coordinator.py --write-path --trials 6 --before-tree DIR

``--before-tree DIR`` (a copy of another tree, e.g. ``git archive main | tar -x
-C DIR``) starts a second coordinator running DIR's code; every trial measures
both (ping baseline, then merge), the order reversed every other trial.
``--with-gc-none`` adds a third coordinator of this tree with ``--gc-policy
none`` (the label cache without the collector policy). ``--coordinator-args``
passes flags to this tree's coordinator. Each trial also reports every
coordinator's CPU per request (/proc), less sensitive to the machine's load
than the latencies.

``--write-path`` is the durable write path as one client sees it, on a fresh
coordinator per trial and tree (``--before-tree`` alternated as above):
``--entries`` (1,000,000) control variables of one group written in
``--batch``-entry (5,000) ``put_initial_offsets`` requests by ``--write-threads``
client threads (1: sequential), then ``--merges`` (40) merges of 8 contributors
from 8 client threads (the wall/round figure above) and as many ping rounds
of the same threads (its baseline). ``--extra-tree LABEL=DIR`` adds a third
tree to the alternation. ``--kafka-log`` adds this tree with its durable log on
Kafka (``--state kafka``, a fresh log topic per trial, the default replication
settings) to the alternation, on ``$KAFKA_BOOTSTRAP_SERVERS`` or an embedded
broker: the file log and the Kafka log measured in the same run. Reported per
trial: entries/s, the coordinator's CPU per 1,000 entries, merge p50/p99 and
the ping p99.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import zmq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from coordinator.client import CoordinatorClient
from coordinator.launcher import CoordinatorProcess
from cr_consumer.testing.broker import bootstrap_or_embedded


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))]


def raw_fsync_rate(directory: Path, seconds: float) -> float:
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        n, end = 0, time.perf_counter() + seconds
        t0 = time.perf_counter()
        while time.perf_counter() < end:
            os.write(fd, b"x" * 64)
            os.fsync(fd)
            n += 1
        return n / (time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink()


def _writer_proc(endpoint: str, group: str, worker: int, threads: int, batch: int, seconds: float, q) -> None:
    client = CoordinatorClient(endpoint, timeout=30)
    counts = [0] * threads
    elapsed = [0.0] * threads
    start = threading.Barrier(threads)

    def run(t: int) -> None:
        start.wait()
        t0 = time.perf_counter()
        end = t0 + seconds
        i, total, topic = 0, 0, f"w{worker}-{t}"
        while time.perf_counter() < end:
            client.put_initial_offsets(group, {(topic, i + k): i + k for k in range(batch)})
            i += batch
            total += batch
            if i + batch > 1_000_000:  # the store caps partitions at ~1M per topic
                topic, i = topic + "x", 0
        counts[t] = total
        elapsed[t] = time.perf_counter() - t0

    ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    client.close()
    q.put((sum(counts), max(elapsed)))


def write_rate(endpoint: str, procs: int, threads: int, batch: int, seconds: float) -> tuple[float, float]:
    """(entries/s, entries per fsync) for procs x threads clients writing batches of `batch` entries."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    group = f"bench-{procs}x{threads}x{batch}-{time.monotonic_ns()}"
    with CoordinatorClient(endpoint, timeout=30) as c:
        fs0 = c.status().store.fsyncs
    ps = [ctx.Process(target=_writer_proc, args=(endpoint, group, w, threads, batch, seconds, q)) for w in range(procs)]
    for p in ps:
        p.start()
    results = [q.get(timeout=seconds + 120) for _ in ps]
    for p in ps:
        p.join(30)
    total = sum(r[0] for r in results)
    window = max(r[1] for r in results)  # the writers' own window (process start-up excluded)
    with CoordinatorClient(endpoint, timeout=30) as c:
        fsyncs = c.status().store.fsyncs - fs0
    return total / window, total / max(fsyncs, 1)


def sequential_single(endpoint: str, seconds: float) -> float:
    with CoordinatorClient(endpoint, timeout=30) as c:
        end, n = time.perf_counter() + seconds, 0
        t0 = time.perf_counter()
        while time.perf_counter() < end:
            c.put_initial_offsets("bench-seq", {("s", n): n})
            n += 1
        return n / (time.perf_counter() - t0)


# ------------------------------------------------------------------ merges


def _env(rid: str, msg_type: str, body: dict) -> bytes:
    return json.dumps({"v": 1, "id": rid, "type": msg_type, "body": body}).encode()


def _await_merge_replies(poller: zmq.Poller, index: dict[zmq.Socket, int], seq: int, n: int) -> None:
    """Until every one of the ``n`` contributors got the merged map of checkpoint ``seq``."""
    waiting = set(range(n))
    while waiting:
        for s, _ in poller.poll(30_000):
            reply = json.loads(s.recv())
            assert reply["type"] == "merge_checkpoint_reply", reply
            assert reply["id"] == f"m{seq}", reply
            assert len(reply["body"]["offsets"]) == n
            waiting.discard(index[s])


def merge_latency(endpoint: str, n: int, rounds: int) -> dict:
    group = f"bench-merge-{n}-{time.monotonic_ns()}"
    ops = [f"m{i:03d}" for i in range(n)]
    with CoordinatorClient(endpoint, timeout=30) as c:
        for op in ops:
            c.register(group, 0, op)
    ctx = zmq.Context.instance()
    socks = []
    for _ in ops:
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(endpoint)
        socks.append(s)
    poller = zmq.Poller()
    for s in socks:
        poller.register(s, zmq.POLLIN)

    def recv(sock: zmq.Socket) -> dict:
        assert sock.poll(30_000), "no reply"
        return json.loads(sock.recv())

    lat, rtt = [], []
    index = {s: i for i, s in enumerate(socks)}
    try:
        for s in socks:  # connect + warm up
            s.send(_env("w", "ping", {}))
            recv(s)
        for r in range(rounds):
            seq = r + 1
            for i, (s, op) in enumerate(zip(socks[:-1], ops[:-1], strict=True)):
                body = {
                    "group": group,
                    "seq": seq,
                    "attempt": 0,
                    "n_contributors": n,
                    "operator": op,
                    "offsets": [["t", i, seq * 10]],
                    "timeout_ms": 30_000,
                }
                s.send(_env(f"m{seq}", "merge_checkpoint", body))
                s.send(_env(f"p{seq}", "ping", {}))
            for s in socks[:-1]:
                reply = recv(s)
                assert reply["id"] == f"p{seq}", reply
            t = time.perf_counter()
            socks[-1].send(_env(f"p{seq}", "ping", {}))
            recv(socks[-1])
            rtt.append(time.perf_counter() - t)
            body = {
                "group": group,
                "seq": seq,
                "attempt": 0,
                "n_contributors": n,
                "operator": ops[-1],
                "offsets": [["t", n - 1, seq * 10]],
                "timeout_ms": 30_000,
            }
            t0 = time.perf_counter()
            socks[-1].send(_env(f"m{seq}", "merge_checkpoint", body))
            _await_merge_replies(poller, index, seq, n)
            lat.append(time.perf_counter() - t0)
            if seq % 100 == 0:
                socks[0].send(_env(f"r{seq}", "retire_checkpoint", {"group": group, "seq": seq}))
                recv(socks[0])
    finally:
        for s in socks:
            s.close(0)
    return {"p50": pct(lat, 50), "p99": pct(lat, 99), "rtt_p50": pct(rtt, 50), "rtt_p99": pct(rtt, 99)}


def process_cpu_s(pid: int | None) -> float:
    """CPU time of a live process's threads (Linux /proc), in seconds; 0.0 without a pid.
    From each live thread's schedstat (nanoseconds on CPU) where the kernel has it,
    else utime + stime (clock ticks: 10 ms, coarse for a few hundred requests). A
    thread that ends between two readings drops out of the schedstat sum: the
    coordinator's threads (loop, ZeroMQ, HTTP) live as long as the process, and its
    load thread ends before the first request is answered."""
    if pid is None:
        return 0.0
    try:
        total = 0
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except FileNotFoundError:  # a thread that ended meanwhile
                continue
        return total / 1e9
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def merge_wall(endpoint: str, n: int, rounds: int, *, ping: bool = False, pid: int | None = None) -> dict:
    """Per round: ``n`` threads sharing one CoordinatorClient (a socket per
    thread) each call merge_checkpoint after a start barrier; the wall time
    is from the barrier until every thread has its merged map. With ``ping``
    each thread sends a ping instead: the same threads, sockets and client
    code without the merge (the baseline of the figure)."""
    group = f"bench-wall-{n}-{time.monotonic_ns()}"
    ops = [f"m{i:03d}" for i in range(n)]
    client = CoordinatorClient(endpoint, timeout=30)
    for op in ops:
        client.register(group, 0, op)
    start = threading.Barrier(n + 1)
    done = threading.Barrier(n + 1)
    walls = []

    def member(i: int) -> None:
        client.ping()
        for r in range(rounds):
            start.wait(60)
            if ping:
                client.ping()
            else:
                merged = client.merge_checkpoint(group, r + 1, 0, n, ops[i], {("t", i): r}, 30.0)
                assert len(merged) == n
            done.wait(60)
            if i == 0 and not ping and (r + 1) % 100 == 0:
                client.retire_checkpoint(group, r + 1)

    ts = [threading.Thread(target=member, args=(i,)) for i in range(n)]
    cpu0 = process_cpu_s(pid)
    for t in ts:
        t.start()
    for _ in range(rounds):
        start.wait(60)
        t0 = time.perf_counter()
        done.wait(60)
        walls.append(time.perf_counter() - t0)
    for t in ts:
        t.join(60)
    cpu = process_cpu_s(pid) - cpu0
    client.close()
    return {
        "p50": pct(walls, 50),
        "p90": pct(walls, 90),
        "p99": pct(walls, 99),
        "max": max(walls),
        "rounds": rounds,
        "server_cpu_us_per_request": 1e6 * cpu / (rounds * n) if pid else None,
    }


def merge_only(endpoints: dict[str, tuple[str, int | None]], sizes: list[int], rounds: int, trials: int) -> dict:
    """The merge figures alone, alternated with their ping baseline, ``trials``
    times, against each coordinator of ``endpoints`` (label -> endpoint, pid)
    in turn; the order of the coordinators is reversed every other trial. The
    coordinator's CPU per request (/proc, every request of the trial
    including the retires) is less sensitive to the machine's load than the
    latencies."""
    out: dict = {}
    for n in sizes:
        runs: dict[str, list[dict]] = {label: [] for label in endpoints}
        for trial in range(trials):
            order = list(endpoints.items())
            for label, (endpoint, pid) in order if trial % 2 == 0 else reversed(order):
                base = merge_wall(endpoint, n, rounds, ping=True, pid=pid)
                wall = merge_wall(endpoint, n, rounds, pid=pid)
                runs[label].append({"merge": wall, "ping": base})
                cpu = (
                    f"; coordinator CPU/request merge {wall['server_cpu_us_per_request']:.1f} us, ping "
                    f"{base['server_cpu_us_per_request']:.1f} us"
                    if pid
                    else ""
                )
                print(
                    f"{label} merge N={n} trial {trial}: {n} client threads wall/round p50 {wall['p50'] * 1e3:.2f} "
                    f"ms p90 {wall['p90'] * 1e3:.2f} p99 {wall['p99'] * 1e3:.2f} max {wall['max'] * 1e3:.2f}; "
                    f"same threads pinging: p50 {base['p50'] * 1e3:.2f} ms p99 {base['p99'] * 1e3:.2f} ms{cpu}",
                    flush=True,
                )
        for label, label_runs in runs.items():
            key = f"merge_wall_{n}" if len(endpoints) == 1 else f"{label}_merge_wall_{n}"
            p99s = sorted(r["merge"]["p99"] for r in label_runs)
            out[key] = {
                "runs": label_runs,
                "median_p99_ms": round(p99s[len(p99s) // 2] * 1e3, 3),
                "median_ping_p99_ms": round(
                    sorted(r["ping"]["p99"] for r in label_runs)[len(label_runs) // 2] * 1e3, 3
                ),
                "median_p50_ms": round(sorted(r["merge"]["p50"] for r in label_runs)[len(label_runs) // 2] * 1e3, 3),
                "max_ms": round(max(r["merge"]["max"] for r in label_runs) * 1e3, 3),
            }
            cpus = sorted(r["merge"]["server_cpu_us_per_request"] or 0.0 for r in label_runs)
            ping_cpus = sorted(r["ping"]["server_cpu_us_per_request"] or 0.0 for r in label_runs)
            out[key]["median_server_cpu_us_per_merge"] = round(cpus[len(cpus) // 2], 2)
            out[key]["median_server_cpu_us_per_ping"] = round(ping_cpus[len(ping_cpus) // 2], 2)
    return out


def write_path_run(endpoint: str, pid: int | None, entries: int, batch: int, threads: int, merges: int) -> dict:
    """One trial of ``--write-path`` against a fresh coordinator (see the module docstring)."""
    group = f"bench-writes-{time.monotonic_ns()}"
    client = CoordinatorClient(endpoint, timeout=60)
    client.ping()
    per_thread = entries // threads
    start = threading.Barrier(threads + 1)

    def run(t: int) -> None:
        client.ping()  # the thread's socket is connected before the clock starts
        start.wait(60)
        topic = f"w{t}"  # at most 2^20 partitions per topic: entries // threads must stay below
        for lo in range(0, per_thread, batch):
            client.put_initial_offsets(group, {(topic, p): p for p in range(lo, min(lo + batch, per_thread))})

    ts = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    start.wait(60)
    cpu0 = process_cpu_s(pid)
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    elapsed = time.perf_counter() - t0
    cpu = process_cpu_s(pid) - cpu0
    client.close()
    ping = merge_wall(endpoint, 8, merges, ping=True, pid=pid)
    merge = merge_wall(endpoint, 8, merges, pid=pid)
    written = per_thread * threads
    return {
        "entries_per_s": written / elapsed,
        "seconds": elapsed,
        "server_cpu_ms_per_1000": 1e6 * cpu / written if pid else None,
        "merge_p50_ms": merge["p50"] * 1e3,
        "merge_p99_ms": merge["p99"] * 1e3,
        "merge_max_ms": merge["max"] * 1e3,
        "ping_p99_ms": ping["p99"] * 1e3,
        "server_cpu_us_per_merge": merge["server_cpu_us_per_request"],
    }


#: The label of ``--kafka-log``'s coordinator (this tree, its log on Kafka).
KAFKA_LABEL = "kafka-log"


def write_path(
    trees: dict[str, str | None], workdir: Path, args: argparse.Namespace, kafka_bootstrap: str | None = None
) -> dict:
    """``--write-path``: every trial starts a fresh coordinator per tree (label ->
    tree directory, None: this tree), in an order reversed every other trial,
    runs `write_path_run` against it and stops it. The label KAFKA_LABEL runs this
    tree with its log on a fresh topic of `kafka_bootstrap`."""
    runs: dict[str, list[dict]] = {label: [] for label in trees}
    for trial in range(args.trials):
        order = list(trees.items())
        for label, tree in order if trial % 2 == 0 else reversed(order):
            state = workdir / f"write-{label}-{trial}"
            python = tree_python(Path(tree), workdir) if tree is not None else sys.executable
            extra = args.coordinator_args.split() if tree is None else []
            if label == KAFKA_LABEL:
                topic = f"bench-coordinator-log-{trial}-{time.monotonic_ns()}"
                extra += ["--state", "kafka", "--kafka-bootstrap", str(kafka_bootstrap), "--log-topic", topic]
            proc = CoordinatorProcess(
                state / "state", log_path=state / "coordinator.log", python=python, extra_args=extra
            )
            proc.start()
            try:
                r = write_path_run(
                    str(proc.endpoint), proc.pid, args.entries, args.batch, args.write_threads, args.merges
                )
            finally:
                proc.terminate()
                shutil.rmtree(state, ignore_errors=True)
            runs[label].append(r)
            print(
                f"{label} trial {trial}: {r['entries_per_s']:9.0f} entries/s ({r['seconds']:.2f} s, coordinator "
                f"CPU {r['server_cpu_ms_per_1000']:.2f} ms/1000 entries); merge N=8 p50 {r['merge_p50_ms']:.2f} "
                f"ms p99 {r['merge_p99_ms']:.2f} ms (ping p99 {r['ping_p99_ms']:.2f} ms, coordinator CPU/merge "
                f"{r['server_cpu_us_per_merge']:.0f} us); load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    out: dict = {}
    for label, label_runs in runs.items():

        def median(key: str, label_runs: list[dict] = label_runs) -> float:
            values = sorted(r[key] for r in label_runs)
            return round(values[len(values) // 2], 3)

        out[label] = {
            key: median(key)
            for key in (
                "entries_per_s",
                "server_cpu_ms_per_1000",
                "merge_p50_ms",
                "merge_p99_ms",
                "ping_p99_ms",
                "server_cpu_us_per_merge",
            )
        }
        out[label]["runs"] = label_runs
    return out


def write_path_main(args: argparse.Namespace, workdir: Path) -> dict:
    """``--write-path`` with its trees: ``--before-tree``, ``--extra-tree``, this tree, ``--kafka-log``."""
    trees: dict[str, str | None] = {"before": args.before_tree} if args.before_tree else {}
    for spec in args.extra_tree:
        label, _, tree = spec.partition("=")
        trees[label] = tree
    trees["after" if args.before_tree else "this"] = None
    with contextlib.ExitStack() as stack:
        kafka_bootstrap = None
        if args.kafka_log:
            kafka_bootstrap, _pid = stack.enter_context(bootstrap_or_embedded(log_path=workdir / "broker.log"))
            trees[KAFKA_LABEL] = None
        return write_path(trees, workdir, args, kafka_bootstrap)


def tree_python(tree: Path, work: Path) -> str:
    """This interpreter with ``tree`` first on PYTHONPATH: a coordinator process
    running another source tree's code (``--before-tree``)."""
    shim = work / f"python-{tree.name}"
    # PYTHONSAFEPATH: ``python -m`` would otherwise put the working directory
    # first on sys.path, ahead of ``tree`` (a run from this checkout would import it).
    shim.write_text(
        f'#!/bin/sh\nPYTHONSAFEPATH=1 PYTHONPATH={tree}${{PYTHONPATH:+:$PYTHONPATH}} exec {sys.executable} "$@"\n'
    )
    shim.chmod(0o755)
    return str(shim)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter windows and fewer rounds")
    ap.add_argument(
        "--merge-only",
        default=None,
        metavar="N[,N]",
        help="only the client-thread merge figure for these contributor counts, with its ping baseline",
    )
    ap.add_argument("--rounds", type=int, default=1000, help="rounds per --merge-only trial")
    ap.add_argument("--trials", type=int, default=3, help="--merge-only trials (merge and ping alternated)")
    ap.add_argument("--pid-file", default=None, help="write the coordinator's pid here (to attach a profiler)")
    ap.add_argument(
        "--before-tree",
        default=None,
        metavar="DIR",
        help="with --merge-only: a second coordinator running this source tree's code (e.g. "
        "`git archive main`), measured alternately with this tree's: same-run before/after",
    )
    ap.add_argument(
        "--with-gc-none",
        action="store_true",
        help="with --merge-only: one more coordinator of this tree with --gc-policy none, alternated too",
    )
    ap.add_argument(
        "--write-path",
        action="store_true",
        help="the write path: --entries control variables in --batch-entry requests, then --merges "
        "merges of 8 (fresh coordinators per trial; with --before-tree, alternated)",
    )
    ap.add_argument("--entries", type=int, default=1_000_000, help="--write-path: control variables written")
    ap.add_argument("--batch", type=int, default=5_000, help="--write-path: entries per request")
    ap.add_argument("--write-threads", type=int, default=1, help="--write-path: client threads writing")
    ap.add_argument(
        "--extra-tree",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="--write-path: one more tree measured in the same trials (e.g. main=DIR)",
    )
    ap.add_argument("--merges", type=int, default=40, help="--write-path: merge rounds (8 contributors)")
    ap.add_argument(
        "--kafka-log",
        action="store_true",
        help="--write-path: also this tree with its log on Kafka ($KAFKA_BOOTSTRAP_SERVERS or an embedded broker)",
    )
    ap.add_argument(
        "--coordinator-args",
        default="",
        metavar="ARGS",
        help="extra arguments of this tree's coordinator (e.g. '--gc-policy none')",
    )
    args = ap.parse_args()
    secs = 1.5 if args.quick else 4.0
    rounds = {2: 200, 8: 200, 32: 100} if args.quick else {2: 1000, 8: 1000, 32: 400}
    # On the repository's disk (not a tmpfs /tmp), so fsync is real.
    workdir = Path(tempfile.mkdtemp(prefix=".bench-coordinator-", dir=ROOT / "bench"))
    print(f"state dir {workdir} (same disk as the repo); {os.cpu_count()} cores", flush=True)
    out: dict = {}
    if args.write_path:
        try:
            out = write_path_main(args, workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "runs"} for k, v in out.items()}, indent=2))
        return 0
    proc = CoordinatorProcess(
        workdir / "state", log_path=workdir / "coordinator.log", extra_args=args.coordinator_args.split()
    )
    proc.start()
    before = None
    no_gc = None
    try:
        ep = proc.endpoint
        if args.pid_file:
            Path(args.pid_file).write_text(str(proc.pid))
        if args.merge_only:
            endpoints = {"after" if args.before_tree else "this": (ep, proc.pid)}
            if args.before_tree:
                before = CoordinatorProcess(
                    workdir / "state-before",
                    log_path=workdir / "coordinator-before.log",
                    python=tree_python(Path(args.before_tree), workdir),
                )
                before.start()
                endpoints = {"before": (str(before.endpoint), before.pid), **endpoints}
            if args.with_gc_none:
                no_gc = CoordinatorProcess(
                    workdir / "state-gc-none",
                    log_path=workdir / "coordinator-gc-none.log",
                    extra_args=["--gc-policy", "none"],
                )
                no_gc.start()
                endpoints["gc-none"] = (str(no_gc.endpoint), no_gc.pid)
            out = merge_only(endpoints, [int(x) for x in args.merge_only.split(",")], args.rounds, args.trials)
            print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "runs"} for k, v in out.items()}, indent=2))
            return 0
        fs = raw_fsync_rate(workdir, secs)
        out["raw_fsync_per_s"] = fs
        print(f"baseline: raw 64-byte append+fsync            {fs:10.0f} /s", flush=True)
        seq = sequential_single(ep, secs)
        out["single_sequential_per_s"] = seq
        print(f"single entries, 1 client sequential          {seq:10.0f} entries/s  ({seq / fs:.2f} x raw fsync)")
        for procs, threads in ((4, 4), (4, 16)):
            rate, per_fsync = write_rate(ep, procs, threads, 1, secs)
            out[f"single_{procs}x{threads}_per_s"] = rate
            out[f"single_{procs}x{threads}_entries_per_fsync"] = per_fsync
            print(
                f"single entries, {procs * threads:3d} clients ({procs} procs)      {rate:10.0f} entries/s  "
                f"({rate / fs:.2f} x raw fsync, {per_fsync:.1f} entries/fsync, {rate / seq:.1f} x sequential)",
                flush=True,
            )
        for procs, threads, batch in ((1, 1, 10_000), (2, 1, 10_000), (1, 1, 50_000)):
            rate, per_fsync = write_rate(ep, procs, threads, batch, secs)
            out[f"batched_{procs}x{batch}_per_s"] = rate
            print(
                f"batched {batch:6d}/request, {procs} client(s)        {rate:10.0f} entries/s  "
                f"({rate / seq:.0f} x sequential single)",
                flush=True,
            )
        for n in (2, 8, 32):
            m = merge_latency(ep, n, rounds[n])
            w = merge_wall(ep, n, max(50, rounds[n] // 4))
            out[f"merge_{n}"] = {**m, "wall_p50": w["p50"], "wall_p99": w["p99"]}
            print(
                f"merge N={n:2d}: last contribution -> all replies p50 {m['p50'] * 1e3:6.2f} ms p99 "
                f"{m['p99'] * 1e3:6.2f} ms  (ping rtt p50 {m['rtt_p50'] * 1e3:.2f} ms p99 {m['rtt_p99'] * 1e3:.2f} ms; "
                f"p99/rtt_p99 {m['p99'] / m['rtt_p99']:.1f}); client threads wall/round p50 "
                f"{w['p50'] * 1e3:6.2f} ms p99 {w['p99'] * 1e3:6.2f} ms",
                flush=True,
            )
    finally:
        proc.terminate()
        for extra in (before, no_gc):
            if extra is not None:
                extra.terminate()
        shutil.rmtree(workdir, ignore_errors=True)  # scratch only: the figures are on stdout
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
