"""The ``crkafka`` sink in live queries: every row visible to ``read_committed`` readers exactly
once (read with the reader that honours abort markers, ``raw_batches.read_committed``), in a
pipeline crkafka in -> transform -> crkafka out, and across a task that crashes after it prepared
its transaction (Spark retries it) and a driver killed -9 half way through a batch's commit
(restarted from the checkpoint location: the batch's replay finds the decision)."""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.kafka.raw_batches import CommittedRead, read_committed
from coordinator.protocol.common.waiting import wait_until
from cr_consumer.runtime import fault_points
from cr_consumer.spark.sink.decisions import DecisionLog
from cr_consumer.spark.sink.options import DEFAULT_DECISION_PREFIX
from cr_consumer.spark.sink.writer import FAULT_MEMBER
from cr_consumer.testing.kafka_util import create_topic, produce

from support.paths import REPO

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark"), pytest.mark.timeout(600)]

DRIVER = Path(__file__).with_name("sink_query.py")
#: Bound on each step of a story (a driver's start and first batch, the rest of the input); a
#: stuck step fails the test.
STEP_TIMEOUT_S = 180.0


def read_output(bootstrap: str, topic: str, partitions: int) -> list[CommittedRead]:
    settings = {"bootstrap_servers": bootstrap, "request_timeout_ms": 10_000, "client_id": "sink-test"}
    return [read_committed(settings, topic, p) for p in range(partitions)]


def committed_values(reads: list[CommittedRead]) -> collections.Counter[bytes]:
    return collections.Counter(r.value for read in reads for r in read.records)


def test_crkafka_in_transform_crkafka_out_is_exactly_once(spark, bootstrap, coordinator, names, tmp_path):
    source, sink = (
        create_topic(bootstrap, names.topic("in"), partitions=2),
        create_topic(bootstrap, names.topic("out"), partitions=3),
    )
    n = 2000
    produce(bootstrap, source, [f"r{i}".encode() for i in range(n)])
    query = (
        spark.readStream.format("crkafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.group.id", names.group())
        .option("subscribe", source)
        .option("coordinator", coordinator)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 1000)
        .option("kafka.session.timeout.ms", 6000)
        .load()
        .selectExpr(
            "value as key",
            "concat(upper(cast(value as string)), '!') as value",
            "array(named_struct('key', 'from', 'value', cast(concat(topic, ':', partition) as binary))) as headers",
        )
        .writeStream.format("crkafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:

        def all_out() -> bool:
            if query.exception() is not None:
                raise AssertionError(f"query failed: {query.exception()}")
            return sum(committed_values(read_output(bootstrap, sink, 3)).values()) >= n

        wait_until(all_out, STEP_TIMEOUT_S, f"{n} committed rows in {sink}", interval=0.5)
        # the sink commits inside a batch; its progress event comes after Spark's commit log
        several = wait_until(
            lambda: (query.lastProgress or {}).get("batchId", -1) >= 1, 30, "a second batch's progress", interval=0.2
        )
    finally:
        query.stop()
    assert query.exception() is None
    reads = read_output(bootstrap, sink, 3)
    assert committed_values(reads) == collections.Counter(f"R{i}!".encode() for i in range(n))
    assert all(not read.open_transactions for read in reads)
    assert several, "the input took several batches (ids from 0)"
    record = reads[0].records[0]
    assert record.key.startswith(b"r")
    assert record.headers[0][0] == "from"
    assert record.headers[0][1].startswith(source.encode())


def _write_input(directory: Path, files: int, rows: int) -> list[bytes]:
    """``files`` JSON files of ``rows`` rows each (written whole: temporary name, then rename);
    the values the query writes for them."""
    directory.mkdir()
    expected = []
    for f in range(files):
        lines = []
        for i in range(f * rows, (f + 1) * rows):
            lines.append(json.dumps({"id": i, "word": f"w{i % 13}"}))
            expected.append(f"w{i % 13}-{i}".encode())
        tmp = directory.parent / f".input-{f}.json"
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, directory / f"input-{f:02d}.json")
    return expected


def _driver(args: list[str], fault_dir: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO), fault_points.ENV_FAULT_DIR: str(fault_dir)}
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, str(DRIVER), *args], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _query_id(checkpoint: Path) -> str:
    return str(json.loads((checkpoint / "metadata").read_text())["id"])


@pytest.mark.slow
def test_task_crash_and_driver_kill_mid_commit_are_exactly_once(bootstrap, names, tmp_path):
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    expected = _write_input(tmp_path / "input", files=2, rows=400)
    checkpoint, fault_dir, log = tmp_path / "checkpoint", tmp_path / "faults", tmp_path / "driver.log"
    args = [
        "--bootstrap",
        bootstrap,
        "--input",
        str(tmp_path / "input"),
        "--topic",
        topic,
        "--checkpoint",
        str(checkpoint),
    ]
    # The first task that prepares its transaction dies (kill -9 of its Python worker) and is
    # retried; the first commit stops after its first transaction's commit, and the driver is
    # killed -9 there.
    fault_points.arm(fault_dir, fault_points.Point.SPARK_TASK_PREPARED, fault_points.Action.CRASH, FAULT_MEMBER)
    fault_points.arm(fault_dir, fault_points.Point.MID_PUBLISH, fault_points.Action.PAUSE, FAULT_MEMBER)
    first = _driver(args, fault_dir, log)
    try:
        paused = wait_until(
            lambda: fault_points.fired(fault_dir, fault_points.Point.MID_PUBLISH) or first.poll() is not None,
            STEP_TIMEOUT_S,
            "the driver's commit to stop mid-way",
        )
        assert isinstance(paused, list), log.read_text()[-3000:]
        assert fault_points.fired(fault_dir, fault_points.Point.SPARK_TASK_PREPARED), "a task crashed after it prepared"
        # Half committed: one transaction of batch 0 is, the other is still open.
        opened = [t for read in read_output(bootstrap, topic, 2) for t in read.open_transactions]
        assert opened, "a decided transaction is still open when the driver dies"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(first.pid, signal.SIGKILL)
        for fired in fault_points.fired(fault_dir, fault_points.Point.MID_PUBLISH):
            with contextlib.suppress(ProcessLookupError):
                os.kill(fired.pid, signal.SIGKILL)  # the stopped commit process, wherever its group
        first.wait()
    settings = {"bootstrap_servers": bootstrap, "request_timeout_ms": 10_000, "client_id": "sink-test"}
    decided = DecisionLog(settings, DEFAULT_DECISION_PREFIX, _query_id(checkpoint)).last(30.0)
    assert decided is not None
    assert decided.batch == 0
    assert len(decided.txns) == 2

    second = _driver(args, fault_dir, log)
    try:
        wait_until(lambda: second.poll() is not None, STEP_TIMEOUT_S, "the restarted driver to finish", interval=0.2)
        assert second.returncode == 0, log.read_text()[-4000:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(second.pid, signal.SIGKILL)
        second.wait()
    reads = read_output(bootstrap, topic, 2)
    assert committed_values(reads) == collections.Counter(expected)
    assert all(not read.open_transactions for read in reads)
    assert sum(read.aborted_records for read in reads) > 0, "the crashed task's prepared records were aborted"
