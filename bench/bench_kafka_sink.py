"""The exactly-once Kafka sink against a plain idempotent kafka-python producer loop.

Each trial writes the same ``--messages`` records of 100 bytes (keyed, 4 partitions) twice,
in an order that alternates from trial to trial:

* ``idempotent``: the baseline, a ``KafkaProducer(enable_idempotence=True, acks="all")`` send
  loop and one flush at the end;
* ``sink``: a ``KafkaSink`` fed batches of ``--batch`` records (``process_batch``, as the
  source's process thread does), with a checkpoint every ``--period`` seconds as the member
  runtime runs it: ``drain()`` + ``checkpoint(seq)`` (flush, every send acknowledged, the
  transaction prepared: the region's stopped flow) then ``notify_checkpoint_complete(seq)``
  (the commit, after the RESUME), and a last checkpoint at the end.

Both use the producer's defaults otherwise. The figures: records/s of each (median of the
trials), the sink's ratio to the baseline (median of the per-trial ratios), and over every
checkpoint of every trial the p50/p99 of flush+prepare and of the commit. The committed output
of the last sink trial is checked with ``raw_batches.read_committed`` (every record, nothing
open). Starts its own broker unless ``--bootstrap`` is given.

    .venv/bin/python bench/bench_kafka_sink.py --messages 200000 --trials 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from pathlib import Path

from kafka import KafkaProducer

from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.kafka.kafka_python.raw_batches import read_committed
from cr_consumer.runtime.pipeline.kafka_sink import KafkaSink
from cr_consumer.runtime.pipeline.records import Record
from cr_consumer.testing.broker import EmbeddedBroker
from cr_consumer.testing.kafka_util import create_topic

VALUE = b"x" * 100


def records(n: int) -> list[Record]:
    return [Record("in", 0, i, None, b"k%d" % (i % 1000), VALUE) for i in range(n)]


def idempotent(bootstrap: str, topic: str, batch: list[Record]) -> float:
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    try:
        started = time.perf_counter()
        for r in batch:
            producer.send(topic, value=r.value, key=r.key)
        producer.flush(timeout=120)
        return time.perf_counter() - started
    finally:
        producer.close(timeout=10)


def sink(
    bootstrap: str,
    topic: str,
    batch: list[Record],
    size: int,
    period_s: float,
    prepare: list[float],
    commit: list[float],
) -> float:
    out = KafkaSink(topic, bootstrap=bootstrap, group=f"bench-{uuid.uuid4().hex[:8]}", member="member-0")
    seq = 0

    def checkpoint() -> None:
        nonlocal seq
        seq += 1
        t0 = time.perf_counter()
        out.drain()
        out.checkpoint(seq)
        t1 = time.perf_counter()
        out.notify_checkpoint_complete(seq)
        prepare.append(t1 - t0)
        commit.append(time.perf_counter() - t1)

    try:
        out.reset_to_initial_state()  # as the join's first reset: fences the ids, creates nothing
        started = time.perf_counter()
        due = started + period_s
        for i in range(0, len(batch), size):
            out.process_batch(batch[i : i + size])
            if time.perf_counter() >= due:
                checkpoint()
                due += period_s
        checkpoint()
        return time.perf_counter() - started
    finally:
        out.close()


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(bootstrap: str, args: argparse.Namespace) -> dict[str, object]:
    batch = records(args.messages)
    rates: dict[str, list[float]] = {"idempotent": [], "sink": []}
    ratios: list[float] = []
    prepare: list[float] = []
    commit: list[float] = []
    last_topic = ""
    for trial in range(args.trials):
        order = ["idempotent", "sink"] if trial % 2 == 0 else ["sink", "idempotent"]
        took: dict[str, float] = {}
        for system in order:
            topic = create_topic(bootstrap, f"bench-sink-{uuid.uuid4().hex[:8]}", args.partitions)
            if system == "idempotent":
                took[system] = idempotent(bootstrap, topic, batch)
            else:
                took[system] = sink(bootstrap, topic, batch, args.batch, args.period, prepare, commit)
                last_topic = topic
            rates[system].append(args.messages / took[system])
        ratios.append(took["idempotent"] / took["sink"])
        print(f"trial {trial}: " + ", ".join(f"{s} {args.messages / took[s]:,.0f} records/s" for s in order))
    settings = admin_settings(bootstrap, {}, request_timeout_ms=30_000, client_id="bench-sink")
    reads = [read_committed(settings, last_topic, p) for p in range(args.partitions)]
    written = sum(len(r.records) for r in reads)
    still_open = [t for r in reads for t in r.open_transactions]
    if written != args.messages or still_open:
        raise RuntimeError(f"the last sink trial committed {written} of {args.messages} records; open: {still_open}")
    result = {
        "messages": args.messages,
        "trials": args.trials,
        "period_s": args.period,
        "batch": args.batch,
        "load_1min": os.getloadavg()[0],
        "idempotent_records_per_s": statistics.median(rates["idempotent"]),
        "sink_records_per_s": statistics.median(rates["sink"]),
        "sink_ratio": statistics.median(ratios),
        "checkpoints": len(prepare),
        "prepare_ms_p50": 1000 * quantile(prepare, 0.5),
        "prepare_ms_p99": 1000 * quantile(prepare, 0.99),
        "commit_ms_p50": 1000 * quantile(commit, 0.5),
        "commit_ms_p99": 1000 * quantile(commit, 0.99),
    }
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--batch", type=int, default=500, help="records per process_batch call")
    ap.add_argument("--period", type=float, default=1.0, help="seconds between checkpoints")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "kafka_sink.json"))
    args = ap.parse_args()
    if args.bootstrap:
        result = run(args.bootstrap, args)
    else:
        with EmbeddedBroker() as broker:
            result = run(broker.bootstrap, args)
    print(json.dumps(result, indent=2))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
