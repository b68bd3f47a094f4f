"""kill -9 of the executor Python workers in the middle of a batch's tasks: the
batch fails, the query is restarted from its checkpoint location, the batch is
replayed from Spark's offset log by the same path (ranges -> executors), and
the output holds every record exactly once."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from cr_consumer.testing.kafka_util import create_topic, produce

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark"), pytest.mark.timeout(600)]


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except (FileNotFoundError, ProcessLookupError):
        return ""


def executor_workers() -> list[int]:
    """Python workers forked by the executors' pyspark daemon of this test's JVM (not the
    source runner, not the data source planning daemons)."""
    workers = []
    for jvm in (c for c in _children(os.getpid()) if "java" in _cmdline(c)):
        for daemon in _children(jvm):
            cmd = _cmdline(daemon)
            if "pyspark.daemon" in cmd and "pyspark.sql.worker" not in cmd and "streaming" not in cmd:
                workers += _children(daemon)
    return workers


def test_kill9_of_executor_workers_mid_batch_then_restart_is_exactly_once(
    spark, bootstrap, coordinator, names, tmp_path
):
    topic = create_topic(bootstrap, names.topic(), partitions=4)
    n = 40_000
    produce(bootstrap, topic, [b"%06d" % i + b"x" * 94 for i in range(n)])
    out: dict[int, list[tuple[int, int]]] = {}
    killed: list[int] = []
    lock = threading.Lock()

    def kill_workers(stop: threading.Event) -> None:
        while not stop.wait(0.02):
            for pid in executor_workers():
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass

    def sink(df, batch_id):
        stop = threading.Event()
        killer = threading.Thread(target=kill_workers, args=(stop,))
        if batch_id == 1 and not killed:
            killer.start()
        try:
            rows = df.select("partition", "offset").collect()
        finally:
            stop.set()
            if killer.is_alive():
                killer.join()
        with lock:
            out[batch_id] = [(r["partition"], r["offset"]) for r in rows]  # idempotent by batch id

    def start():
        return (
            spark.readStream.format("crkafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("kafka.group.id", names.group())
            .option("subscribe", topic)
            .option("coordinator", coordinator)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", 10_000)
            .option("kafka.session.timeout.ms", 6000)
            .option("kafka.heartbeat.interval.ms", 1000)
            .load()
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .start()
        )

    query = start()
    try:
        deadline = time.monotonic() + 180
        while query.isActive and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not query.isActive, "the query survived the kill -9 of its executor workers"
    finally:
        query.stop()
    assert killed, "no executor worker was running during batch 1"
    assert query.exception() is not None  # the batch's tasks failed: the query stopped
    assert 1 not in out, "batch 1 was written although its workers were killed"
    query = start()  # restart from the checkpoint location: batch 1 is replayed
    try:
        deadline = time.monotonic() + 180
        while sum(len(v) for v in out.values()) < n:
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, f"{sum(len(v) for v in out.values())}/{n}"
            time.sleep(0.2)
    finally:
        query.stop()
    records = [r for rows in out.values() for r in rows]
    assert len(records) == len(set(records)) == n
    assert set(records) == {(p, o) for p in range(4) for o in range(n // 4)}
