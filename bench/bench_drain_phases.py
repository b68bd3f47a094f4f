"""The drain's latency split into its phases, kafka-python and librdkafka in one run.

bench/bench_operator.py's drain measurement (a drain + checkpoint every
``--every`` seconds while one operator consumes, the permit blocked before each
drain) with timestamps taken inside the drain:

* ``pickup``: drain called -> its event runs on the event thread;
* ``to-commit``: -> the client's commit starts (librdkafka: on the adapter's
  own thread, :mod:`cr_consumer.kafka.librdkafka.bounded_call`; kafka-python: on the
  event thread itself);
* ``commit``: the commit call (the broker round trip and the library's threads);
* ``after``: commit returned -> the event is done (librdkafka: the event
  thread has the worker's answer);
* ``total``: what bench_operator reports.

The clients run alternated (order reversed every round), each on its own group
over one topic (``--rd-variant`` adds librdkafka runs with other properties);
librdkafka reads ``--rd-messages`` (it is ~5x faster, so the same number of
records would give it few drains); the percentiles are printed per round and
pooled over the rounds (one round's p99 is its maximum). The timestamps are taken by
wrapping the drain, the event thread's ``call`` and the clients' commit (this
script only).

``--rd-trace`` splits librdkafka's ``commit`` phase further, from librdkafka's
own debug log (``debug=cgrp,protocol`` written to stderr with its wall-clock
timestamps, 1 ms resolution, instead of through the Python logger, which
delivers log lines only inside a poll): ``to-send`` (the commit call starts ->
librdkafka's coordinator connection has sent the OffsetCommit request; the hops
through librdkafka's main thread), ``rtt`` (the request's round trip, as
librdkafka reports it) and ``reply`` (the response received -> the commit call
returned to Python: librdkafka's main thread and the wake-up of the caller);
``rtt/fetch`` and ``rtt/idle`` are the round trips of the commits during which
a fetch request of the same consumer was in flight, and of the others.

Two load modes, both in the same run when ``--steady-rate`` is given:

* backlog (always): the topic holds ``--rd-messages`` records before the
  operators start, so each client reads as fast as it can (librdkafka ~6x the
  records per second of kafka-python in the same drain cadence: the broker is
  busier for it);
* steady (``--steady-rate R``): each run gets a fresh topic and a producer
  thread (librdkafka's producer, little CPU) writing R records/s of 100 bytes,
  round robin, from before the operator starts until it has read
  ``R * --steady-seconds`` records; both clients keep up, so they see the same
  offered load, as a consumer that has caught up does. The drains of the first
  ``--steady-warmup`` seconds (the catch-up after the join) are left out.

    .venv/bin/python bench/bench_drain_phases.py --messages 1500000 --rd-messages 5000000 --rounds 2
    .venv/bin/python bench/bench_drain_phases.py --messages 1500000 --rd-messages 5000000 --rounds 3 \
        --steady-rate 20000 --rd-variant q1m:queued.max.messages.kbytes=1024
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_operator
from baseline import produce_fixed

from cr_consumer.kafka.kafka_python import client as kafka_python_client
from cr_consumer.kafka.librdkafka import client as librdkafka_client
from cr_consumer.operator import event_thread, handlers

#: The timestamps of the drain in progress (t0 drain called, t1 event runs, t2 commit
#: starts, t3 commit returns, t4 event done, t5 drain returns) and of the drains done.
CURRENT: dict[str, float] = {}
DONE: list[dict[str, float]] = []
PHASES = (
    ("pickup", "t0", "t1"),
    ("to-commit", "t1", "t2"),
    ("commit", "t2", "t3"),
    ("after", "t3", "t4"),
    ("total", "t0", "t5"),
)


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

    # the thread that runs librdkafka's commit: BoundedCaller.run (or, in older
    # trees, LibrdkafkaClient._bounded, for a before/after run)
    if hasattr(librdkafka_client.LibrdkafkaClient, "_bounded"):
        owner: Any = librdkafka_client.LibrdkafkaClient
        name = "_bounded"
    else:
        from cr_consumer.kafka.librdkafka import bounded_call

        owner, name = bounded_call.BoundedCaller, "run"
    bounded = getattr(owner, name)

    def timed_bounded(self: Any, fn: Callable[[], Any], timeout: float, what: str) -> Any:
        if not what.startswith("commit"):
            return bounded(self, fn, timeout, what)

        def wrapped() -> Any:
            CURRENT["w2"], CURRENT["t2"] = time.time(), time.perf_counter()
            try:
                return fn()
            finally:
                CURRENT["t3"], CURRENT["w3"] = time.perf_counter(), time.time()

        return bounded(self, wrapped, timeout, what)

    setattr(owner, name, timed_bounded)

    commit = kafka_python_client.KafkaPythonClient.commit

    def timed_commit(self: Any, offsets: Any, timeout_ms: int) -> None:
        CURRENT["t2"] = time.perf_counter()
        try:
            commit(self, offsets, timeout_ms)
        finally:
            CURRENT["t3"] = time.perf_counter()

    kafka_python_client.KafkaPythonClient.commit = timed_commit  # type: ignore[method-assign]


#: librdkafka's stderr log line (rd_kafka_log_print): level, seconds.milliseconds, facility, name, text.
_LOG_LINE = re.compile(r"^%\d+\|(\d+)\.(\d{3})\|(\w+)\|[^|]*\| (.*)$")
_SENT = re.compile(r"Sent (OffsetCommit|Fetch)Request .*CorrId (\d+)")
_RECEIVED = re.compile(r"Received (OffsetCommit|Fetch)Response .*CorrId (\d+), rtt ([\d.]+)ms")
#: The commit's split, and its round trip by whether a fetch request of the same
#: consumer was in flight at the broker meanwhile (``rtt/fetch``) or not (``rtt/idle``).
TRACE_PHASES = ("to-send", "rtt", "reply", "rtt/fetch", "rtt/idle")


def _trace_consumer() -> None:
    """librdkafka consumers made from now on log ``cgrp,protocol`` to stderr (see --rd-trace)."""
    module = sys.modules[librdkafka_client.LibrdkafkaClient.__module__]
    consumer = module.Consumer

    def traced(cfg: dict[str, Any]) -> Any:
        cfg = {k: v for k, v in cfg.items() if k != "logger"}
        cfg["debug"] = "cgrp,protocol"
        return consumer(cfg)

    module.Consumer = traced


def _commit_trace(log_text: str, drains: list[dict[str, float]]) -> dict[str, list[float]]:
    """Per drain: the TRACE_PHASES in ms (module docstring), from librdkafka's log."""
    sent: dict[str, dict[str, float]] = {"OffsetCommit": {}, "Fetch": {}}  # request -> CorrId -> when
    received: dict[str, dict[str, tuple[float, float]]] = {"OffsetCommit": {}, "Fetch": {}}  # -> (when, rtt ms)
    for line in log_text.splitlines():
        m = _LOG_LINE.match(line)
        if m is None:
            continue
        at = int(m.group(1)) + int(m.group(2)) / 1000
        if (s := _SENT.search(m.group(4))) is not None:
            sent[s.group(1)][s.group(2)] = at
        elif (r := _RECEIVED.search(m.group(4))) is not None:
            received[r.group(1)][r.group(2)] = (at, float(r.group(3)))
    fetches = [(at, received["Fetch"][corr][0]) for corr, at in sent["Fetch"].items() if corr in received["Fetch"]]
    commits = sorted((at, corr) for corr, at in sent["OffsetCommit"].items() if corr in received["OffsetCommit"])
    out: dict[str, list[float]] = {name: [] for name in TRACE_PHASES}
    for d in drains:
        if "w2" not in d:
            continue
        # the first request sent after the call started (the log's clock has 1 ms steps)
        match = next(((at, corr) for at, corr in commits if at >= d["w2"] - 0.001), None)
        if match is None or received["OffsetCommit"][match[1]][0] > d["w3"] + 0.001:
            continue
        at_sent, corr = match
        at_received, rtt = received["OffsetCommit"][corr]
        out["to-send"].append(max(0.0, at_sent - d["w2"]) * 1000)
        out["rtt"].append(rtt)
        out["reply"].append(max(0.0, d["w3"] - at_received) * 1000)
        during_fetch = any(f_sent <= at_received and f_received >= at_sent for f_sent, f_received in fetches)
        out["rtt/fetch" if during_fetch else "rtt/idle"].append(rtt)
    return out


