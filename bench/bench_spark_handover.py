"""The handover between two Spark applications of one consumer group, in figures.

Each try runs ``examples/spark_handover.py``'s scenario (Spark's parquet sink,
local[1] per application, a UDF of 2 ms per record, 150 records/s produced
throughout, default consumer settings): the first application starts, runs
alone for 10 s, the second joins with ``startingOffsets=committed``, then the
first is stopped for good by SIGTERM with a batch in flight. Per try, with its
baseline measured in the same try:

1. the second application's time from its process start to its first
   committed rows, against the first application's (which joins an empty
   group): the cost of joining a running group;
2. the first application's longest time without a committed batch between the
   second's start and its own stop, against its median time between two
   committed batches while alone: the stall the rebalance causes;
3. the verdict: duplicates, missing records, and whether a batch was in flight.

    .venv/bin/python bench/bench_spark_handover.py --tries 5 [--faults]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_example():
    spec = importlib.util.spec_from_file_location("spark_handover", ROOT / "examples" / "spark_handover.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tries", type=int, default=5)
    parser.add_argument("--faults", action="store_true", help="the example's three applications, three stops")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args(argv)
    from coordinator.launcher import CoordinatorProcess
    from cr_consumer.testing.broker import ENV_BOOTSTRAP, EmbeddedBroker
    from cr_consumer.testing.kafka_util import create_topic, unique_name

    example = load_example()
    base = Path(args.workdir or tempfile.mkdtemp(prefix="bench-handover-"))
    base.mkdir(parents=True, exist_ok=True)
    results = []
    given = os.environ.get(ENV_BOOTSTRAP)
    with (
        example.GivenBroker(given) if given else EmbeddedBroker(log_path=base / "broker.log") as broker,
        CoordinatorProcess(state_dir=base / "coordinator") as coord,
    ):
        for i in range(args.tries):
            load = os.getloadavg()[0]
            ns = types.SimpleNamespace(
                bootstrap=broker.bootstrap,
                coordinator=coord.endpoint,
                topic=create_topic(broker.bootstrap, unique_name("bench-handover"), 4),
                group=unique_name("bench-handover"),
                rate=150.0,
                row_delay_ms=2.0,
                max_offsets_per_trigger=600,
            )
            figures = example.run_scenario(ns, base / f"try-{i}", faults=args.faults, alone_s=10.0)
            figures["load_before"] = round(load, 1)
            results.append(figures)
            print(json.dumps(figures), flush=True)

    def summary(key: str) -> str:
        values = [r[key] for r in results if r.get(key) is not None]
        return f"median {statistics.median(values):.1f} s (min {min(values):.1f}, max {max(values):.1f})"

    print(
        f"tries: {len(results)}, exactly once in {sum(r['ok'] for r in results)}, "
        f"a batch in flight at the stop in {sum(bool(r['giver_in_flight_at_stop']) for r in results)}"
    )
    for key in ("second_first_rows_s", "first_first_rows_s", "first_longest_stall_s", "first_median_gap_s"):
        print(f"{key}: {summary(key)}")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
