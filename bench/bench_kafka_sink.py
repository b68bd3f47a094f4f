"""The exactly-once Kafka sink against a plain idempotent kafka-python producer loop.

Each trial writes the same ``--messages`` input records of 100 bytes (keyed, 4 partitions)
twice, in an order that alternates from trial to trial, each record first passed through the
same user function (:func:`work`: the value parsed and a ~100-byte JSON value made of it, what
a map before a sink does; ``--no-work`` writes the input as it is):

* ``idempotent``: the baseline, a producer loop of the same client (``--client``: kafka-python's
  ``KafkaProducer(enable_idempotence=True, acks="all")``, or confluent-kafka's ``Producer`` with
  ``enable.idempotence`` and ``acks=all``, polled for room when its queue is full) of ``work``
  then send, and one flush at the end (its construction not timed);
* ``sink``: a ``KafkaSink`` on that client fed batches of ``--batch`` records (``process_batch``, as the
  source's process thread does), with a checkpoint every ``--period`` seconds as the member
  runtime runs it: ``drain()`` + ``checkpoint(seq)`` (flush, every send acknowledged, the
  transaction prepared: the region's stopped flow) then ``notify_checkpoint_complete(seq)``
  (the commit, after the RESUME), and a last checkpoint at the end. Its time includes the
  lazy start of its two transactional producers (``init_transactions``, about 0.2 s each).

Both use the producer's defaults otherwise (the sink's own defaults included), and each
``--property NAME=INT`` on both sides. The figures: records/s of each (median of the
trials), the sink's ratio to the baseline (median of the per-trial ratios), its CPU ratio
(the baseline's process CPU time, every thread of this process, over the sink's: steadier than
wall time on a shared machine), and over every
checkpoint of every trial the p50/p95/p99 of flush+prepare and of the commit; the defaults
give over 100 checkpoints at the sink's rate on the test broker, and the result says
``p99_meaningful: false`` when there were fewer (then read the p95). The committed output
of the last sink trial is checked with ``raw_batches.read_committed`` (every record, nothing
open). Starts its own broker unless ``--bootstrap`` is given.

    .venv/bin/python bench/bench_kafka_sink.py --messages 400000 --trials 3
    .venv/bin/python bench/bench_kafka_sink.py --client librdkafka --messages 2000000 --trials 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from kafka import KafkaProducer

from coordinator.kafka.raw_batches import read_committed
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.kafka.kafka_python.producer import producer_name
from cr_consumer.kafka.librdkafka.properties import librdkafka_producer_config
from cr_consumer.runtime.pipeline.kafka_sink import KafkaSink
from cr_consumer.runtime.pipeline.records import Record
from cr_consumer.testing.broker import EmbeddedBroker
from cr_consumer.testing.kafka_util import create_topic

#: Fewest checkpoints for which the p99 is reported as meaningful (one sample in a hundred).
MIN_CHECKPOINTS_P99 = 100


def records(n: int) -> list[Record]:
    return [
        Record("in", 0, i, None, b"k%d" % (i % 1000), b'{"id":%d,"reading":%d,"pad":"%s"}' % (i, i % 97, b"x" * 60))
        for i in range(n)
    ]


def work(r: Record) -> Record:
    """The user's map: parse the value, derive a field, encode it again (~100 bytes)."""
    doc = json.loads(r.value)
    doc["reading"] = doc["reading"] * 1.5
    return Record(r.topic, r.partition, r.offset, r.timestamp, r.key, json.dumps(doc).encode())


def identity(r: Record) -> Record:
    return r


def idempotent(
    bootstrap: str, topic: str, batch: list[Record], fn: Callable[[Record], Record], props: dict[str, int], client: str
) -> tuple[float, float]:
    if client == "librdkafka":
        return idempotent_librdkafka(bootstrap, topic, batch, fn, props)
    extra = {producer_name(k): v for k, v in props.items()}
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all", **extra)
    try:
        started, cpu = time.perf_counter(), time.process_time()
        for r in batch:
            out = fn(r)
            producer.send(topic, value=out.value, key=out.key)
        producer.flush(timeout=120)
        return time.perf_counter() - started, time.process_time() - cpu
    finally:
        producer.close(timeout=10)


def idempotent_librdkafka(
    bootstrap: str, topic: str, batch: list[Record], fn: Callable[[Record], Record], props: dict[str, int]
) -> tuple[float, float]:
    from confluent_kafka import Producer

    config = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", **props}
    producer = Producer({**librdkafka_producer_config(config), "bootstrap.servers": bootstrap})
    started, cpu = time.perf_counter(), time.process_time()
    for r in batch:
        out = fn(r)
        while True:
            try:
                producer.produce(topic, out.value, out.key)
                break
            except BufferError:
                producer.poll(0.005)
    left = producer.flush(120)
    if left:
        raise RuntimeError(f"{left} records unacknowledged")
    return time.perf_counter() - started, time.process_time() - cpu


