"""The partitioned aggregate (tables on a Kafka changelog) against the member-local keyed
aggregate (the whole table in the checkpoint, kept in memory and on the member's disk).

Each trial runs both, in an order that alternates from trial to trial, over the same input:
``--checkpoints`` intervals of ``--records`` records each (4 input partitions, batches of 500 as
the source's process thread hands them), every interval updating exactly ``--changed`` distinct
keys of a pool of ``--keys`` (each record adds its amount to an order count and a total: the
user's update function does work), then a checkpoint as the member runtime runs it:

* ``memory``: ``checkpoint(seq)`` (the whole table as JSON, what the member writes to its disk);
* ``changelog``: ``drain()`` + ``checkpoint(seq)`` (the changed keys written to the changelog as
  change sets in the interval's transaction, flushed, prepared: the region's stopped flow), then
  ``notify_checkpoint_complete(seq)`` (the commit, after the RESUME). A partition due for a base
  (its changes since the last one outnumber its keys) writes it at its next record, inside the
  timed processing.

Figures: records/s of each over the whole run (processing, checkpoints and commits), the
changelog's ratio to memory (median of the per-trial ratios), the stop of the flow per
checkpoint (p50, p99 over every checkpoint of every trial), the restore rate (a member with no
state restores every partition's table from the changelog, from its pointer: changes, a key's
state or delete, per second), and the changelog's bytes per changed key against the key's and
state's own JSON bytes. Starts its own broker
unless ``--bootstrap`` is given.

    .venv/bin/python bench/bench_partitioned_state.py --trials 3
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import uuid

from coordinator.kafka.raw_batches import read_committed
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.runtime.pipeline.operators import KeyedAggregate, Operator
from cr_consumer.runtime.pipeline.partitioned_aggregate import PartitionedAggregate
from cr_consumer.runtime.pipeline.records import Record
from cr_consumer.state.changelog import decode_changes
from cr_consumer.testing.broker import EmbeddedBroker
from cr_consumer.testing.kafka_util import create_topic

PARTITIONS = 4
BATCH = 500


def add(state: dict, record: Record) -> dict:
    return {"orders": state["orders"] + 1, "cents": state["cents"] + record.value}


def initial() -> dict:
    return {"orders": 0, "cents": 0}


def intervals(args: argparse.Namespace, topic: str) -> list[list[list[Record]]]:
    """Per interval, its batches: every record of a key in the key's partition (key hash)."""
    rng = random.Random(7)
    offsets = [0] * PARTITIONS
    out = []
    for i in range(args.checkpoints):
        first = (i * args.changed) % args.keys
        changed = [f"customer-{(first + j) % args.keys}" for j in range(args.changed)]
        by_partition: list[list[Record]] = [[] for _ in range(PARTITIONS)]
        for n in range(args.records):
            key = changed[n % args.changed] if n < args.changed else rng.choice(changed)
            p = hash(key) % PARTITIONS
            by_partition[p].append(Record(topic, p, offsets[p], key=key, value=rng.randrange(1, 10_000)))
            offsets[p] += 1
        out.append([recs[k : k + BATCH] for recs in by_partition for k in range(0, len(recs), BATCH)])
    return out


