"""``crkafka run`` Kafka -> map -> exactly-once Kafka sink against the same pipeline with the
exactly-once file sink, on the same broker, input and machine, in one run.

Each round produces nothing new: one input topic of ``--messages`` x 100-byte records is
produced once; each pipeline reads it from the start with a fresh group. The pipelines are
``crkafka run``'s runner (``Region``) with ``--members`` member processes, a ``--period``
checkpoint period, and ``KafkaSource -> map(enrich) -> sink``: ``enrich`` parses nothing and
adds a field (the value becomes ~110 bytes of JSON), the sink is the Kafka sink (``kafka``,
writing to a fresh topic of the input's partition count) or the file sink (``file``). The
order of the two alternates round by round.

Timed: from the region's start (``Region.start`` returned) until the checkpoint whose drain
committed the input's end to the group (the group's committed offsets sum to ``--messages``)
completed (``last_consistent`` reaches the cycle's ``seq``); both sinks make a checkpoint's
output visible at its RESUME, right after. Start-up (member processes, group
join) is inside both times alike. Also reported: each pipeline's flow stops (the controller's
DRAINING -> RUNNING per checkpoint, p50/p99) and, for the Kafka sinks, the committed output read
back with ``raw_batches.read_committed`` (every record, nothing open).

With ``--quix-python`` (the interpreter of a separate environment holding quixstreams), a third
system: Quix Streams' exactly-once Kafka -> Kafka with the same map and a 1 s commit interval
(bench/quix_flow.py, one process), timed from its process's start until its group's committed
offsets (committed inside its transactions) reach the input's end.

``--kafka-client`` runs the ``crkafka`` members, their source and their Kafka sink, on that client.

    .venv/bin/python bench/bench_kafka_pipeline.py --messages 1000000 --rounds 1
    .venv/bin/python bench/bench_kafka_pipeline.py --messages 1000000 --kafka-client librdkafka \
        --out bench/results/kafka_pipeline_librdkafka.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from coordinator.kafka.raw_batches import read_committed
from coordinator.protocol.common.waiting import wait_until
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.runtime.runner.region_runner import Region
from cr_consumer.testing.broker import bootstrap_or_embedded
from cr_consumer.testing.kafka_util import committed_offsets, create_topic, producer, unique_name

#: Bound on one pipeline's run: a stalled region fails the bench instead of hanging it.
RUN_TIMEOUT_S = 900.0
#: Bound on Quix's graceful stop before it is killed (its last transaction is then left open,
#: after the measurement and the output check).
STOP_TIMEOUT_S = 30.0

PIPELINE = """
from cr_consumer.runtime import KafkaSource, Pipeline
from cr_consumer.runtime.pipeline.records import replace


def enrich(r):
    return replace(r, value=b'{"source":"%s","v":"' % r.topic.encode() + r.value + b'"}')


def build(ctx):
    p = Pipeline(KafkaSource(topics=[ctx.param("topic")], options={"start_position": "earliest"})).map(enrich)
    if ctx.param("sink") == "kafka":
        return p.sink(ctx.kafka_sink(ctx.param("out")))
    return p.sink(ctx.file_sink())
