"""Both KafkaClient adapters against a bare kafka-python loop, same per-record work.

One topic of ``--messages`` records of 100 bytes over 4 partitions is produced
once; each trial then reads all of it with a fresh group per system, in an
order that alternates from trial to trial:

* ``bare-kafka-python``: the baseline (bench/baseline.py, a KafkaConsumer poll loop);
* ``bare-confluent-kafka``: a bare confluent-kafka ``consume`` loop with the
  library's defaults; ``bare-confluent-kafka-tuned``: the same with the
  adapter's librdkafka defaults (``librdkafka_client.DEFAULTS``: what the
  librdkafka adapter can reach at best);
* ``client-kafka-python`` / ``client-librdkafka``: ``make_client(kind).poll``
  through the seam, which hands out :class:`KafkaRecord` objects;
* ``operator-kafka-python`` / ``operator-librdkafka``: a standalone
  ``ConsumerOperator(config, submit)`` (event thread, queue, process thread,
  drains and commits every ``commit_period_s`` = 1 s) with that client, the work
  done in ``submit(record)``;
* ``operator-librdkafka-pause-at-once``: ``operator-librdkafka`` with the queue-full
  backpressure pausing at once (``event_thread.HOLD_MAX_S = 0``; compare with
  ``--io-wait-us``, which lets the event thread outrun the process thread);
* ``run-kafka-python`` / ``run-librdkafka``: ``crkafka run``'s runner with one
  member process (1 s checkpoint period), Kafka source -> exactly-once file
  sink (every record written as a JSON line, published per checkpoint);
* ``bytewax`` (with ``--bytewax-python``, the interpreter of a separate
  environment holding bytewax 0.21: never a project dependency): a one-worker
  Bytewax dataflow with 1 s recovery snapshots, the same per-record work
  (bench/bytewax_flow.py).

Every in-process system does the same work per record: a dict update keyed by
(partition, offset bucket); the ``run-*`` systems' work is the file sink's. The
clock runs from the first record returned to the last, so the group join is not
counted; for ``run-*`` it is the published files 2..k-1 of the member (the first
interval holds the group join, the last one idles after the input ran out):
their records / (mtime of file k-1 - mtime of file 1), as bench/bench_pipeline.py.
The figures are the median of the trials; ratios are against ``bare-kafka-python``
(median of the per-trial ratios, robust to load drifting between trials).

    .venv/bin/python bench/bench_clients.py --messages 1000000 --trials 3
    .venv/bin/python bench/bench_clients.py --systems bare-kafka-python,operator-librdkafka,run-librdkafka
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from baseline import bare_poll_loop, produce_fixed

from cr_consumer import ConsumerOperator, OperatorConfig, StartKind
from cr_consumer.kafka.client import ClientKind, KafkaRecord
from cr_consumer.kafka.factory import make_client
from cr_consumer.runtime.runner.region_runner import Region
from cr_consumer.testing.broker import bootstrap_or_embedded
from cr_consumer.testing.kafka_util import create_topic, unique_name

#: Bound on one measurement so a stalled broker fails the benchmark.
RUN_TIMEOUT_S = 300.0
MAX_RECORDS = 500
#: An operator run that submits nothing for this long fails (with its metrics).
STALL_S = 60.0


#: --io-wait-us: microseconds per record each system's work also waits outside
#: the GIL (a 1 ms sleep every 1000/N records, as a sink's I/O would).
IO_WAIT_US = 0


class Work:
    """The per-record work: one dict update (and the --io-wait-us wait)."""

    def __init__(self) -> None:
        self.bytes_per_key: dict[tuple[int, int], int] = {}
        self._wait_every = max(1, round(1000 / IO_WAIT_US)) if IO_WAIT_US else 0

    def __call__(self, partition: int, offset: int, value: bytes) -> None:
        key = (partition, offset & 1023)
        self.bytes_per_key[key] = self.bytes_per_key.get(key, 0) + len(value)
        if self._wait_every and offset % self._wait_every == 0:
            time.sleep(0.001)


def _timed(n: int, step: Callable[[], int]) -> dict:
    seen, first, cpu_first = 0, 0.0, 0.0
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while seen < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"saw {seen} of {n} records in {RUN_TIMEOUT_S}s")
        got = step()
        if got and not first:
            first, cpu_first = time.perf_counter(), time.process_time()
        seen += got
    seconds = time.perf_counter() - first
    return {
        "records": seen,
        "seconds": seconds,
        "records_per_s": seen / seconds,
        "cpu_s": time.process_time() - cpu_first,
    }


def bare_kafka_python(bootstrap: str, topic: str, n: int) -> dict:
    work = Work()
    return bare_poll_loop(
        bootstrap, topic, n, max_poll_records=MAX_RECORDS, on_record=lambda r: work(r.partition, r.offset, r.value)
    )


def bare_confluent(bootstrap: str, topic: str, n: int, **settings: object) -> dict:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-ck-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            **settings,
        }
    )
    consumer.subscribe([topic])
    work = Work()

    def step() -> int:
        messages = consumer.consume(MAX_RECORDS, 0.1)
        for m in messages:
            if m.error() is None:
                work(m.partition(), m.offset(), m.value())
        return sum(1 for m in messages if m.error() is None)

    try:
        return _timed(n, step)
    finally:
        consumer.close()


def bare_confluent_tuned(bootstrap: str, topic: str, n: int) -> dict:
    """The bare confluent-kafka loop with the adapter's librdkafka defaults (librdkafka_client.DEFAULTS)."""
    from cr_consumer.kafka.librdkafka.properties import DEFAULTS

    return bare_confluent(bootstrap, topic, n, **DEFAULTS)