def run(op: Operator, work: list[list[list[Record]]], changelog: bool) -> tuple[float, list[float]]:
    stops = []
    t0 = time.perf_counter()
    for seq, batches in enumerate(work, start=1):
        for batch in batches:
            op.process_batch(batch)
        s0 = time.perf_counter()
        op.drain()
        op.checkpoint(seq)
        stops.append(time.perf_counter() - s0)
        if changelog:
            op.notify_checkpoint_complete(seq)  # type: ignore[attr-defined]
    return time.perf_counter() - t0, stops


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--checkpoints", type=int, default=10)
    parser.add_argument("--records", type=int, default=20_000, help="records per interval")
    parser.add_argument("--changed", type=int, default=10_000, help="distinct keys changed per interval")
    parser.add_argument("--keys", type=int, default=100_000, help="key pool")
    args = parser.parse_args()
    broker = None if args.bootstrap else EmbeddedBroker().start()
    bootstrap = args.bootstrap or broker.bootstrap  # type: ignore[union-attr]
    try:
        ratios, rates, stops, restore_rates, byte_ratios = (
            [],
            {"memory": [], "changelog": []},
            {"memory": [], "changelog": []},
            [],
            [],
        )
        for trial in range(args.trials):
            topic = create_topic(bootstrap, f"bench-state-{uuid.uuid4().hex[:8]}", PARTITIONS)
            work = intervals(args, topic)
            n = args.checkpoints * args.records
            timed: dict[str, float] = {}
            group = f"bench-state-{uuid.uuid4().hex[:8]}"
            order = ["memory", "changelog"] if trial % 2 == 0 else ["changelog", "memory"]
            for kind in order:
                if kind == "memory":
                    op: Operator = KeyedAggregate(lambda r: r.key, add, initial, name="totals")
                    op.reset_to_initial_state()
                    elapsed, kind_stops = run(op, work, False)
                else:
                    agg = PartitionedAggregate(
                        lambda r: r.key,
                        add,
                        initial,
                        topic=topic,
                        bootstrap=bootstrap,
                        group=group,
                        member="m0",
                        name="totals",
                    )
                    agg.reset_to_initial_state()
                    elapsed, kind_stops = run(agg, work, True)
                    agg.close()
                timed[kind] = elapsed
                rates[kind].append(n / elapsed)
                stops[kind].extend(kind_stops)
            ratios.append(timed["memory"] / timed["changelog"])
            fresh = PartitionedAggregate(
                lambda r: r.key, add, initial, topic=topic, bootstrap=bootstrap, group=group, member="m1", name="totals"
            )
            fresh.reset(args.checkpoints, b"")
            r0 = time.perf_counter()
            keys = sum(len(fresh.store.table(p)) for p in range(PARTITIONS))
            restore_s = time.perf_counter() - r0
            restore_rates.append(fresh.store.restored_changes / restore_s)
            settings = admin_settings(bootstrap, {}, request_timeout_ms=30_000, client_id="bench-state")
            stored = own = 0
            for p in range(PARTITIONS):
                for rec in read_committed(settings, fresh.store.changelog, p).records:
                    stored += len(rec.value or b"") + sum(len(h) + len(v or b"") for h, v in rec.headers)
                    change_set = decode_changes(p, rec.offset, rec.key, rec.value, rec.headers)
                    own += sum(len(json.dumps(k)) + len(json.dumps(v)) for k, _, v in change_set.changes)
            byte_ratios.append(stored / own)
            fresh.close()
            print(
                f"trial {trial}: memory {rates['memory'][-1]:,.0f} rec/s, changelog {rates['changelog'][-1]:,.0f} rec/s "
                f"({ratios[-1]:.2f}x); restore {fresh.store.restored_changes} changes of {keys} keys in {restore_s:.2f}s",
                flush=True,
            )
        result = {
            "records_per_interval": args.records,
            "changed_keys_per_interval": args.changed,
            "checkpoints_per_trial": args.checkpoints,
            "memory_rec_s": statistics.median(rates["memory"]),
            "changelog_rec_s": statistics.median(rates["changelog"]),
            "ratio_median": statistics.median(ratios),
            "stop_ms": {
                k: {"p50": 1000 * pct(v, 0.5), "p99": 1000 * pct(v, 0.99), "n": len(v)} for k, v in stops.items()
            },
            "restore_changes_s": statistics.median(restore_rates),
            "changelog_bytes_per_own_bytes": statistics.median(byte_ratios),
        }
        print(json.dumps(result, indent=2))
    finally:
        if broker is not None:
            broker.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
