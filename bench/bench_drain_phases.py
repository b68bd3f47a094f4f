"""The drain's latency split into its phases, kafka-python and librdkafka in one run.

bench/bench_operator.py's drain measurement (a drain + checkpoint every
``--every`` seconds while one operator consumes, the permit blocked before each
drain) with timestamps taken inside the drain:

* ``pickup``: drain called -> its event runs on the event thread;
* ``to-commit``: -> the client's commit starts (librdkafka: on the adapter's
  worker thread; kafka-python: on the event thread itself);
* ``commit``: the commit call (the broker round trip and the library's threads);
* ``after``: commit returned -> the event is done (librdkafka: the event
  thread wakes up from the worker's future);
* ``total``: what bench_operator reports.

The clients run alternated (order reversed every round), each on its own group
over one topic; librdkafka reads ``--rd-messages`` (it is ~5x faster, so the
same number of records would give it few drains). The timestamps are taken by
wrapping the drain, the event thread's ``call`` and the clients' commit (this
script only).

    .venv/bin/python bench/bench_drain_phases.py --messages 1500000 --rd-messages 5000000 --rounds 2
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_operator  # noqa: E402
from baseline import produce_fixed  # noqa: E402

from cr_consumer.kafka import kafka_python_client, librdkafka_client  # noqa: E402
from cr_consumer.operator import event_thread, handlers  # noqa: E402

#: The timestamps of the drain in progress (t0 drain called, t1 event runs, t2 commit
#: starts, t3 commit returns, t4 event done, t5 drain returns) and of the drains done.
CURRENT: dict[str, float] = {}
DONE: list[dict[str, float]] = []
PHASES = (("pickup", "t0", "t1"), ("to-commit", "t1", "t2"), ("commit", "t2", "t3"), ("after", "t3", "t4"),
          ("total", "t0", "t5"))


def _instrument() -> None:
    drain = handlers.RegionHandlers.drain

    def timed_drain(self: handlers.RegionHandlers) -> None:
        CURRENT.clear()
        CURRENT["t0"] = time.perf_counter()
        drain(self)
        CURRENT["t5"] = time.perf_counter()
        DONE.append(dict(CURRENT))

    handlers.RegionHandlers.drain = timed_drain  # type: ignore[method-assign]

    call = event_thread.EventThread.call

    def timed_call(self: event_thread.EventThread, fn: Callable[[Any], Any], timeout: float, what: str) -> Any:
        if what != "drain":
            return call(self, fn, timeout, what)

        def wrapped(client: Any) -> Any:
            CURRENT["t1"] = time.perf_counter()
            try:
                return fn(client)
            finally:
                CURRENT["t4"] = time.perf_counter()

        return call(self, wrapped, timeout, what)

    event_thread.EventThread.call = timed_call  # type: ignore[method-assign]

    bounded = librdkafka_client.LibrdkafkaClient._bounded

    def timed_bounded(self: Any, fn: Callable[[], Any], timeout_ms: int, what: str) -> Any:
        def wrapped() -> Any:
            CURRENT["t2"] = time.perf_counter()
            try:
                return fn()
            finally:
                CURRENT["t3"] = time.perf_counter()

        return bounded(self, wrapped, timeout_ms, what)

    librdkafka_client.LibrdkafkaClient._bounded = timed_bounded  # type: ignore[method-assign]

    commit = kafka_python_client.KafkaPythonClient.commit

    def timed_commit(self: Any, offsets: Any, timeout_ms: int) -> None:
        CURRENT["t2"] = time.perf_counter()
        try:
            commit(self, offsets, timeout_ms)
        finally:
            CURRENT["t3"] = time.perf_counter()

    kafka_python_client.KafkaPythonClient.commit = timed_commit  # type: ignore[method-assign]


def _pct(values: list[float], q: float) -> float | None:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 1) if values else None


def main() -> None:
    from cr_consumer.testing.broker import bootstrap_or_embedded
    from cr_consumer.testing.kafka_util import create_topic, unique_name

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--messages", type=int, default=1_500_000, help="records kafka-python reads per round")
    ap.add_argument("--rd-messages", type=int, default=5_000_000, help="records librdkafka reads per round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--every", type=float, default=0.1, help="seconds between two drains")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    _instrument()
    results: list[dict] = []
    with bootstrap_or_embedded(args.bootstrap) as bootstrap:
        topic = create_topic(bootstrap, unique_name("bench-drain"), 4)
        produce_fixed(bootstrap, topic, max(args.messages, args.rd_messages))
        gc.collect()
        gc.freeze()  # as bench_operator and the member runtime do
        for rnd in range(args.rounds):
            clients = ["kafka-python", "librdkafka"]
            for client in clients if rnd % 2 == 0 else clients[::-1]:
                bench_operator.CLIENT = client
                DONE.clear()
                n = args.rd_messages if client == "librdkafka" else args.messages
                r = bench_operator.run_operator(bootstrap, topic, n, cycle_every_s=args.every)
                drains = [d for d in DONE if all(f"t{i}" in d for i in range(6))]
                phases = {}
                for name, a, b in PHASES:
                    ms = [(d[b] - d[a]) * 1000 for d in drains]
                    phases[name] = {"p50": _pct(ms, 0.5), "p90": _pct(ms, 0.9), "p99": _pct(ms, 0.99),
                                    "max": _pct(ms, 1.0)}
                load = os.getloadavg()[0]
                results.append({"round": rnd, "client": client, "records_per_s": round(r["records_per_s"]),
                                "drains": len(drains), "load": round(load, 2), "phases_ms": phases})
                print(f"round {rnd} {client}: {r['records_per_s']:,.0f} records/s, {len(drains)} drains, "
                      f"load {load:.2f}", flush=True)
                for name, q in phases.items():
                    print(f"   {name:10s} p50 {q['p50']} p90 {q['p90']} p99 {q['p99']} max {q['max']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"version": 1, "every_s": args.every, "runs": results}, indent=2) + "\n",
                                   encoding="utf-8")


if __name__ == "__main__":
    main()