#: The steady producer's pacing: records are written in slices of this length
#: (R * slice records each), each slice's send time kept on a fixed schedule.
STEADY_SLICE_S = 0.01


class SteadyProducer:
    """A thread writing ``rate`` records/s of 100 bytes round robin into ``topic``
    (see the module docstring, steady mode) until :meth:`stop`."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int) -> None:
        from confluent_kafka import Producer

        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "acks": "all"})
        self._topic, self._partitions, self._rate = topic, partitions, rate
        self._stop = threading.Event()
        self.sent = 0
        self.late_slices = 0  # slices sent more than one slice behind the schedule
        self._thread = threading.Thread(target=self._run, name="bench-steady-producer", daemon=True)

    def start_when_assigned(self, op: Any) -> None:
        """Start writing once ``op`` (a ConsumerOperator) has its assignment, so it
        reads the steady stream from its first record, not a backlog built up
        while it joined."""
        deadline = time.monotonic() + 60
        while op.joining:
            if time.monotonic() > deadline:
                raise TimeoutError("the operator got no assignment within 60 s")
            time.sleep(0.01)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
        self._producer.flush(30)

    def _run(self) -> None:
        payload = b"x" * 100
        start = time.perf_counter()
        slice_no = 0
        while not self._stop.is_set():
            due = start + slice_no * STEADY_SLICE_S
            now = time.perf_counter()
            if due > now:
                self._stop.wait(due - now)
            elif now - due > STEADY_SLICE_S:
                self.late_slices += 1
            slice_no += 1
            target = int(slice_no * STEADY_SLICE_S * self._rate)
            while self.sent < target:
                try:
                    self._producer.produce(self._topic, payload, partition=self.sent % self._partitions)
                except BufferError:
                    self._producer.poll(0.01)
                    continue
                self.sent += 1
            self._producer.poll(0)


def _pct(values: list[float], q: float) -> float | None:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 1) if values else None


def _runs(args: argparse.Namespace) -> list[tuple[str, str, dict[str, str]]]:
    """Each run of a round: (label, client, extra properties)."""
    rd_extra = dict(kv.split("=", 1) for kv in args.rd_kafka)
    runs: list[tuple[str, str, dict[str, str]]] = [
        ("kafka-python", "kafka-python", {}),
        ("librdkafka", "librdkafka", rd_extra),
    ]
    for variant in args.rd_variant:
        label, _, props = variant.partition(":")
        runs.append(
            (
                f"librdkafka+{label}",
                "librdkafka",
                {**rd_extra, **dict(kv.split("=", 1) for kv in props.split(",") if kv)},
            )
        )
    return runs


def _trace_samples(log_file: Path, drains: list[dict], keep_dir: str | None, name: str) -> dict[str, list[float]]:
    """The commit phase split by librdkafka's debug log; the log (and the drains'
    timestamps) then kept in ``keep_dir`` as ``name``.log, else deleted."""
    samples = _commit_trace(log_file.read_text(encoding="utf-8", errors="replace"), drains)
    if keep_dir:
        kept = Path(keep_dir) / f"{name}.log"
        kept.parent.mkdir(parents=True, exist_ok=True)
        log_file.replace(kept)
        (kept.with_suffix(".drains.json")).write_text(json.dumps(drains), encoding="utf-8")
    else:
        log_file.unlink()
    return samples


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
    ap.add_argument(
        "--rd-trace", action="store_true", help="split librdkafka's commit phase with its debug log (module docstring)"
    )
    ap.add_argument(
        "--rd-variant",
        action="append",
        default=[],
        metavar="LABEL:PROP=VALUE,...",
        help="one more librdkafka run per round with these properties (repeatable)",
    )
    ap.add_argument(
        "--rd-trace-keep",
        default=None,
        metavar="DIR",
        help="keep librdkafka's debug log and the drains' timestamps of each round here",
    )
    ap.add_argument(
        "--rd-kafka",
        action="append",
        default=[],
        metavar="PROP=VALUE",
        help="an extra Kafka property of the librdkafka operator (repeatable)",
    )
    ap.add_argument(
        "--steady-rate",
        type=int,
        default=0,
        help="also run every client at this offered load, records/s (module docstring)",
    )
    ap.add_argument("--steady-seconds", type=float, default=20.0, help="length of one steady run")
    ap.add_argument("--no-backlog", action="store_true", help="only the steady mode")
    ap.add_argument(
        "--block-lead-ms",
        type=float,
        default=0.0,
        help="block the permit this long before each drain (a runtime's drain signal, then its "
        "pipeline flush; not in the drain's total)",
    )
    ap.add_argument(
        "--steady-warmup",
        type=float,
        default=2.0,
        help="steady mode: leave out the drains of the run's first seconds (the catch-up after the join)",
    )
    args = ap.parse_args()
    runs = _runs(args)
    _instrument()
    if args.rd_trace:
        _trace_consumer()
    results: list[dict] = []
    with bootstrap_or_embedded(args.bootstrap) as bootstrap:
        topic = create_topic(bootstrap, unique_name("bench-drain"), 4)
        produce_fixed(bootstrap, topic, max(args.messages, args.rd_messages))
        gc.collect()
        gc.freeze()  # as bench_operator and the member runtime do
        modes = ([] if args.no_backlog else ["backlog"]) + (["steady"] if args.steady_rate else [])
        for rnd in range(args.rounds):
            order = runs if rnd % 2 == 0 else runs[::-1]
            for mode, (label, client, extra) in [(m, run) for m in modes for run in order]:
                bench_operator.CLIENT = client
                bench_operator.EXTRA_KAFKA = dict(extra)
                DONE.clear()
                trace = args.rd_trace and client == "librdkafka"
                steady: SteadyProducer | None = None
                if mode == "steady":
                    n = int(args.steady_rate * args.steady_seconds)
                    run_topic = create_topic(bootstrap, unique_name("bench-drain-steady"), 4)
                    steady = SteadyProducer(bootstrap, run_topic, 4, args.steady_rate)
                    label = f"steady/{label}"
                else:
                    n = args.rd_messages if client == "librdkafka" else args.messages
                    run_topic = topic
                try:
                    with _stderr_to_file() if trace else contextlib.nullcontext() as log_file:
                        r = bench_operator.run_operator(
                            bootstrap,
                            run_topic,
                            n,
                            cycle_every_s=args.every,
                            block_lead_s=args.block_lead_ms / 1000,
                            on_started=None if steady is None else steady.start_when_assigned,
                        )
                finally:
                    if steady is not None:
                        steady.stop()
                if steady is not None and steady.late_slices:
                    print(f"   (the producer fell behind its schedule in {steady.late_slices} slices)", flush=True)
                drains = [d for d in DONE if all(f"t{i}" in d for i in range(6))]
                if steady is not None and drains:  # not the catch-up after the join
                    drains = [d for d in drains if d["t0"] >= drains[0]["t0"] + args.steady_warmup]
                samples = {name: [(d[b] - d[a]) * 1000 for d in drains] for name, a, b in PHASES}
                if log_file is not None:
                    samples.update(_trace_samples(Path(log_file), drains, args.rd_trace_keep, f"round{rnd}-{label}"))
                POOLED.setdefault(label, {})
                for name, ms in samples.items():
                    POOLED[label].setdefault(name, []).extend(ms)
                phases = {name: _summary(ms) for name, ms in samples.items()}
                load = os.getloadavg()[0]
                results.append(
                    {
                        "round": rnd,
                        "client": label,
                        "records_per_s": round(r["records_per_s"]),
                        "drains": len(drains),
                        "load": round(load, 2),
                        "phases_ms": phases,
                    }
                )
                print(
                    f"round {rnd} {label}: {r['records_per_s']:,.0f} records/s, {len(drains)} drains, load {load:.2f}",
                    flush=True,
                )
                _print_phases(phases)
    pooled = {client: {name: _summary(ms) for name, ms in by_phase.items()} for client, by_phase in POOLED.items()}
    for client, phases in pooled.items():
        print(f"all rounds, {client}: {len(POOLED[client]['total'])} drains", flush=True)
        _print_phases(phases)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"version": 2, "every_s": args.every, "runs": results, "pooled": pooled}, indent=2) + "\n",
            encoding="utf-8",
        )


#: Every round's samples per client and phase (the pooled percentiles: one round
#: has ~40-60 drains, so its p99 is its maximum).
POOLED: dict[str, dict[str, list[float]]] = {}


def _summary(ms: list[float]) -> dict[str, float | None]:
    return {"n": len(ms), "p50": _pct(ms, 0.5), "p90": _pct(ms, 0.9), "p99": _pct(ms, 0.99), "max": _pct(ms, 1.0)}


def _print_phases(phases: dict[str, dict[str, float | None]]) -> None:
    for name, q in phases.items():
        print(f"   {name:10s} n {q['n']:4} p50 {q['p50']} p90 {q['p90']} p99 {q['p99']} max {q['max']}", flush=True)


@contextlib.contextmanager
def _stderr_to_file() -> Iterator[str]:
    """File descriptor 2 (where librdkafka logs without a logger) into a temporary file."""
    fd, name = tempfile.mkstemp(prefix="rdkafka-trace-", suffix=".log")
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        yield name
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


if __name__ == "__main__":
    main()
