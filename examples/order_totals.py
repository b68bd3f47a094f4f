"""Order totals: a keyed stateful aggregate whose state follows its input partition.

Input records are JSON orders ``{"customer": "c17", "amount": 12.5}`` keyed by customer (the
producer's default partitioner on the key, :func:`produce_orders`): all of a customer's orders
are in one partition. Pipeline: Kafka source (``--param topic=orders``, from the beginning) ->
map (parse JSON; undecodable records become ``None``) -> filter (drop them) -> partitioned
aggregate (per customer: order count and total amount in cents, an integer, so sums are exact)
-> exactly-once file sink.

The aggregate keeps one table per input partition in a changelog topic on Kafka, restored by
whichever member owns the partition after a kill, a rebalance or a member gone for good. So
every emitted total is the customer's complete total so far, and a customer's last emitted total
(:func:`customer_totals`: the output row of its highest input offset) equals the total computed
directly from the input.

Run it::

    .venv/bin/python examples/order_totals.py --orders 20000 --members 3 --kill
    crkafka run examples/order_totals.py --members 3 --bootstrap HOST:9092 --param topic=orders
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

from cr_consumer.runtime import KafkaSource, Pipeline, replace


def parse(record):
    try:
        order = json.loads(record.value)
        return replace(record, key=str(order["customer"]), value=round(float(order["amount"]) * 100))
    except (ValueError, KeyError, TypeError):
        return replace(record, key=None, value=None)


def add(state, record):
    return {"orders": state["orders"] + 1, "cents": state["cents"] + record.value}


def build(ctx) -> Pipeline:
    topic = ctx.param("topic", "orders")
    totals = ctx.partitioned_aggregate(
        lambda r: r.key, add, lambda: {"orders": 0, "cents": 0}, topic=topic, name="totals"
    )
    return (
        Pipeline(KafkaSource(topics=[topic], options={"start_position": "earliest"}))
        .map(parse, name="parse")
        .filter(lambda r: r.key is not None, name="valid")
        .then(totals)
        .sink(ctx.file_sink())
    )


def customer_totals(out_dir: str | Path) -> dict[str, dict]:
    """Customer -> {"orders", "cents"}: its last emitted total, the published row of its highest
    input offset (a customer's orders are all in one partition)."""
    last: dict[str, tuple[int, dict]] = {}
    for path in sorted(Path(out_dir).glob("*.jsonl")):
        for line in path.read_text().splitlines():
            doc = json.loads(line)
            seen = last.get(doc["key"])
            if seen is None or doc["offset"] > seen[0]:
                last[doc["key"]] = (doc["offset"], doc["value"])
    return {customer: total for customer, (_, total) in last.items()}


def produce_orders(bootstrap: str, topic: str, orders: list[dict]) -> None:
    """Each order as JSON, keyed by its customer (the default partitioner places it)."""
    from cr_consumer.testing.kafka_util import producer

    p = producer(bootstrap)
    try:
        for o in orders:
            p.send(topic, key=o["customer"].encode(), value=json.dumps(o).encode())
        p.flush(60)
    finally:
        p.close(10)


def make_orders(n: int, customers: int = 50, seed: int = 11) -> list[dict]:
    rng = random.Random(seed)
    return [{"customer": f"c{rng.randrange(customers)}", "amount": rng.randrange(1, 100000) / 100} for _ in range(n)]


def expected_totals(orders: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for o in orders:
        t = out.setdefault(o["customer"], {"orders": 0, "cents": 0})
        t["orders"] += 1
        t["cents"] += round(o["amount"] * 100)
    return out


def run(orders_n: int, members: int, partitions: int, bootstrap: str | None, kill: bool) -> bool:
    """Produce ``orders_n`` orders keyed by customer, run the region until every customer's last
    emitted total equals the total computed from the orders (killing one member -9 half way if
    ``kill``); True when they are equal."""
    from cr_consumer.runtime.runner.drive import run_until_done
    from cr_consumer.runtime.runner.region_runner import run_pipeline
    from cr_consumer.runtime.runner.region_status import RegionFailed
    from cr_consumer.testing.broker import bootstrap_or_embedded
    from cr_consumer.testing.kafka_util import create_topic, unique_name

    orders = make_orders(orders_n)
    expected = expected_totals(orders)
    work = Path(tempfile.mkdtemp(prefix="order-totals-"))
    with bootstrap_or_embedded(bootstrap) as (address, _):
        topic = create_topic(address, unique_name("orders"), partitions)
        produce_orders(address, topic, orders)
        region = run_pipeline(
            __file__,
            members=members,
            bootstrap=address,
            output_dir=work / "out",
            state_dir=work / "state",
            params={"topic": topic},
            kafka={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000},
        )
        out = work / "out"
        try:
            elapsed = run_until_done(
                region,
                done=lambda: customer_totals(out) == expected,
                progress=lambda: sum(t["orders"] for t in customer_totals(out).values()) / orders_n,
                kill_half_way=kill,
            )
        except (RegionFailed, TimeoutError) as exc:
            print(exc, file=sys.stderr)
            return False
        else:
            print(
                f"{orders_n} orders, {len(expected)} customers: every customer's last emitted total exact "
                f"({elapsed:.1f}s); output in {out}"
            )
        finally:
            region.stop()
    return True


def main() -> int:  # pragma: no cover - a demo script
    parser = argparse.ArgumentParser(
        description="order totals with a keyed aggregate whose state follows its partition"
    )
    parser.add_argument("--orders", type=int, default=20000)
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--bootstrap")
    parser.add_argument("--kill", action="store_true", help="kill -9 one member half way")
    args = parser.parse_args()
    return 0 if run(args.orders, args.members, args.partitions, args.bootstrap, args.kill) else 1


if __name__ == "__main__":
    sys.exit(main())
