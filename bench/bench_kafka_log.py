"""Replay time of the coordinator's state from its Kafka log, against the file log in the same run.

For each log (the file log in a temp dir, the Kafka log on a fresh topic of
``$KAFKA_BOOTSTRAP_SERVERS`` or an embedded broker, default replication settings):

1. write ``--entries`` (1,000,000) control variables in requests of ``--batch``
   (5,000) entries, one sync each (100 groups x 10 topics);
2. reopen and time the load: replay of the log as written (batched records);
3. snapshot / compact, reopen and time the load: replay from the snapshot.

    .venv/bin/python bench/bench_kafka_log.py [--entries 1000000] [--batch 5000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from coordinator.store.durable_log import DurableLog
from coordinator.store.kafka.kafka_log import KafkaLog
from coordinator.store.kafka.settings import KafkaLogSettings
from coordinator.store.state_store import StateStore
from cr_consumer.testing.broker import bootstrap_or_embedded

GROUPS, TOPICS = 100, 10


def _load(state: Path, make_log: Callable[[], DurableLog | None]) -> tuple[StateStore, float]:
    store = StateStore(state, log=make_log(), compact_min_bytes=1 << 40)  # no compaction but ours
    t0 = time.perf_counter()
    store.load()
    return store, time.perf_counter() - t0


def run(label: str, state: Path, make_log: Callable[[], DurableLog | None], entries: int, batch: int) -> dict:
    per_topic = entries // (GROUPS * TOPICS)
    store, _ = _load(state, make_log)
    t0 = time.perf_counter()
    for g in range(GROUPS):
        for t in range(TOPICS):
            for lo in range(0, per_topic, batch):
                store.put_initial_offsets(f"g{g}", {(f"t{t}", p): p for p in range(lo, min(lo + batch, per_topic))})
                store.sync()
    write_s = time.perf_counter() - t0
    store.close()
    store, replay_log_s = _load(state, make_log)
    assert store.stats().control_variables == GROUPS * TOPICS * per_topic
    t0 = time.perf_counter()
    store.compact(600)
    compact_s = time.perf_counter() - t0
    store.close()
    store, replay_snapshot_s = _load(state, make_log)
    stats = store.stats()
    assert stats.control_variables == GROUPS * TOPICS * per_topic
    store.close()
    out = {
        "entries": stats.control_variables,
        "write_s": round(write_s, 2),
        "replay_log_s": round(replay_log_s, 3),
        "snapshot_s": round(compact_s, 3),
        "replay_from_snapshot_s": round(replay_snapshot_s, 3),
        "snapshot_records": stats.log_records,
        "snapshot_bytes": stats.log_bytes,
    }
    print(label, out, flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=5_000)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-kafka-log-"))
    try:
        out = {"file": run("file", work / "file", lambda: None, args.entries, args.batch)}
        with bootstrap_or_embedded(log_path=work / "broker.log") as (bootstrap, _pid):
            settings = KafkaLogSettings(bootstrap, f"bench-kafka-log-{time.monotonic_ns()}")
            out["kafka"] = run("kafka", work / "kafka", lambda: KafkaLog(settings), args.entries, args.batch)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