def through_client(kind: ClientKind) -> Callable[[str, str, int], dict]:
    def run(bootstrap: str, topic: str, n: int) -> dict:
        client = make_client(
            kind,
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-{kind.value}-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
            },
        )
        client.subscribe([topic], listener=_NoListener())
        work = Work()

        def step() -> int:
            got = 0
            for records in client.poll(100, MAX_RECORDS).values():
                got += len(records)
                for r in records:
                    work(r.partition, r.offset, r.value)
            return got

        try:
            return _timed(n, step)
        finally:
            client.close(10000)

    return run


def through_operator(kind: ClientKind) -> Callable[[str, str, int], dict]:
    """A standalone operator with ``kind`` (drains and commits every second); the work in submit(record)."""

    def run(bootstrap: str, topic: str, n: int) -> dict:
        work = Work()
        done = threading.Event()
        state = {"seen": 0, "first": 0.0, "cpu_first": 0.0, "last": 0.0, "cpu_last": 0.0}

        def submit(record: KafkaRecord) -> None:
            work(record.partition, record.offset, record.value)
            seen = state["seen"] = state["seen"] + 1
            if seen == 1:
                state["first"], state["cpu_first"] = time.perf_counter(), time.process_time()
            elif seen >= n:
                state["last"], state["cpu_last"] = time.perf_counter(), time.process_time()
                done.set()

        config = OperatorConfig(
            bootstrap_servers=bootstrap,
            group_id=f"bench-op-{kind.value}-{uuid.uuid4().hex[:8]}",
            operator_name="m0",
            topics=[topic],
            start_position=StartKind.EARLIEST,
            commit_period_s=1.0,
            client=kind,
            consumer_properties={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000},
        )
        with ConsumerOperator(config, submit) as op:
            deadline, progress = time.monotonic() + RUN_TIMEOUT_S, (-1, 0.0)
            while not done.wait(1.0):
                now = time.monotonic()
                if state["seen"] != progress[0]:
                    progress = (state["seen"], now)
                if now > deadline or now - progress[1] > STALL_S:
                    raise TimeoutError(f"the operator submitted {state['seen']} of {n} records; metrics {op.metrics()}")
            pauses, holds = op.metrics()["nQueueFullPause"], op.events.n_queue_full_hold
        seconds = state["last"] - state["first"]
        return {
            "records": state["seen"],
            "seconds": seconds,
            "records_per_s": state["seen"] / seconds,
            "cpu_s": state["cpu_last"] - state["cpu_first"],
            "queue_full_pauses": pauses,
            "queue_full_holds": holds,
        }

    return run