def sink(
    bootstrap: str,
    topic: str,
    batch: list[Record],
    fn: Callable[[Record], Record],
    props: dict[str, int],
    size: int,
    period_s: float,
    prepare: list[float],
    commit: list[float],
    client: str,
) -> tuple[float, float]:
    group = f"bench-{uuid.uuid4().hex[:8]}"
    out = KafkaSink(topic, bootstrap=bootstrap, group=group, member="member-0", kafka=props, client=client)
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
        started, cpu = time.perf_counter(), time.process_time()
        due = started + period_s
        for i in range(0, len(batch), size):
            out.process_batch([fn(r) for r in batch[i : i + size]])
            if time.perf_counter() >= due:
                checkpoint()
                due += period_s
        checkpoint()
        return time.perf_counter() - started, time.process_time() - cpu
    finally:
        out.close()


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(bootstrap: str, args: argparse.Namespace) -> dict[str, object]:
    load_before = os.getloadavg()[0]
    batch = records(args.messages)
    fn = identity if args.no_work else work
    props = {k: int(v) for k, v in (item.split("=", 1) for item in args.property)}
    rates: dict[str, list[float]] = {"idempotent": [], "sink": []}
    ratios: list[float] = []
    cpu_ratios: list[float] = []
    prepare: list[float] = []
    commit: list[float] = []
    last_topic = ""
    for trial in range(args.trials):
        order = ["idempotent", "sink"] if trial % 2 == 0 else ["sink", "idempotent"]
        took: dict[str, float] = {}
        cpu: dict[str, float] = {}
        for system in order:
            topic = create_topic(bootstrap, f"bench-sink-{uuid.uuid4().hex[:8]}", args.partitions)
            if system == "idempotent":
                took[system], cpu[system] = idempotent(bootstrap, topic, batch, fn, props, args.client)
            else:
                took[system], cpu[system] = sink(
                    bootstrap, topic, batch, fn, props, args.batch, args.period, prepare, commit, args.client
                )
                last_topic = topic
            rates[system].append(args.messages / took[system])
        ratios.append(took["idempotent"] / took["sink"])
        cpu_ratios.append(cpu["idempotent"] / cpu["sink"])
        print(
            f"trial {trial}: "
            + ", ".join(
                f"{s} {args.messages / took[s]:,.0f} records/s {1e6 * cpu[s] / args.messages:.1f} us CPU" for s in order
            )
            + f"; ratio {ratios[-1]:.3f}, CPU ratio {cpu_ratios[-1]:.3f}",
            flush=True,
        )
    settings = admin_settings(bootstrap, {}, request_timeout_ms=30_000, client_id="bench-sink")
    reads = [read_committed(settings, last_topic, p) for p in range(args.partitions)]
    written = sum(len(r.records) for r in reads)
    still_open = [t for r in reads for t in r.open_transactions]
    if written != args.messages or still_open:
        raise RuntimeError(f"the last sink trial committed {written} of {args.messages} records; open: {still_open}")
    result = {
        "client": args.client,
        "messages": args.messages,
        "trials": args.trials,
        "period_s": args.period,
        "batch": args.batch,
        "work": not args.no_work,
        "properties": props,
        "load_1min_before": load_before,
        "load_1min_after": os.getloadavg()[0],
        "idempotent_records_per_s": statistics.median(rates["idempotent"]),
        "sink_records_per_s": statistics.median(rates["sink"]),
        "sink_ratio": statistics.median(ratios),
        "sink_ratios": ratios,
        "sink_cpu_ratio": statistics.median(cpu_ratios),
        "sink_cpu_ratios": cpu_ratios,
        "checkpoints": len(prepare),
        "p99_meaningful": len(prepare) >= MIN_CHECKPOINTS_P99,
        "prepare_ms_p50": 1000 * quantile(prepare, 0.5),
        "prepare_ms_p95": 1000 * quantile(prepare, 0.95),
        "prepare_ms_p99": 1000 * quantile(prepare, 0.99),
        "prepare_ms_max": 1000 * max(prepare),
        "commit_ms_p50": 1000 * quantile(commit, 0.5),
        "commit_ms_p95": 1000 * quantile(commit, 0.95),
        "commit_ms_p99": 1000 * quantile(commit, 0.99),
        "commit_ms_max": 1000 * max(commit),
    }
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--messages", type=int, default=400_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--batch", type=int, default=500, help="records per process_batch call")
    ap.add_argument("--period", type=float, default=1.0, help="seconds between checkpoints")
    ap.add_argument("--property", action="append", default=[], help="NAME=INT, a producer property given to both sides")
    ap.add_argument("--no-work", action="store_true", help="write the input records without the user's map")
    ap.add_argument("--client", choices=["kafka-python", "librdkafka"], default="kafka-python")
    ap.add_argument("--out", default=None, help="default: results/kafka_sink.json (kafka_sink_librdkafka.json)")
    args = ap.parse_args()
    if args.out is None:
        name = "kafka_sink.json" if args.client == "kafka-python" else "kafka_sink_librdkafka.json"
        args.out = str(Path(__file__).resolve().parent / "results" / name)
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