"""


def produce_input(bootstrap: str, topic: str, n: int) -> None:
    p = producer(bootstrap)
    value = b"x" * 100
    for i in range(n):
        p.send(topic, key=b"k%d" % (i % 1000), value=value)
    p.flush(timeout=300)
    p.close()


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def verify(bootstrap: str, topic: str, partitions: int, n: int, who: str) -> None:
    """Every input record committed once in ``topic``, no transaction left open."""
    settings = admin_settings(bootstrap, {}, request_timeout_ms=30_000, client_id="bench-pipeline")
    reads = [read_committed(settings, topic, p) for p in range(partitions)]
    written = sum(len(r.records) for r in reads)
    still_open = [t for r in reads for t in r.open_transactions]
    if written != n or still_open:
        raise RuntimeError(f"{who} committed {written} of {n} records; open: {still_open}")


def _input_done(bootstrap: str, group: str, topic: str, n: int) -> bool:
    return sum(committed_offsets(bootstrap, group, topic).values()) >= n


def quix(bootstrap: str, topic: str, args: argparse.Namespace) -> dict[str, Any]:
    out_topic = create_topic(bootstrap, unique_name("bench-quix"), args.partitions)
    group = unique_name("bench-quix")
    flow = Path(__file__).resolve().parent / "quix_flow.py"
    cmd = [args.quix_python, str(flow), "--bootstrap", bootstrap, "--topic", topic, "--out", out_topic]
    load = os.getloadavg()[0]
    started = time.monotonic()
    proc = subprocess.Popen([*cmd, "--group", group, "--commit-s", str(args.period)])
    try:
        wait_until(
            lambda: proc.poll() is not None or _input_done(bootstrap, group, topic, args.messages),
            RUN_TIMEOUT_S,
            "quix: the input's end committed",
            interval=0.2,
        )
        took = time.monotonic() - started
        if proc.poll() is not None:
            raise RuntimeError(f"quix_flow.py exited with {proc.returncode} before the input's end")
    finally:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT_S)
    verify(bootstrap, out_topic, args.partitions, args.messages, "quix")
    return {"sink": "quix", "load_1min_before": load, "seconds": took, "records_per_s": args.messages / took}


def one(bootstrap: str, topic: str, sink: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    module = work / "pipeline.py"
    module.write_text(PIPELINE)
    params: dict[str, object] = {"topic": topic, "sink": sink}
    out_topic = ""
    if sink == "kafka":
        out_topic = create_topic(bootstrap, unique_name("bench-out"), args.partitions)
        params["out"] = out_topic
    region = Region(
        str(module),
        members=args.members,
        bootstrap=bootstrap,
        output_dir=work / f"out-{sink}",
        state_dir=work / f"state-{sink}",
        period_s=args.period,
        params=params,
        kafka={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000},
        kafka_client=args.kafka_client,
        log_level="WARNING",
    )
    load = os.getloadavg()[0]
    region.start()
    started = time.monotonic()
    try:
        wait_until(
            lambda: _input_done(bootstrap, region.group, topic, args.messages),
            RUN_TIMEOUT_S,
            f"{sink} pipeline: the input's end committed",
            interval=0.2,
        )
        seq = region.status().seq or 0
        region.wait_until(lambda s: (s.last_consistent or 0) >= seq, RUN_TIMEOUT_S, interval=0.05)
        report = region.report()
        took = time.monotonic() - started
    finally:
        region.stop()
    stops = [
        float(ms)
        for e in report.events
        if e.kind == "checkpoint" and isinstance(ms := e.fields.get("checkpoint_ms"), int | float)
    ]
    row: dict[str, Any] = {
        "sink": sink,
        "kafka_client": args.kafka_client or "kafka-python",
        "load_1min_before": load,
        "seconds": took,
        "records_per_s": args.messages / took,
        "checkpoints": report.region.checkpoints,
        "resets": report.region.reset.resets,
        "flow_stop_ms_p50": quantile(stops, 0.5),
        "flow_stop_ms_p99": quantile(stops, 0.99),
        "flow_stops_counted": len(stops),
    }
    if sink == "kafka":
        verify(bootstrap, out_topic, args.partitions, args.messages, "the Kafka sink")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--members", type=int, default=2)
    ap.add_argument("--period", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--quix-python", default=None, help="interpreter of an environment holding quixstreams")
    ap.add_argument(
        "--kafka-client",
        choices=["kafka-python", "librdkafka"],
        default=None,
        help="the crkafka members' client (source and Kafka sink); default: the project's",
    )
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "kafka_pipeline.json"))
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    with bootstrap_or_embedded(args.bootstrap) as (bootstrap, _pid), tempfile.TemporaryDirectory() as tmp:
        topic = create_topic(bootstrap, unique_name("bench-in"), args.partitions)
        produce_input(bootstrap, topic, args.messages)
        for i in range(args.rounds):
            order = ["kafka", "file", "quix"] if i % 2 == 0 else ["quix", "file", "kafka"]
            for sink in order:
                if sink == "quix":
                    if args.quix_python is None:
                        continue
                    row = quix(bootstrap, topic, args)
                else:
                    row = one(bootstrap, topic, sink, args, Path(tmp) / f"round{i}")
                print(json.dumps(row), flush=True)
                rows.append(row)
    systems = ("kafka", "file", "quix") if args.quix_python else ("kafka", "file")
    rate = {s: statistics.median(r["records_per_s"] for r in rows if r["sink"] == s) for s in systems}
    result = {
        "kafka_client": args.kafka_client or "kafka-python",
        "messages": args.messages,
        "partitions": args.partitions,
        "members": args.members,
        "period_s": args.period,
        "rounds": rows,
        "kafka_sink_records_per_s": rate["kafka"],
        "file_sink_records_per_s": rate["file"],
        "kafka_to_file_ratio": rate["kafka"] / rate["file"],
        "quix_records_per_s": rate.get("quix"),
        "kafka_to_quix_ratio": rate["kafka"] / rate["quix"] if "quix" in rate else None,
    }
    print(json.dumps(result, indent=2))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
