"""Both KafkaClient adapters against a bare kafka-python loop, same per-record work.

One topic of ``--messages`` records of 100 bytes over 4 partitions is produced
once; each trial then reads all of it with a fresh group per system, in an
order that alternates from trial to trial:

* ``bare-kafka-python``: the baseline (bench/baseline.py, a KafkaConsumer poll loop);
* ``bare-confluent-kafka``: a bare confluent-kafka ``consume`` loop (what the
  librdkafka adapter can reach at best);
* ``client-kafka-python`` / ``client-librdkafka``: ``make_client(kind).poll``
  through the seam, which hands out :class:`KafkaRecord` objects.

Every system does the same work per record: a dict update keyed by
(partition, offset bucket). The clock runs from the first record returned to
the last, so the group join is not counted. The figures are the median of the
trials; ratios are against ``bare-kafka-python``.

    .venv/bin/python bench/bench_clients.py --messages 1000000 --trials 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from baseline import bare_poll_loop, produce_fixed

from cr_consumer.kafka.client import ClientKind
from cr_consumer.kafka.factory import make_client
from cr_consumer.testing.broker import bootstrap_or_embedded
from cr_consumer.testing.kafka_util import create_topic, unique_name

#: Bound on one measurement so a stalled broker fails the benchmark.
RUN_TIMEOUT_S = 300.0
MAX_RECORDS = 500


class Work:
    """The per-record work: one dict update."""

    def __init__(self) -> None:
        self.bytes_per_key: dict[tuple[int, int], int] = {}

    def __call__(self, partition: int, offset: int, value: bytes) -> None:
        key = (partition, offset & 1023)
        self.bytes_per_key[key] = self.bytes_per_key.get(key, 0) + len(value)


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
    return {"records": seen, "seconds": seconds, "records_per_s": seen / seconds,
            "cpu_s": time.process_time() - cpu_first}


def bare_kafka_python(bootstrap: str, topic: str, n: int) -> dict:
    work = Work()
    return bare_poll_loop(bootstrap, topic, n, max_poll_records=MAX_RECORDS,
                          on_record=lambda r: work(r.partition, r.offset, r.value))


def bare_confluent(bootstrap: str, topic: str, n: int) -> dict:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-ck-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
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


def through_client(kind: ClientKind) -> Callable[[str, str, int], dict]:
    def run(bootstrap: str, topic: str, n: int) -> dict:
        client = make_client(kind, {"bootstrap.servers": bootstrap, "group.id": f"bench-{kind.value}-{uuid.uuid4().hex[:8]}",
                                    "auto.offset.reset": "earliest"})
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
    "client-librdkafka": through_client(ClientKind.LIBRDKAFKA),
}


def summarize(runs: dict[str, list[dict]]) -> dict[str, dict]:
    """Medians per system, and two ratios against the bare kafka-python loop:
    records/s (wall clock; on a loaded machine the broker and other processes
    weigh in) and CPU seconds of this process per run (bare / system: how much
    less Python work the system does for the same records)."""
    def median(name: str, field: str) -> float:
        return statistics.median(r[field] for r in runs[name])

    base_rate, base_cpu = median("bare-kafka-python", "records_per_s"), median("bare-kafka-python", "cpu_s")
    return {name: {"median_records_per_s": round(median(name, "records_per_s")),
                   "median_cpu_s": round(median(name, "cpu_s"), 2),
                   "vs_bare_kafka_python": round(median(name, "records_per_s") / base_rate, 2),
                   "cpu_vs_bare_kafka_python": round(base_cpu / median(name, "cpu_s"), 2)}
            for name in runs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "clients.json"))
    args = ap.parse_args()
    runs: dict[str, list[dict]] = {name: [] for name in SYSTEMS}
    with bootstrap_or_embedded(args.bootstrap) as bootstrap:
        topic = create_topic(bootstrap, unique_name("bench-clients"), args.partitions)
        produce_fixed(bootstrap, topic, args.messages)
        names = list(SYSTEMS)
        for trial in range(args.trials):
            order = names if trial % 2 == 0 else names[::-1]
            for name in order:
                result = SYSTEMS[name](bootstrap, topic, args.messages)
                runs[name].append(result)
                print(f"trial {trial + 1} {name}: {result['records_per_s']:,.0f} records/s "
                      f"(cpu {result['cpu_s']:.2f} s)", flush=True)
    summary = summarize(runs)
    doc = {"version": 1, "messages": args.messages, "value_bytes": 100, "partitions": args.partitions,
           "trials": args.trials, "work": "one dict update per record", "summary": summary, "runs": runs}
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