def pausing_at_once(kind: ClientKind) -> Callable[[str, str, int], dict]:
    """The operator with the queue-full backpressure pausing at once (event_thread.HOLD_MAX_S = 0):
    librdkafka then purges its fetched-ahead records at every pause and fetches them again."""

    def run(bootstrap: str, topic: str, n: int) -> dict:
        from cr_consumer.operator import event_thread

        saved = event_thread.HOLD_MAX_S
        event_thread.HOLD_MAX_S = 0.0
        try:
            return through_operator(kind)(bootstrap, topic, n)
        finally:
            event_thread.HOLD_MAX_S = saved

    return run


PASSTHROUGH = """
from cr_consumer.runtime import KafkaSource, Pipeline

def build(ctx):
    return (Pipeline(KafkaSource(topics=[ctx.param("topic")], options={"start_position": "earliest"}))
            .sink(ctx.file_sink()))
"""


def through_run(kind: ClientKind) -> Callable[[str, str, int], dict]:
    """``crkafka run``'s runner, one member, exactly-once file sink (see the module docstring)."""

    def run(bootstrap: str, topic: str, n: int) -> dict:
        with tempfile.TemporaryDirectory(prefix="bench-run-") as tmp:
            work = Path(tmp)
            module = work / "passthrough.py"
            module.write_text(PASSTHROUGH)
            out = work / "out"
            region = Region(
                str(module),
                members=1,
                bootstrap=bootstrap,
                output_dir=out,
                state_dir=work / "state",
                period_s=1.0,
                params={"topic": topic},
                kafka_client=kind.value,
                kafka={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000},
                log_level="WARNING",
            )
            region.start()
            lines_of: dict[Path, int] = {}  # published files never change: each is counted once
            cpu_marks: list[tuple[int, float]] = []  # (records published, the member's CPU s) when that was seen
            try:
                deadline = time.monotonic() + RUN_TIMEOUT_S
                while sum(lines_of.values()) < n:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"crkafka run published {sum(lines_of.values())} of {n} records")
                    new = [f for f in out.glob("*.jsonl") if f not in lines_of]
                    for f in new:
                        lines_of[f] = f.read_bytes().count(b"\n")
                    if new:
                        cpu_marks.append((sum(lines_of.values()), _member_cpu_s(region)))
                    time.sleep(0.2)  # polling the output directory, bounded by the deadline
            finally:
                region.stop()
            files = sorted(lines_of, key=lambda f: f.stat().st_mtime)[:-1]
            if len(files) < 2:
                raise RuntimeError(f"only {len(files) + 1} published files: give more --messages")
            lines = [lines_of[f] for f in files]
            seconds = files[-1].stat().st_mtime - files[0].stat().st_mtime
        # CPU: the member process's, from the first published file to the last, scaled to n records
        # (the first interval's CPU holds the imports and the group join, so it is left out)
        (first_n, first_cpu), (last_n, last_cpu) = cpu_marks[0], cpu_marks[-1]
        cpu_s = (last_cpu - first_cpu) * n / (last_n - first_n) if last_n > first_n else None
        return {
            "records": sum(lines[1:]),
            "seconds": seconds,
            "records_per_s": sum(lines[1:]) / seconds,
            "cpu_s": cpu_s,
            "published": sum(lines_of.values()),
        }

    return run


