"""The crkafka source through Spark Connect: a client session of a local Spark Connect
server (``support/spark_connect.py``, one for the module) registers the data source,
runs a streaming query into Spark's parquet sink and a batch read, and
``spark-pipelines`` runs the declarative pipeline of ``examples/spark_pipeline``
against the same server.

What runs where: docs/spark.md, "Spark Connect".
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from coordinator.protocol.common.waiting import wait_until
from cr_consumer.testing.kafka_util import committed_offsets, create_topic, produce

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark"), pytest.mark.timeout(300)]

#: Bound on a query's reading of every record and committing its end: a few micro-batches
#: on a server that shares 2 cores with the rest of the suite.
QUERY_DONE_TIMEOUT_S = 120.0
#: Bound on one ``spark-pipelines run`` (its spark-submit JVM, the graph's registration and
#: one availableNow run of the flow); past it the CLI is killed and the test fails.
PIPELINE_RUN_TIMEOUT_S = 180.0
#: Pause between two looks at the query and the group's commit (each look is an RPC to the
#: server and a new admin client to the broker).
POLL_S = 0.25
#: PySpark's process-wide switch to Spark Connect (``pyspark.sql.utils.is_remote``).
CONNECT_MODE_VARIABLE = "SPARK_CONNECT_MODE_ENABLED"
#: The example pipeline, run by the test from a copy.
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_pipeline"


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    """One local Spark Connect server for the module's tests; stopped with the module."""
    from support.spark_connect import ConnectServer

    with ConnectServer(tmp_path_factory.mktemp("spark-connect")) as server:
        yield server


@pytest.fixture(scope="module")
def remote_spark(connect_server):
    """A Spark Connect client session with ``crkafka`` registered (the data source class
    travels to the server pickled by reference: the server's Python imports it).

    Creating it sets ``SPARK_CONNECT_MODE_ENABLED`` in this process's environment, which
    turns every later ``SparkSession.builder`` of the process, and of the processes it
    starts, into a Connect client (PySpark's ``SparkSession.Builder.create``): the other
    Spark tests of this worker build classic sessions, so the variable is restored here."""
    from pyspark.sql import SparkSession

    from cr_consumer.spark.session import register

    mode = os.environ.get(CONNECT_MODE_VARIABLE)
    try:
        spark = SparkSession.builder.remote(connect_server.url).create()
        try:
            assert type(spark).__module__ == "pyspark.sql.connect.session"
            register(spark)
            yield spark
        finally:
            spark.stop()
    finally:
        if mode is None:
            os.environ.pop(CONNECT_MODE_VARIABLE, None)
        else:
            os.environ[CONNECT_MODE_VARIABLE] = mode


def _offsets_seen(rows) -> list[tuple[int, int]]:
    return sorted((r["partition"], r["offset"]) for r in rows)


def test_batch_read_through_connect_needs_no_coordinator(remote_spark, bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    produce(bootstrap, topic, [b"v%d" % i for i in range(200)])  # record i: partition i % 2, offset i // 2
    rows = (
        remote_spark.read.format("crkafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", json.dumps({topic: {"0": 10, "1": -2}}))
        .option("endingOffsets", json.dumps({topic: {"0": 60, "1": 25}}))
        .load()
        .select("partition", "offset", "value", "topic")
        .collect()
    )
    assert _offsets_seen(rows) == [(0, o) for o in range(10, 60)] + [(1, o) for o in range(25)]
    for r in rows:
        assert (r["topic"], r["value"]) == (topic, b"v%d" % (2 * r["offset"] + r["partition"]))


def test_streaming_query_through_connect_reads_each_record_once(remote_spark, bootstrap, coordinator, names, tmp_path):
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    group = names.group()
    n = 400
    produce(bootstrap, topic, [b"v%d" % i for i in range(n // 2)])
    out = tmp_path / "out"
    query = (
        remote_spark.readStream.format("crkafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("kafka.group.id", group)
        .option("coordinator", coordinator)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )

    def committed(expected: dict[int, int]) -> bool:
        if query.exception() is not None:
            raise AssertionError(f"the query failed: {query.exception()}")
        return committed_offsets(bootstrap, group, topic) == expected

    try:
        first, every = {0: n // 4, 1: n // 4}, {0: n // 2, 1: n // 2}
        wait_until(lambda: committed(first), QUERY_DONE_TIMEOUT_S, "the first half committed", interval=POLL_S)
        produce(bootstrap, topic, [b"v%d" % i for i in range(n // 2, n)])
        wait_until(lambda: committed(every), QUERY_DONE_TIMEOUT_S, "every record committed", interval=POLL_S)
    finally:
        query.stop()
    assert query.exception() is None
    rows = remote_spark.read.parquet(str(out)).select("partition", "offset", "value").collect()
    assert _offsets_seen(rows) == [(p, o) for p in range(2) for o in range(n // 2)], "a gap or a duplicate"
    for r in rows:
        assert r["value"] == b"v%d" % (2 * r["offset"] + r["partition"])
    assert committed_offsets(bootstrap, group, topic) == {0: n // 2, 1: n // 2}


def _run_pipeline(spec: Path, url: str, env: dict[str, str]) -> None:
    from support.spark_cluster import spark_home

    argv = [str(spark_home() / "bin" / "spark-pipelines"), "--remote", url, "run", "--spec", str(spec)]
    done = subprocess.run(
        argv,
        env=env,
        cwd=spec.parent,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=PIPELINE_RUN_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).decode(errors="replace")[-4000:]
        raise AssertionError(f"spark-pipelines run exited with {done.returncode}:\n{tail}")


def test_pipeline_example_streams_kafka_into_a_table_each_record_once(
    remote_spark, connect_server, bootstrap, coordinator, names, tmp_path
):
    """``spark-pipelines run`` of the example: the flow reads every record into the table once
    and stops, leaving the group's commit at its end (a later run starts there: the flow is a
    streaming query with the default trigger, ``availableNow``, see ``test_spark_triggers.py``)."""
    from support.spark_cluster import spark_home
    from support.spark_connect import project_root

    topic = create_topic(bootstrap, names.topic(), partitions=2)
    group = names.group()
    pipeline = tmp_path / "pipeline"
    shutil.copytree(EXAMPLE, pipeline)
    spec_path = pipeline / "spark-pipeline.yml"
    spec = yaml.safe_load(spec_path.read_text())
    spec["storage"] = (tmp_path / "storage").as_uri()
    spec_path.write_text(yaml.safe_dump(spec))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=str(project_root()),
        CRKAFKA_BOOTSTRAP=bootstrap,
        CRKAFKA_TOPIC=topic,
        CRKAFKA_GROUP=group,
        CRKAFKA_COORDINATOR=coordinator,
    )

    produce(bootstrap, topic, [b"v%d" % i for i in range(100)])
    _run_pipeline(spec_path, connect_server.url, env)
    assert committed_offsets(bootstrap, group, topic) == {0: 50, 1: 50}
    rows = remote_spark.read.table("kafka_orders").select("partition", "offset", "value").collect()
    assert _offsets_seen(rows) == [(p, o) for p in range(2) for o in range(50)], "a gap or a duplicate"
    for r in rows:
        assert r["value"] == b"v%d" % (2 * r["offset"] + r["partition"])
