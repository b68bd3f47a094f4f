"""The Bytewax side of bench/bench_clients.py (``--bytewax-python``): run in a
separate virtual environment that has bytewax 0.21 and confluent-kafka (never a
dependency of this project)::

    python3 -m venv /tmp/bytewax-venv
    /tmp/bytewax-venv/bin/pip install 'bytewax==0.21.*' confluent-kafka

One dataflow, one worker: Kafka input (every partition of the topic from the
beginning, no tail: the flow ends at the end of the input; Bytewax assigns the
partitions itself: no consumer group, no commits), the same per-record work as
the other systems (a dict update keyed by (partition, offset bucket)), a sink
that discards, and recovery snapshots every second (``--snapshot-s``; a SQLite
recovery store in a temporary directory). Prints one JSON line: records,
seconds from the first record to the last, records/s, CPU seconds over that
window.

    /tmp/bytewax-venv/bin/python bench/bytewax_flow.py --bootstrap HOST:PORT --topic T --messages N
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from datetime import timedelta

import bytewax.operators as op
from bytewax._bytewax import init_db_dir, run_main
from bytewax.connectors.kafka import KafkaSource
from bytewax.dataflow import Dataflow
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from bytewax.recovery import RecoveryConfig


class _Discard(StatelessSinkPartition):
    def write_batch(self, items) -> None:
        pass


class DiscardSink(DynamicSink):
    def build(self, step_id, worker_index, worker_count):
        return _Discard()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--messages", type=int, required=True)
    ap.add_argument("--snapshot-s", type=float, default=1.0)
    args = ap.parse_args()
    n = args.messages
    bytes_per_key: dict[tuple[int, int], int] = {}
    clock = {"seen": 0, "first": 0.0, "cpu_first": 0.0, "last": 0.0, "cpu_last": 0.0}

    def work(msg):
        key = (msg.partition, msg.offset & 1023)
        bytes_per_key[key] = bytes_per_key.get(key, 0) + len(msg.value)
        seen = clock["seen"] = clock["seen"] + 1
        if seen == 1:
            clock["first"], clock["cpu_first"] = time.perf_counter(), time.process_time()
        if seen == n:
            clock["last"], clock["cpu_last"] = time.perf_counter(), time.process_time()
        return seen

    flow = Dataflow("bench")
    source = KafkaSource([args.bootstrap], [args.topic], tail=False, batch_size=500)
    counted = op.map("work", op.input("in", flow, source), work)
    op.output("out", counted, DiscardSink())
    with tempfile.TemporaryDirectory(prefix="bench-bytewax-") as db:
        init_db_dir(db, 1)
        run_main(flow, epoch_interval=timedelta(seconds=args.snapshot_s), recovery_config=RecoveryConfig(db))
    seconds = clock["last"] - clock["first"]
    print(
        json.dumps(
            {
                "records": clock["seen"],
                "seconds": seconds,
                "records_per_s": clock["seen"] / seconds,
                "cpu_s": clock["cpu_last"] - clock["cpu_first"],
            }
        )
    )


if __name__ == "__main__":
    main()
