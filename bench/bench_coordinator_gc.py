"""The two costs the coordinator's loop thread no longer pays, each measured alone.

1. Counting a request: ``requests.labels(type).inc()`` (what the dispatcher did
   per request) against ``CoordinatorMetrics.count_request(type)`` (the cached
   child), CPU per call, alternated ``--trials`` times in this process.
2. A full collection of the coordinator's heap: a fresh process imports
   everything ``cr-coordinator`` imports, builds its metrics and ``--state``
   state-like dicts (one per group, 10 offsets each), then times
   ``gc.collect()`` five times, before and after ``gc.freeze()`` (what
   ``--gc-policy freeze`` does once the state is loaded). A full collection is
   what the loop thread stalls for when the collector's oldest generation
   runs; the figures are the stall per collection (wall time, which the
   machine's load inflates) and its CPU time, median of the five.

    .venv/bin/python bench/bench_coordinator_gc.py [--trials 15] [--state 0,20000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HEAP = r"""
import gc, json, sys, time
import coordinator.cli.main  # everything the coordinator process imports
from coordinator.server.metrics import CoordinatorMetrics
metrics = CoordinatorMetrics()
state = [{"group": f"g{i}", "offsets": {f"t-{j}": j for j in range(10)}} for i in range(int(sys.argv[1]))]

def full_ms():
    t0, c0 = time.perf_counter(), time.thread_time()
    gc.collect()
    return (time.perf_counter() - t0) * 1e3, (time.thread_time() - c0) * 1e3

gc.collect()
tracked = len(gc.get_objects())
before = [full_ms() for _ in range(5)]
gc.freeze()
after = [full_ms() for _ in range(5)]
print(json.dumps({"tracked": tracked, "not_frozen": before, "frozen": after}))
"""


def label_costs(trials: int) -> dict:
    from coordinator.server.metrics import CoordinatorMetrics

    metrics = CoordinatorMetrics()
    types = ["merge_checkpoint", "ping", "heartbeat", "register"] * 250

    def direct() -> None:
        for t in types:
            metrics.requests.labels(t).inc()

    def cached() -> None:
        for t in types:
            metrics.count_request(t)

    runs: dict[str, list[float]] = {"labels().inc()": [], "count_request()": []}
    for _ in range(trials):
        for name, fn in (("labels().inc()", direct), ("count_request()", cached)):
            c0 = time.process_time()
            for _ in range(20):
                fn()
            runs[name].append(1e6 * (time.process_time() - c0) / (20 * len(types)))
    return {name: round(statistics.median(v), 3) for name, v in runs.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=15)
    ap.add_argument("--state", default="0,20000", help="state dicts in the heap, per run (comma-separated)")
    args = ap.parse_args()
    out: dict = {"count_request_us": label_costs(args.trials)}
    print(f"counting one request, CPU us: {out['count_request_us']}", flush=True)
    for n in [int(x) for x in args.state.split(",")]:
        done = subprocess.run(
            [sys.executable, "-c", HEAP, str(n)], capture_output=True, text=True, timeout=300, check=True, cwd=ROOT
        )
        r = json.loads(done.stdout)
        out[f"state_{n}"] = {
            "tracked_objects": r["tracked"],
            "full_collection_wall_ms": round(statistics.median(w for w, _ in r["not_frozen"]), 2),
            "full_collection_cpu_ms": round(statistics.median(c for _, c in r["not_frozen"]), 2),
            "after_freeze_wall_ms": round(statistics.median(w for w, _ in r["frozen"]), 3),
            "after_freeze_cpu_ms": round(statistics.median(c for _, c in r["frozen"]), 3),
        }
        print(f"state {n}: {r['tracked']} tracked objects; a full collection {out[f'state_{n}']}", flush=True)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
