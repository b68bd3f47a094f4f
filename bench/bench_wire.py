"""Cost of one large control-variable request on the coordinator's request path, no broker.

A ``put_initial_offsets`` of N entries (default 60,000, about 1.4 MB of JSON) goes
through the steps the server runs for it: envelope decode (UTF-8, JSON, nesting,
surrogates, envelope fields), message validation, and the store's put-if-absent
with its log write and fsync. Baseline, in the same run: ``json.loads`` of the same
frame (the least any JSON request path can do). Reported: median seconds of each
step over ``--trials`` and the whole path as a ratio to the baseline.

    .venv/bin/python bench/bench_wire.py [--entries 60000] [--trials 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coordinator.protocol.wire import envelope, protocol
from coordinator.store.state_store import StateStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=60_000)
    parser.add_argument("--trials", type=int, default=7)
    args = parser.parse_args()
    offsets = {(f"topic-{i % 7}", i): i for i in range(args.entries)}
    frame = envelope.encode(
        "put_initial_offsets", protocol.PutInitialOffsets(group="g", offsets=offsets).to_body(), "r"
    )
    steps: dict[str, list[float]] = {"baseline json.loads": [], "decode": [], "validate": [], "store+fsync": []}
    with tempfile.TemporaryDirectory() as tmp:
        for trial in range(args.trials):
            t0 = time.perf_counter()
            json.loads(frame)
            t1 = time.perf_counter()
            env = envelope.decode(frame)
            t2 = time.perf_counter()
            msg = protocol.PutInitialOffsets.from_body(env.body)
            t3 = time.perf_counter()
            store = StateStore(Path(tmp) / str(trial))
            store.load()
            store.put_initial_offsets(msg.group, msg.offsets)
            store.sync()
            t4 = time.perf_counter()
            store.close()
            for name, value in zip(steps, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                steps[name].append(value)
    medians = {name: statistics.median(v) for name, v in steps.items()}
    print(f"put_initial_offsets of {args.entries:,} entries ({len(frame):,} bytes), median of {args.trials}:")
    for name, value in medians.items():
        print(f"  {name:<22} {value * 1000:8.1f} ms")
    path = medians["decode"] + medians["validate"] + medians["store+fsync"]
    print(f"  request path / json.loads = {path / medians['baseline json.loads']:.1f}x")


if __name__ == "__main__":
    main()
