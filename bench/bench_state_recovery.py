"""kill -9 of a member of a region whose pipeline keeps keyed state that follows its partition
(``ctx.partitioned_aggregate``): how long until the region runs again and its tables are back.

Setup (once): an input topic of ``--partitions`` (4) partitions holding one order per customer,
``--keys-per-partition`` (100,000) distinct customers per partition on average (keys
``c<i>``, the producer's default partitioner on the key), and a second topic of the same shape
with ``--small-keys`` (100) customers per partition: the baseline.

Each trial, for each kind (``large``: the 100k-key topic, ``small``: the baseline; the order
alternates from trial to trial), a fresh region (its own coordinator, group and changelog) of
``--members`` (2) member processes runs the pipeline ``KafkaSource -> parse -> partitioned
aggregate (order count and total per customer, emit on) -> file sink``:

1. Load: until every input record is in the published output (the file sink publishes at a
   completed checkpoint, so the changelog's committed records hold every key), and the group is
   stable.
2. A trickle of new orders (``--rate`` per second, customers drawn from the topic's) starts and
   runs to the end of the trial: the region recovers under load, as in production. Its first
   changes make every large partition's changelog longer than its table (100k changes of 100k
   keys, then more), so each partition writes a base (its whole table) and, once committed, points at it (the members' ``pointers`` INFO
   line); the kill waits for every partition's pointer (``pointers_s`` from the trickle's
   start), then ``--before`` seconds: the restore reads the steady state, a base and the
   changes since, not a base still being written. The small kind stays under the base's
   10,000-change floor: its restore reads its partition from the start.
3. ``kill -9`` of ``member-1`` (the runner restarts it, on its warm standby); the kill's time is
   this process's ``time.time()`` just before the signal.
4. Until the region is stable again (not resetting, every member back, none rebalancing), a RESUME and a
   checkpoint followed the kill's last reset, every partition's table was restored after that
   reset, and nothing changed for ``--settle`` seconds.

Clocks, all wall clock (``time.time()``) on this host: the controller's events (``reset``,
``resume``, ``checkpoint``; the coordinator stamps them, ``region_status`` hands out the newest
50, polled every 0.1 s from before the kill), the members' JSON log lines (``ts``; the logs are
``<state_dir>/logs/member-N.log``), and the kill.

Figures per trial, seconds from the kill:

* ``resets``: the controller's resets after the kill (each drops every member's tables);
* ``detect_s``: the first reset; ``first_resume_s``: the RESUME after it;
* ``resume_s`` (a): the RESUME after the kill's *last* reset: the region is running again
  (the tables are not back yet: a partition's table is restored in the background once its
  member's source has seeked it, the partition held meanwhile);
* ``tables_back_s`` (b): the last of the partitions' restores after that reset ended (the
  member's INFO line ``operator 'totals': restored <changelog>[p] from N: K keys from C changes
  in R records in T s``); per partition in ``tables_back_by_partition``;
* ``restore_s``: the longest of the members' restore times after that reset (a member restores
  two partitions at a time, so its time is the span from its first restore's start, the line's
  time less its ``T``, to its last one's end);
  ``tables_back_minus_restore_s``: ``tables_back_s - restore_s``: the recovery apart from
  reading the changelog (the stated figure: "<= 2 s plus restore time" holds when this is <= 2);
* ``checkpoint_s`` (c): the first checkpoint completed after the last reset;
* ``assigned_s``: the restarted member's Kafka assignment of the partitions it restores (the
  member's ``assigned [...]`` line; the survivor keeps its partitions across the reset). The
  region RESUMEs before the restarted member's consumer has joined the group; on the embedded
  broker (tansu) the join phase lasts half the session timeout (``--session-timeout-ms``, 6 s
  as in ``tests/support/region.py``), which dominates this figure in both kinds;
* ``checkpoint_ms_after_max``: the longest checkpoint (the controller's drain-to-completion
  time) from the kill to the end of the trial, against ``checkpoint_ms_before_p50``, the median
  over the trickle before the kill: a restore holds its member's drain;
* ``from_pointer``: partitions restored from a pointer (a base), not from offset 0;
* ``restore_changes_s``: changes read per second of restore (all that trial's restores after
  the last reset: their changes over the sum of their ``T``); ``wasted_restores``: restores
  after the kill whose tables a later reset dropped.

Baseline, same run: the same pipeline and drill over 100 keys per partition (``small``): the
recovery with a restore that costs next to nothing, so ``large - small`` is what 100k keys per
partition add. The JSON summary has p50 / max of each figure per kind; per-trial lines are
printed as they finish, with ``/proc/loadavg`` at the kill.

Starts an embedded broker (tansu) unless ``--bootstrap`` or ``$KAFKA_BOOTSTRAP_SERVERS``. The
default run takes 3-4 min on 2 cores at load 2-8 (producing the 400k orders 15-45 s, a large
trial 30-60 s, a small one 15-25 s); ``--keep`` keeps each trial's logs and the controller's
events (``events.json``).

    .venv/bin/python bench/bench_state_recovery.py [--trials 3] [--keys-per-partition 100000]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cr_consumer.runtime.pipeline.sinks import PUBLISHED_SUFFIX
from cr_consumer.runtime.runner.region_runner import Region
from cr_consumer.runtime.runner.region_status import RegionFailed
from cr_consumer.state.changelog import MATERIALIZE_MIN_CHANGES
from cr_consumer.testing.broker import bootstrap_or_embedded
from cr_consumer.testing.kafka_util import create_topic, producer

PIPELINE = """
import json
from cr_consumer.runtime import KafkaSource, Pipeline, replace

