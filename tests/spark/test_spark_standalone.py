"""The crkafka source on a Spark standalone cluster (a master and two workers of one
core, each executor its own JVM): a streaming query to Spark's parquet sink, an
executor JVM killed -9 while it runs a task (Spark reschedules the task, the same
driver goes on), then the driver killed -9 in the middle of a batch and restarted
from the checkpoint location. Every record is in the sink's output exactly once, and
the group's committed offsets reach the end of every partition."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from coordinator.protocol.common.osutil import free_port
from coordinator.protocol.common.waiting import wait_until
from cr_consumer.testing.kafka_util import committed_offsets, create_topic, produce

from support.paths import REPO

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.xdist_group("spark"), pytest.mark.timeout(400)]

DRIVER = Path(__file__).with_name("cluster_query.py")
#: Bound on each step of the story (a driver's start and first batch on the cluster, a
#: new executor, the rest of the input after the restart); a stuck step fails the test.
STEP_TIMEOUT_S = 180.0
#: Executor kills tried until one lands while its executor runs a task (see the test).
EXECUTOR_KILLS = 3
#: Bound on one request to the driver's REST API: a busy driver JVM on 2 shared cores
#: answered a poll in more than 2 s; a poll that times out is tried again.
REST_TIMEOUT_S = 10.0
#: Bound on a stopped driver's exit (query.stop, spark.stop) before it is killed.
DRIVER_STOP_TIMEOUT_S = 30.0


def _batches(checkpoint: Path, log: str) -> set[int]:
    d = checkpoint / log
    return {int(p.name) for p in d.iterdir() if p.name.isdigit()} if d.is_dir() else set()


def batch_in_flight(checkpoint: Path) -> int | None:
    """The batch whose offsets Spark logged but whose commit it has not: the one running."""
    planned, done = _batches(checkpoint, "offsets"), _batches(checkpoint, "commits")
    return max(planned) if planned and max(planned) not in done else None


def sink_files(out: Path) -> set[Path]:
    """The files of the batches the parquet sink committed (its ``_spark_metadata`` log);
    a file of a batch cut short by a kill is on disk but not listed."""
    files: set[Path] = set()
    meta = out / "_spark_metadata"
    for entry in meta.iterdir() if meta.is_dir() else ():
        if entry.name.startswith("."):
            continue
        for line in entry.read_text().splitlines()[1:]:  # the first line is the log's version
            doc = json.loads(line)
            assert doc["action"] == "add", doc
            files.add(Path(doc["path"].removeprefix("file:")))
    return files


def sink_rows(out: Path) -> list[tuple[int, int, bytes]]:
    rows = []
    for f in sink_files(out):
        t = pq.read_table(f, columns=["partition", "offset", "value"]).to_pydict()
        rows += zip(t["partition"], t["offset"], t["value"], strict=True)
    return rows


def app_id(ui_port: int) -> str:
    """The id of the driver's one application, from its Spark REST API (``/api/v1``)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/api/v1/applications", timeout=REST_TIMEOUT_S) as r:
        return json.load(r)[0]["id"]


def rest(ui_port: int, path: str) -> list[dict]:
    """``path`` of the driver's application in its Spark REST API."""
    url = f"http://127.0.0.1:{ui_port}/api/v1/applications/{app_id(ui_port)}/{path}"
    with urllib.request.urlopen(url, timeout=REST_TIMEOUT_S) as r:
        return json.load(r)