def _member_cpu_s(region: Region) -> float:
    """utime + stime of the region's (one) member process (Linux /proc), in seconds."""
    total = 0.0
    for pid in region.pids().values():
        if pid is not None:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def bytewax(python: str) -> Callable[[str, str, int], dict]:
    """bench/bytewax_flow.py under ``python`` (see the module docstring)."""

    def run(bootstrap: str, topic: str, n: int) -> dict:
        out = subprocess.run(
            [
                python,
                str(Path(__file__).resolve().parent / "bytewax_flow.py"),
                "--bootstrap",
                bootstrap,
                "--topic",
                topic,
                "--messages",
                str(n),
            ],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
        if out.returncode != 0:
            raise RuntimeError(f"the Bytewax flow failed: {out.stderr[-2000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    return run


class _NoListener:
    def on_assigned(self, partitions) -> None:
        pass

    def on_revoked(self, partitions) -> None:
        pass

    def on_lost(self, partitions) -> None:
        pass


SYSTEMS: dict[str, Callable[[str, str, int], dict]] = {
    "bare-kafka-python": bare_kafka_python,
    "client-kafka-python": through_client(ClientKind.KAFKA_PYTHON),
    "bare-confluent-kafka": bare_confluent,
    "bare-confluent-kafka-tuned": bare_confluent_tuned,
    "client-librdkafka": through_client(ClientKind.LIBRDKAFKA),
    "operator-kafka-python": through_operator(ClientKind.KAFKA_PYTHON),
    "operator-librdkafka": through_operator(ClientKind.LIBRDKAFKA),
    "operator-librdkafka-pause-at-once": pausing_at_once(ClientKind.LIBRDKAFKA),
    "run-kafka-python": through_run(ClientKind.KAFKA_PYTHON),
    "run-librdkafka": through_run(ClientKind.LIBRDKAFKA),
}


def summarize(runs: dict[str, list[dict]]) -> dict[str, dict]:
    """Medians per system, and two ratios against the bare kafka-python loop:
    records/s (wall clock; on a loaded machine the broker and other processes
    weigh in) and CPU seconds of this process per run (bare / system: how much
    less Python work the system does for the same records)."""

    def median(name: str, field: str) -> float:
        return statistics.median(r[field] for r in runs[name])

    base = runs["bare-kafka-python"]
    base_cpu = median("bare-kafka-python", "cpu_s")

    def cpu_ratio(name: str) -> float | None:
        if any(r["cpu_s"] is None for r in runs[name]):
            return None
        return round(base_cpu / median(name, "cpu_s"), 2)

    def pair_ratio(name: str) -> float:
        return statistics.median(r["records_per_s"] / b["records_per_s"] for r, b in zip(runs[name], base))

    return {
        name: {
            "median_records_per_s": round(median(name, "records_per_s")),
            "vs_bare_kafka_python": round(pair_ratio(name), 2),
            "cpu_vs_bare_kafka_python": cpu_ratio(name),
        }
        for name in runs
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help="comma-separated systems to run (bare-kafka-python always runs: the baseline)",
    )
    ap.add_argument(
        "--bytewax-python",
        default=None,
        help="python of an environment with bytewax 0.21 and confluent-kafka: adds the bytewax system",
    )
    ap.add_argument(
        "--io-wait-us",
        type=float,
        default=0.0,
        help="per record, also wait this many microseconds outside the GIL (in-process systems)",
    )
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "clients.json"))
    args = ap.parse_args()
    global IO_WAIT_US
    IO_WAIT_US = args.io_wait_us
    if args.bytewax_python:
        SYSTEMS["bytewax"] = bytewax(args.bytewax_python)
        args.systems += ",bytewax"
    chosen = ["bare-kafka-python"] + [s for s in args.systems.split(",") if s and s != "bare-kafka-python"]
    unknown = [s for s in chosen if s not in SYSTEMS]
    if unknown:
        raise SystemExit(f"unknown systems {unknown}; choose from {list(SYSTEMS)}")
    runs: dict[str, list[dict]] = {name: [] for name in chosen}
    with bootstrap_or_embedded(args.bootstrap) as bootstrap:
        topic = create_topic(bootstrap, unique_name("bench-clients"), args.partitions)
        produce_fixed(bootstrap, topic, args.messages)
        names = chosen
        for trial in range(args.trials):
            order = names if trial % 2 == 0 else names[::-1]
            for name in order:
                result = SYSTEMS[name](bootstrap, topic, args.messages)
                runs[name].append(result)
                cpu = "" if result["cpu_s"] is None else f" (cpu {result['cpu_s']:.2f} s)"
                backpressure = (
                    f", queue full: {result['queue_full_pauses']} pauses, {result['queue_full_holds']} holds"
                    if "queue_full_pauses" in result
                    else ""
                )
                print(
                    f"trial {trial + 1} {name}: {result['records_per_s']:,.0f} records/s{cpu}{backpressure} "
                    f"(load {os.getloadavg()[0]:.2f})",
                    flush=True,
                )
    summary = summarize(runs)
    work = "one dict update per record" + (f", {args.io_wait_us} us of waiting outside the GIL" if IO_WAIT_US else "")
    doc = {
        "version": 1,
        "messages": args.messages,
        "value_bytes": 100,
        "partitions": args.partitions,
        "trials": args.trials,
        "work": work,
        "summary": summary,
        "runs": runs,
    }
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
