"""The baseline every consumer-side benchmark compares against: a bare kafka-python poll loop.

One KafkaConsumer, subscribed with its own group, polls until it has seen
``n`` records; nothing else (no threads, no queue, no per-record work). The
clock runs from the first record returned to the n-th, so the group join is
not counted (the operator figures are timed the same way).

Reuse::

    from baseline import bare_poll_loop, produce_fixed
    rate = bare_poll_loop(bootstrap, topic, n)["records_per_s"]

or run it alone: ``.venv/bin/python bench/baseline.py --messages 200000``.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid

from kafka import KafkaConsumer

#: Bound on one measurement so a stalled broker fails the benchmark.
RUN_TIMEOUT_S = 300.0


def produce_fixed(bootstrap: str, topic: str, n: int, size: int = 100) -> None:
    """``n`` records of ``size`` bytes, round robin over the topic's partitions."""
    from cr_consumer.testing.kafka_util import produce

    payload = b"x" * size
    produce(bootstrap, topic, (payload for _ in range(n)))


def bare_poll_loop(
    bootstrap: str, topic: str, n: int, *, max_poll_records: int = 500, on_record=None, **config
) -> dict:
    """Poll until ``n`` records were seen; ``on_record(record)``, if given, is
    called for each record (the per-record work a callback would do)."""
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"bench-bare-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_records=max_poll_records,
        **config,
    )
    try:
        seen = 0
        first = None
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while seen < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"bare loop saw {seen} of {n} records in {RUN_TIMEOUT_S}s")
            batch = consumer.poll(timeout_ms=100, max_records=max_poll_records)
            if batch:
                if first is None:
                    first = time.perf_counter()
                    cpu_first = time.process_time()
                for records in batch.values():
                    seen += len(records)
                    if on_record is not None:
                        for record in records:
                            on_record(record)
        seconds = time.perf_counter() - first
        cpu_s = time.process_time() - cpu_first
    finally:
        consumer.close(autocommit=False)
    return {"records": seen, "seconds": seconds, "records_per_s": seen / seconds, "cpu_s": cpu_s}


def main() -> None:
    from cr_consumer.testing.broker import bootstrap_or_embedded
    from cr_consumer.testing.kafka_util import create_topic, unique_name

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=4)
    args = ap.parse_args()
    with bootstrap_or_embedded(args.bootstrap) as bootstrap:
        topic = create_topic(bootstrap, unique_name("bench-base"), args.partitions)
        produce_fixed(bootstrap, topic, args.messages)
        print(json.dumps(bare_poll_loop(bootstrap, topic, args.messages)))


if __name__ == "__main__":
    main()
