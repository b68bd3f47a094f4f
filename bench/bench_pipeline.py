"""Pipeline throughput of a 3-member region (1 s period) vs the bare kafka-python poll loop.

Same input for both (one topic, ``--partitions`` partitions, ``--messages`` x
100-byte records, produced once), same machine, same run:

* baseline: 3 processes, each a bare ``KafkaConsumer.poll`` loop over a third
  of the partitions (assigned, from the beginning), counting records;
* pipeline: ``crkafka run``'s runner with 3 member processes, a 1 s checkpoint
  period, Kafka source -> exactly-once file sink (``passthrough``: every record
  written as a JSON line, published per checkpoint).

Per-process steady-state rate: baseline = records / (last poll - first poll)
of that process; pipeline = records of a member's output files 2..k-1 /
(mtime of file k-1 - mtime of file 1) (files are published once per
checkpoint: the first interval holds the group join, the last one idles after
the input ran out, so both are excluded). The figure is the
ratio pipeline rate / baseline rate per member (median of the members), and
the total rates. Goal: >= 0.8 per member.

    .venv/bin/python bench/bench_pipeline.py [--messages 600000] [--rounds 3] [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cr_consumer.broker import bootstrap_or_embedded  # noqa: E402
from cr_consumer.kafka_util import create_topic, producer, unique_name  # noqa: E402
from cr_consumer.runtime.runner import Region  # noqa: E402

BARE = r'''
import json, sys, time
from kafka import KafkaConsumer, TopicPartition
bootstrap, topic, parts, expected = sys.argv[1], sys.argv[2], [int(p) for p in sys.argv[3].split(",")], int(sys.argv[4])
c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, max_poll_records=500)
tps = [TopicPartition(topic, p) for p in parts]
c.assign(tps)
c.seek_to_beginning(*tps)
n, first, last = 0, None, None
deadline = time.monotonic() + 600
while n < expected and time.monotonic() < deadline:
    batch = c.poll(timeout_ms=500)
    for recs in batch.values():
        if recs:
            if first is None:
                first = time.monotonic()
            n += len(recs)
            last = time.monotonic()
c.close()
print(json.dumps({"n": n, "first": first, "last": last, "cpu": time.process_time()}))
'''

PASSTHROUGH = '''
from cr_consumer.runtime import KafkaSource, Operator, Pipeline


class CountSink(Operator):
    """Counts records; writes the count at each checkpoint (not exactly-once: the
    'source only' variant, to see the runtime's cost without the file sink)."""

    kind = "count_sink"

    def __init__(self, path):
        super().__init__()
        self.path, self.n = path, 0

    def process_batch(self, records):
        self.n += len(records)
        return []

    def checkpoint(self, seq):
        self.path.write_text(str(self.n))
        return super().checkpoint(seq)


def build(ctx):
    p = Pipeline(KafkaSource(topics=[ctx.param("topic")], options={"start_position": "beginning"}))
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


def bare(bootstrap: str, topic: str, partitions: int, n: int, members: int) -> dict:
    groups = [[p for p in range(partitions) if p % members == m] for m in range(members)]
    procs = [subprocess.Popen([sys.executable, "-c", BARE, bootstrap, topic, ",".join(map(str, g)),
                               str(n // partitions * len(g))], stdout=subprocess.PIPE, text=True)
             for g in groups]
    results = [json.loads(p.communicate(timeout=900)[0]) for p in procs]
    rates = [r["n"] / max(1e-9, r["last"] - r["first"]) for r in results]
    span = max(r["last"] for r in results) - min(r["first"] for r in results)
    cpu_us = 1e6 * sum(r["cpu"] for r in results) / max(1, sum(r["n"] for r in results))
    return {"per_member": rates, "total": sum(r["n"] for r in results) / span, "cpu_us_per_record": cpu_us}


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a live process (Linux /proc), in seconds."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pipeline(bootstrap: str, topic: str, n: int, members: int, work: Path, drop: bool, period: float) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    module = work / "passthrough.py"
    module.write_text(PASSTHROUGH)
    out = work / ("out-drop" if drop else "out")
    region = Region(str(module), members=members, bootstrap=bootstrap, output_dir=out,
                    state_dir=work / ("state-drop" if drop else "state"), period_s=period,
                    params={"topic": topic, "sink": "count" if drop else "file"},
                    kafka={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}, log_level="WARNING")
    region.start()
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if drop:
                count = sum(int(f.read_text() or 0) for f in out.glob("*.count"))
            else:
                count = sum(1 for f in out.glob("*.jsonl") for _ in open(f, "rb"))
            if count >= n:
                break
            time.sleep(0.5)
        status = region.status()
        cpu = sum(_cpu_seconds(pid) for pid in region.pids().values() if pid)
    finally:
        region.stop()
    per_member = []
    firsts, lasts, total = [], [], 0
    for name in region.members:
        files = sorted(out.glob(f"{name}-*.jsonl"))
        # Files 2..k-1 only: the first interval includes the group join, the last one
        # idles after the input ran out (its file is published at the next checkpoint).
        files = files[:-1]
        if len(files) < 3:
            continue
        lines = [sum(1 for _ in open(f, "rb")) for f in files]
        mtimes = [f.stat().st_mtime for f in files]
        per_member.append(sum(lines[1:]) / max(1e-9, mtimes[-1] - mtimes[0]))
        firsts.append(mtimes[0])
        lasts.append(mtimes[-1])
        total += sum(lines[1:])
    return {"per_member": per_member, "total": total / max(1e-9, max(lasts) - min(firsts)) if lasts else 0.0,
            "checkpoints": status.get("checkpoints"), "resets": status.get("resets"),
            "cpu_us_per_record": 1e6 * cpu / n}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=600_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--period", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3,
                        help="bare/pipeline pairs, interleaved so that load from other processes hits both")
    parser.add_argument("--count-sink", action="store_true",
                        help="also run each round with a counting sink instead of the file sink (runtime cost alone)")
    parser.add_argument("--bootstrap")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    rounds = []
    with bootstrap_or_embedded(args.bootstrap) as bootstrap:
        topic = create_topic(bootstrap, unique_name("bench-pipeline"), args.partitions)
        t0 = time.monotonic()
        produce_input(bootstrap, topic, args.messages, args.partitions)
        print(f"produced {args.messages} x 100 B in {time.monotonic() - t0:.1f}s", flush=True)
        for i in range(args.rounds):
            base = bare(bootstrap, topic, args.partitions, args.messages, args.members)
            full = pipeline(bootstrap, topic, args.messages, args.members, work / f"round-{i}", drop=False,
                            period=args.period)
            b = statistics.median(base["per_member"])
            m = statistics.median(full["per_member"]) if full["per_member"] else 0.0
            count_only = pipeline(bootstrap, topic, args.messages, args.members, work / f"round-{i}-count",
                                  drop=True, period=args.period) if args.count_sink else None
            rounds.append({"bare_per_process": round(b), "pipeline_per_member": round(m),
                           "ratio_per_member": round(m / b, 3), "bare_total": round(base["total"]),
                           "pipeline_total": round(full["total"]), "ratio_total": round(full["total"] / base["total"], 3),
                           "checkpoints": full["checkpoints"], "resets": full["resets"],
                           "bare_cpu_us_per_record": round(base["cpu_us_per_record"], 2),
                           "pipeline_cpu_us_per_record": round(full["cpu_us_per_record"], 2),
                           "cpu_ratio": round(base["cpu_us_per_record"] / full["cpu_us_per_record"], 3)})
            if count_only is not None:
                rounds[-1]["count_sink_cpu_us_per_record"] = round(count_only["cpu_us_per_record"], 2)
                rounds[-1]["count_sink_cpu_ratio"] = round(base["cpu_us_per_record"] / count_only["cpu_us_per_record"], 3)
            print(f"round {i}: {rounds[-1]}", flush=True)
    report = {
        "messages": args.messages, "partitions": args.partitions, "members": args.members, "period_s": args.period,
        "rounds": rounds,
        "median_ratio_per_member": statistics.median(r["ratio_per_member"] for r in rounds),
        "median_ratio_total": statistics.median(r["ratio_total"] for r in rounds),
        "median_cpu_ratio": statistics.median(r["cpu_ratio"] for r in rounds),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