def start_driver(args: list[str], log: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with open(log, "w") as f:  # the child keeps its own descriptor
        # own session: kill -9 of the group takes the driver, its JVM and the source runner
        return subprocess.Popen(
            [sys.executable, str(DRIVER), *args], stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def kill_driver(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(DRIVER_STOP_TIMEOUT_S)


def test_executor_and_driver_killed_on_a_standalone_cluster_exactly_once(  # noqa: C901 - one story, in order
    standalone_cluster, bootstrap, coordinator, names, tmp_path
):
    """The story of the module's docstring, timed: it prints when each kill came and the total."""
    cluster = standalone_cluster
    n, parts = 60_000, 4  # 20 batches: two left after every kill, and more for the driver's
    topic, group = create_topic(bootstrap, names.topic(), partitions=parts), names.group()
    values = [b"%06d" % i + b"x" * 94 for i in range(n)]
    produce(bootstrap, topic, values)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    ui_port = free_port()
    args = ["--master", cluster.master_url, "--bootstrap", bootstrap, "--coordinator", coordinator]
    args += ["--topic", topic, "--group", group, "--out", str(out), "--checkpoint", str(checkpoint)]
    args += ["--ui-port", str(ui_port), "--max-offsets-per-trigger", "3000"]
    logs = [tmp_path / "driver-1.log", tmp_path / "driver-2.log"]
    t0 = time.monotonic()

    def failed(proc: subprocess.Popen, what: str) -> bool:
        assert proc.poll() is None, f"the driver exited with {proc.returncode} before {what}"
        return False

    first = start_driver(args, logs[0])
    try:
        # 1. An executor JVM killed -9 while it runs a task of a batch.
        wait_until(lambda: failed(first, "a batch") or _batches(checkpoint, "commits"), STEP_TIMEOUT_S, "a batch")

        def busy_executor() -> tuple[str, int] | None:
            failed(first, "an executor ran a task")
            try:
                app, executors = app_id(ui_port), rest(ui_port, "executors")
            except TimeoutError:  # the driver's UI was slow to answer: asked again
                return None
            for e in executors:
                if e["id"] != "driver" and e["activeTasks"] > 0:
                    pid = cluster.executor_pid(app, e["id"])
                    if pid is not None:
                        return e["id"], pid
            return None

        # Spark reschedules the lost task; the same driver goes on with a new executor. The
        # executor's active tasks are read over HTTP, a moment old: a kill that lands just after
        # its task ended loses none, and is repeated on an executor running one.
        def two_more_batches(committed_at_kill: int) -> tuple[bool] | None:
            """After two more batches than at the kill: (whether a task was lost,); None before."""
            failed(first, "the query went on")
            try:
                stages = rest(ui_port, "stages")
            except TimeoutError:  # the driver's UI was slow to answer: asked again
                return None
            if max(_batches(checkpoint, "commits")) < committed_at_kill + 2:
                return None
            return (sum(s["numFailedTasks"] for s in stages) > 0,)

        def kill_an_executor_mid_task() -> str:
            for _kill in range(EXECUTOR_KILLS):
                executor_id, pid = wait_until(
                    busy_executor, STEP_TIMEOUT_S, "an executor running a task", interval=0.01
                )
                os.kill(pid, signal.SIGKILL)
                at_kill = max(_batches(checkpoint, "commits"))
                after = functools.partial(two_more_batches, at_kill)
                (lost,) = wait_until(after, STEP_TIMEOUT_S, "two more batches after the kill", interval=0.2)
                if lost:
                    return executor_id
            pytest.fail(f"none of {EXECUTOR_KILLS} executor kills landed while its executor ran a task")

        executor_id = kill_an_executor_mid_task()
        t_executor = time.monotonic() - t0
        removed = [e for e in rest(ui_port, "allexecutors") if e["id"] == executor_id]
        assert removed, "the killed executor is known to the driver"
        assert not removed[0]["isActive"], removed
        assert len(sink_rows(out)) < n, "the input ran out before the driver's kill: make it larger"

        # 2. The driver killed -9 in the middle of a batch.
        wait_until(
            lambda: failed(first, "a batch in flight") or batch_in_flight(checkpoint),
            STEP_TIMEOUT_S,
            "a batch in flight",
            interval=0.01,
        )
        kill_driver(first)
        t_driver = time.monotonic() - t0
    finally:
        kill_driver(first)
    out_at_kill = len(sink_rows(out))
    assert 0 < out_at_kill < n

    # 3. Restarted from the checkpoint location: the rest, exactly once, committed to the end.
    second = start_driver(args, logs[1])
    try:
        expected = {p: n // parts for p in range(parts)}

        def done() -> bool:
            failed(second, "the end of the input")
            return len(sink_rows(out)) >= n and committed_offsets(bootstrap, group, topic) == expected

        wait_until(done, STEP_TIMEOUT_S, "every record out and the group's offsets at the end", interval=0.5)
        second.send_signal(signal.SIGTERM)
        assert second.wait(DRIVER_STOP_TIMEOUT_S) == 0, logs[1].read_text()[-3000:]
    finally:
        kill_driver(second)
    elapsed = time.monotonic() - t0
    rows = sink_rows(out)
    seen = Counter((p, o) for p, o, _v in rows)
    assert [k for k, c in seen.items() if c > 1] == [], "duplicates"
    assert set(seen) == {(p, o) for p in range(parts) for o in range(n // parts)}
    assert sorted(v for _p, _o, v in rows) == values  # round robin: record i is partition i % 4
    assert committed_offsets(bootstrap, group, topic) == expected
    print(
        f"executor killed at {t_executor:.1f}s, driver at {t_driver:.1f}s ({out_at_kill} rows out), "
        f"all {n} rows exactly once at {elapsed:.1f}s"
    )