def add(state, record):
    return {"orders": state["orders"] + 1, "cents": state["cents"] + record.value}

def build(ctx):
    topic = ctx.param("topic")
    return (Pipeline(KafkaSource(topics=[topic], options={"start_position": "earliest"}))
            .map(lambda r: replace(r, value=json.loads(r.value)["cents"]))
            .then(ctx.partitioned_aggregate(lambda r: r.key.decode(), add, lambda: {"orders": 0, "cents": 0},
                                            topic=topic, name="totals"))
            .sink(ctx.file_sink()))
"""

RESTORED = re.compile(
    r"operator '(?P<owner>[^']+)': restored (?P<changelog>\S+)\[(?P<p>\d+)\] from (?P<start>\d+): "
    r"(?P<keys>\d+) keys from (?P<changes>\d+) changes in (?P<records>\d+) records in (?P<s>[\d.]+) s"
)
ASSIGNED = re.compile(r"^(?P<member>member-\d+): assigned \[(?P<tps>.*)\]")
POLL_S = 0.1


def load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def produce_orders(bootstrap: str, topic: str, customers: int) -> None:
    p = producer(bootstrap)
    rng = random.Random(1)
    try:
        for i in range(customers):
            p.send(topic, key=f"c{i}".encode(), value=b'{"cents": %d}' % rng.randrange(1, 100_000))
        p.flush(120)
    finally:
        p.close(10)


class Trickle(threading.Thread):
    """New orders of existing customers, ``rate`` per second, until stopped."""

    def __init__(self, bootstrap: str, topic: str, customers: int, rate: float) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.customers, self.rate = bootstrap, topic, customers, rate
        self.stopping = threading.Event()
        self.sent = 0

    def run(self) -> None:
        p = producer(self.bootstrap, linger_ms=0)
        rng = random.Random(2)
        t0 = time.monotonic()
        try:
            while not self.stopping.is_set():
                due = int((time.monotonic() - t0) * self.rate) - self.sent
                for _ in range(max(0, due)):
                    key = f"c{rng.randrange(self.customers)}".encode()
                    p.send(self.topic, key=key, value=b'{"cents": %d}' % rng.randrange(1, 100_000))
                    self.sent += 1
                p.flush(10)
                self.stopping.wait(0.02)
        finally:
            p.close(10)


class Events(threading.Thread):
    """The controller's events, deduplicated, polled every POLL_S (its reply holds the newest 50)."""

    def __init__(self, region: Region) -> None:
        super().__init__(daemon=True)
        self.region = region
        self.stopping = threading.Event()
        self.seen: dict[tuple, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.status: Any = None
        self.error: Exception | None = None  # the last failed poll's

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                report = self.region.report(timeout=1.0)
            except Exception as exc:  # noqa: BLE001 - the coordinator busy: polled again
                self.error = exc
                self.stopping.wait(POLL_S)
                continue
            with self.lock:
                self.status = report.region
                for e in report.events:
                    key = (e.t, e.kind, json.dumps(e.fields, sort_keys=True, default=str))
                    self.seen.setdefault(key, {"t": e.t, "kind": e.kind, **e.fields})
            self.stopping.wait(POLL_S)

    def events(self) -> list[dict[str, Any]]:
        with self.lock:
            return sorted(self.seen.values(), key=lambda e: e["t"])


def member_logs(log_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The members' JSON logs' restore lines (end ``t``, start ``t0``, member, partition, keys,
    changes, records, ``s``) and Kafka assignments (``t``, member, partitions)."""
    out: list[dict[str, Any]] = []
    assigned: list[dict[str, Any]] = []
    for path in sorted(log_dir.glob("member-*.log")):
        with open(path, errors="replace") as f:
            for line in f:
                if not line.startswith("{") or ("restored" not in line and "assigned" not in line):
                    continue
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue
                a = ASSIGNED.match(doc.get("msg", ""))
                if a:
                    parts = {int(x) for x in re.findall(r"partition=(\d+)", a["tps"])}
                    assigned.append({"t": doc["ts"], "member": path.stem, "partitions": parts})
                    continue
                m = RESTORED.search(doc.get("msg", ""))
                if m:
                    s = float(m["s"])
                    out.append(
                        {
                            "t": doc["ts"],
                            "t0": doc["ts"] - s,
                            "member": path.stem,
                            "p": int(m["p"]),
                            "keys": int(m["keys"]),
                            "changes": int(m["changes"]),
                            "records": int(m["records"]),
                            "start": int(m["start"]),
                            "s": s,
                        }
                    )
    return sorted(out, key=lambda r: r["t"]), sorted(assigned, key=lambda r: r["t"])


POINTERS = re.compile(r"operator '[^']+': \S+: pointers \{(?P<offsets>[^}]*)\}")


def pointed(log_dir: Path) -> set[int]:
    """Partitions whose base some member's log names as its pointer (committed)."""
    out: set[int] = set()
    for path in sorted(log_dir.glob("member-*.log")):
        with open(path, errors="replace") as f:
            for line in f:
                if "pointers" in line and line.startswith("{"):
                    m = POINTERS.search(line)
                    if m:
                        out |= {int(p) for p in re.findall(r"(\d+):", m["offsets"])}
    return out


def wait_pointed(region: Region, log_dir: Path, partitions: int, timeout: float) -> None:
    """Until every partition's base is committed and named by its pointer (the changelog's
    steady state: a restore reads the base and the changes since)."""
    deadline = time.monotonic() + timeout
    while len(pointed(log_dir)) < partitions:
        if region.failed:
            raise RegionFailed(region.failed)
        if time.monotonic() > deadline:
            raise TimeoutError(f"pointers of {sorted(pointed(log_dir))} only, of {partitions} partitions")
        time.sleep(0.5)


def stable(status: Any, members: int) -> bool:
    """Every member back, none rebalancing, the region between resets (running or in a
    checkpoint: with a 0.5 s period it is rarely seen RUNNING for long)."""
    return (
        status is not None
        and status.phase.value in ("RUNNING", "DRAINING", "CHECKPOINTING")
        and len(status.members) == members
        and all(m.kafka is not None and not m.kafka.rebalancing for m in status.members.values())
    )


def analyse(
    kill_t: float, events: list[dict], logs: tuple[list[dict], list[dict]], partitions: int
) -> dict[str, Any] | None:
    """The trial's figures (module docstring), or None while the recovery is not complete."""
    lines, assigned = logs
    after = [e for e in events if e["t"] >= kill_t]
    resets = [e for e in after if e["kind"] == "reset"]
    if not resets:
        return None
    last = resets[-1]["t"]
    first_resume = next((e for e in after if e["kind"] == "resume" and e["t"] >= resets[0]["t"]), None)
    resume = next((e for e in after if e["kind"] == "resume" and e["t"] >= last), None)
    checkpoint = next((e for e in after if e["kind"] == "checkpoint" and e["t"] >= last), None)
    kept = [r for r in lines if r["t0"] >= last]
    back: dict[int, dict] = {}
    for r in kept:
        back.setdefault(r["p"], r)
    if resume is None or checkpoint is None or len(back) < partitions:
        return None
    used = list(back.values())
    spans: dict[str, tuple[float, float]] = {}
    for r in used:
        lo, hi = spans.get(r["member"], (r["t0"], r["t"]))
        spans[r["member"]] = (min(lo, r["t0"]), max(hi, r["t"]))
    per_member = {member: hi - lo for member, (lo, hi) in spans.items()}
    tables_back = max(r["t"] for r in used) - kill_t
    assigned_at = {}
    for p, r in back.items():
        given = [a["t"] for a in assigned if a["member"] == r["member"] and p in a["partitions"] and a["t"] <= r["t0"]]
        assigned_at[p] = round(given[-1] - kill_t, 3) if given else None
    restore_s = max(per_member.values())
    seconds = sum(r["s"] for r in used)
    before = [e["checkpoint_ms"] for e in events if e["kind"] == "checkpoint" and e["t"] < kill_t]
    since = [e["checkpoint_ms"] for e in after if e["kind"] == "checkpoint"]
    return {
        "resets": len(resets),
        "detect_s": round(resets[0]["t"] - kill_t, 3),
        "first_resume_s": round(first_resume["t"] - kill_t, 3) if first_resume else None,
        "resume_s": round(resume["t"] - kill_t, 3),
        "tables_back_s": round(tables_back, 3),
        "restore_s": round(restore_s, 3),
        "tables_back_minus_restore_s": round(tables_back - restore_s, 3),
        "checkpoint_s": round(checkpoint["t"] - kill_t, 3),
        "assigned_s": max((a for a in assigned_at.values() if a is not None), default=None),
        "keys": sum(r["keys"] for r in used),
        "changes": sum(r["changes"] for r in used),
        "restore_changes_s": round(sum(r["changes"] for r in used) / seconds) if seconds > 0 else None,
        "checkpoint_ms_before_p50": round(statistics.median(before)) if before else None,
        "checkpoint_ms_after_max": round(max(since)) if since else None,
        "from_pointer": len([r for r in used if r["start"] > 0]),
        "wasted_restores": len([r for r in lines if r["t"] >= kill_t and r["t0"] < last]),
        "tables_back_by_partition": {
            p: {
                "s": round(r["t"] - kill_t, 3),
                "assigned_s": assigned_at[p],
                "member": r["member"],
                "keys": r["keys"],
                "restore_s": r["s"],
            }
            for p, r in sorted(back.items())
        },
    }


class OutputCounter:
    """Lines of the file sink's published files, counted once per file (never rewritten)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.counted: dict[Path, int] = {}

    def count(self) -> int:
        for path in self.directory.glob(f"*{PUBLISHED_SUFFIX}"):
            if path not in self.counted and not path.name.startswith("."):
                with open(path, "rb") as f:
                    self.counted[path] = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
        return sum(self.counted.values())


def wait_loaded(region: Region, counter: OutputCounter, records: int, timeout: float) -> None:
    """Until ``records`` records are in the published output."""
    deadline = time.monotonic() + timeout
    while counter.count() < records:
        if region.failed:
            raise RegionFailed(region.failed)
        if time.monotonic() > deadline:
            raise TimeoutError(f"load: {counter.count()} of {records} records published")
        time.sleep(0.5)


def wait_recovered(
    args: argparse.Namespace, region: Region, watch: Events, kill_t: float, log_dir: Path
) -> tuple[dict[str, Any], list[dict]]:
    """Step 4 of the module docstring: the figures and the controller's events then."""
    deadline = time.monotonic() + args.recovery_timeout
    figures = None
    quiet_since = None
    seen = 0
    while time.monotonic() < deadline:
        if region.failed:
            raise RegionFailed(region.failed)
        time.sleep(0.2)
        events = watch.events()
        with watch.lock:
            status = watch.status
        figures = analyse(kill_t, events, member_logs(log_dir), args.partitions)
        n_resets = len([e for e in events if e["t"] >= kill_t and e["kind"] == "reset"])
        if figures is None or not stable(status, args.members) or n_resets != seen:
            seen, quiet_since = n_resets, None
            continue
        quiet_since = quiet_since or time.monotonic()
        if time.monotonic() - quiet_since >= args.settle:
            return figures, events
    raise TimeoutError(
        f"no complete recovery within {args.recovery_timeout}s: {figures}; "
        f"last status {watch.status!r}; last poll error {watch.error!r}"
    )


def trial(args: argparse.Namespace, bootstrap: str, kind: str, topic: str, customers: int, work: Path) -> dict:
    pipeline = work / "partitioned_totals.py"
    pipeline.write_text(PIPELINE)
    rdir = work / f"{kind}-{uuid.uuid4().hex[:6]}"
    region = Region(
        str(pipeline),
        members=args.members,
        bootstrap=bootstrap,
        group=f"bench-state-recovery-{uuid.uuid4().hex[:8]}",
        output_dir=rdir / "out",
        state_dir=rdir / "state",
        period_s=args.period,
        member_timeout_s=3.0,
        drain_timeout_s=args.drain_timeout,
        reset_timeout_s=args.drain_timeout,
        params={"topic": topic},
        kafka={
            "session.timeout.ms": args.session_timeout_ms,
            "heartbeat.interval.ms": min(1000, args.session_timeout_ms // 3),
        },
        log_format="json",
    )
    trickle = Trickle(bootstrap, topic, customers, args.rate)
    watch = Events(region)
    row: dict[str, Any] = {"kind": kind, "keys_per_partition": customers // args.partitions}
    t_start = time.monotonic()
    try:
        region.start()
        wait_loaded(region, OutputCounter(rdir / "out"), customers, args.load_timeout)
        row["load_s"] = round(time.monotonic() - t_start, 1)
        region.wait_until(lambda s: stable(s, args.members), 60)
        watch.start()
        trickle.start()
        t_trickle = time.monotonic()
        if customers // args.partitions > MATERIALIZE_MIN_CHANGES:
            wait_pointed(region, rdir / "state" / "logs", args.partitions, args.load_timeout)
            row["pointers_s"] = round(time.monotonic() - t_trickle, 1)
        time.sleep(args.before)
        row["loadavg"] = load()
        kill_t = time.time()
        region.kill("member-1", signal.SIGKILL)
        figures, events = wait_recovered(args, region, watch, kill_t, rdir / "state" / "logs")
        row.update(figures)
        if args.keep:
            (rdir / "events.json").write_text(
                json.dumps({"kill_t": kill_t, "events": [e for e in events if e["t"] >= kill_t - 2]}, default=str)
            )
        row["trickle_sent"] = trickle.sent
    except Exception as exc:  # noqa: BLE001 - the trial is reported failed, the run goes on
        row["error"] = repr(exc)
        row["dir"] = str(rdir)
    finally:
        trickle.stopping.set()
        watch.stopping.set()
        region.stop()
        if trickle.is_alive():
            trickle.join(15)
        if watch.is_alive():
            watch.join(5)
    row["trial_s"] = round(time.monotonic() - t_start, 1)
    if "error" not in row and not args.keep:
        shutil.rmtree(rdir, ignore_errors=True)
    else:
        row["dir"] = str(rdir)
    return row


FIGURES = (
    "resets",
    "detect_s",
    "first_resume_s",
    "resume_s",
    "tables_back_s",
    "restore_s",
    "tables_back_minus_restore_s",
    "checkpoint_s",
    "assigned_s",
    "restore_changes_s",
    "checkpoint_ms_before_p50",
    "checkpoint_ms_after_max",
    "wasted_restores",
    "from_pointer",
    "pointers_s",
    "load_s",
)


def stats(xs: list[float]) -> dict:
    xs = [x for x in xs if x is not None]
    if not xs:
        return {"n": 0}
    return {"n": len(xs), "p50": round(statistics.median(xs), 3), "max": round(max(xs), 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default=None, help="a Kafka cluster (default: $KAFKA_BOOTSTRAP_SERVERS or embedded)")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--keys-per-partition", type=int, default=100_000)
    ap.add_argument("--small-keys", type=int, default=100, help="the baseline's keys per partition")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--members", type=int, default=2)
    ap.add_argument("--rate", type=float, default=200.0, help="trickle of new orders per second")
    ap.add_argument("--before", type=float, default=3.0, help="seconds of trickle before the kill")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds without change that end a recovery")
    ap.add_argument(
        "--session-timeout-ms",
        type=int,
        default=6000,
        help="the members' Kafka session timeout (heartbeat: min(1 s, a third)); tests/support/region.py's",
    )
    ap.add_argument("--period", type=float, default=0.5, help="checkpoint period, s")
    ap.add_argument("--drain-timeout", type=float, default=30.0, help="drain and reset timeouts, s")
    ap.add_argument("--load-timeout", type=float, default=300.0)
    ap.add_argument("--recovery-timeout", type=float, default=120.0)
    ap.add_argument("--keep", action="store_true", help="keep every trial's directory (logs, output)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-state-recovery-"))
    kinds = {"large": args.keys_per_partition, "small": args.small_keys}
    rows: dict[str, list[dict]] = {k: [] for k in kinds}
    t0 = time.monotonic()
    with bootstrap_or_embedded(args.bootstrap) as (bootstrap, _pid):
        topics = {}
        for kind, per in kinds.items():
            topics[kind] = create_topic(bootstrap, f"bench-orders-{kind}-{uuid.uuid4().hex[:8]}", args.partitions)
            p0 = time.monotonic()
            produce_orders(bootstrap, topics[kind], per * args.partitions)
            print(
                json.dumps({"produced": kind, "records": per * args.partitions, "s": round(time.monotonic() - p0, 1)}),
                flush=True,
            )
        for i in range(args.trials):
            order = list(kinds) if i % 2 == 0 else list(reversed(kinds))
            for kind in order:
                row = trial(args, bootstrap, kind, topics[kind], kinds[kind] * args.partitions, work)
                row["trial"] = i
                rows[kind].append(row)
                print(json.dumps(row), flush=True)
    summary = {
        "trials": args.trials,
        "partitions": args.partitions,
        "members": args.members,
        "trickle_per_s": args.rate,
        "session_timeout_ms": args.session_timeout_ms,
        "checkpoint_period_s": args.period,
        "elapsed_s": round(time.monotonic() - t0, 1),
        **{
            kind: {
                "keys_per_partition": kinds[kind],
                "ok": len([r for r in rs if "error" not in r]),
                **{f: stats([r.get(f) for r in rs]) for f in FIGURES},
            }
            for kind, rs in rows.items()
        },
    }
    print(json.dumps(summary, indent=2))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if all("error" not in r for rs in rows.values() for r in rs) else 1


if __name__ == "__main__":
    sys.exit(main())
