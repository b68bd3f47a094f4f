"""Reproduce the librdkafka operator skipping records at a fresh start (a fixed defect: the check stays).

A fresh group (start position beginning, ``auto.offset.reset`` latest) reads a
topic of ``N`` records with a drain + checkpoint every 100 ms, ``--attempts``
times, each with a new operator. An attempt that makes no progress for 15 s
while it has submitted fewer than ``N`` records is a skip: the script prints
the adapter's positions, the offset manager's offsets (what the drain commits)
and the high watermarks, which then all sit at the log end. Seen at load 7-11
(1 of 2 attempts), not at load 3-4 (0 of 21): load the machine meanwhile.

Cause (librdkafka 2.16), fixed by assigning at absolute offsets
(``OffsetLookups.start_offsets`` in ``cr_consumer/kafka/librdkafka/offsets.py``): a partition assigned without an offset
(held by the operator until its start is resolved) starts librdkafka's own
``auto.offset.reset`` lookup (ListOffsets END); the operator's seek after the
resume bumps the partition's version, the lookup's answer arrives outdated, and
librdkafka's handling of an outdated answer (``rd_kafka_toppar_offset_retry``)
puts the partition back into the offset-query state with a 500 ms timer for the
same logical offset: the timer's new lookup then moves the fetch to the end.

    .venv/bin/python bench/librdkafka_start_race.py --messages 2000000 --attempts 6
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_operator
from baseline import produce_fixed

from cr_consumer import ConsumerOperator
from cr_consumer.kafka.client import KafkaClient
from cr_consumer.operator.region import RegionPermit

#: No progress for this long (with records left) counts as a skip.
STALL_S = 15.0


def attempt(bootstrap: str, topic: str, n: int) -> bool:
    """One fresh operator; True when it skipped records (printed)."""
    counter = bench_operator.Counter(n)
    permit = RegionPermit()
    op = ConsumerOperator(bench_operator._config(bootstrap, topic), submit_batch=counter.batch, permit=permit)
    stop = threading.Event()

    def cycles() -> None:
        seq = 0
        while not stop.wait(0.1):
            if counter.first is None:
                continue
            seq += 1
            permit.block(30)
            op.drain()
            op.checkpoint(seq)
            permit.unblock()

    op.start()
    driver = threading.Thread(target=cycles, daemon=True)
    driver.start()
    try:
        last, last_at = -1, time.monotonic()
        while not counter.done.wait(1.0):
            if counter.seen != last:
                last, last_at = counter.seen, time.monotonic()
            elif time.monotonic() - last_at > STALL_S:

                def probe(client: KafkaClient) -> dict:
                    assigned = sorted(client.assignment())
                    return {
                        "positions": {tp.partition: client.position(tp, 10000) for tp in assigned},
                        "highwater": {tp.partition: client.highwater(tp) for tp in assigned},
                    }

                seen = op.events.call(probe, 10, "probe")
                print(
                    f"SKIPPED: submitted {counter.seen} of {n}; offsets "
                    f"{ {tp.partition: o for tp, o in op.offsets.snapshot().items()} }; {seen}; "
                    f"load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
                return True
        print(f"ok: submitted {counter.seen} of {n}; load {os.getloadavg()[0]:.1f}", flush=True)
        return False
    finally:
        stop.set()
        driver.join(10)
        op.close()


def main() -> None:
    from cr_consumer.testing.broker import bootstrap_or_embedded
    from cr_consumer.testing.kafka_util import create_topic, unique_name

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--messages", type=int, default=2_000_000)
    ap.add_argument("--attempts", type=int, default=6)
    args = ap.parse_args()
    bench_operator.CLIENT = "librdkafka"
    with bootstrap_or_embedded(args.bootstrap) as bootstrap:
        topic = create_topic(bootstrap, unique_name("start-race"), 4)
        produce_fixed(bootstrap, topic, args.messages)
        gc.collect()
        gc.freeze()
        skipped = sum(attempt(bootstrap, topic, args.messages) for _ in range(args.attempts))
    print(f"{skipped} of {args.attempts} attempts skipped records")


if __name__ == "__main__":
    main()
