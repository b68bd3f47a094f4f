"""The driver of a streaming query on a Spark standalone cluster, as its own process:
``format("crkafka")`` -> Spark's parquet file sink, until SIGTERM.

Run by ``test_spark_standalone.py`` so that the test can kill it with ``kill -9`` and
start it again on the same checkpoint location. The session is set up as
``docs/spark.md`` ("Standalone cluster") says: the executors get the project on
their ``PYTHONPATH`` through ``spark.executorEnv.PYTHONPATH`` and run this
interpreter; the driver's UI serves Spark's REST API on ``--ui-port`` (the test
reads the executors' running tasks and the stages' failed tasks from it).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in ("master", "bootstrap", "coordinator", "topic", "group", "out", "checkpoint", "ui-port"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--max-offsets-per-trigger", type=int, required=True)
    parser.add_argument("--trigger-ms", type=int, default=200)
    args = parser.parse_args()

    from cr_consumer.spark.session import cluster_session

    spark = cluster_session(
        args.master,
        "crkafka-standalone",
        str(ROOT),
        executor_memory="512m",
        conf={"spark.ui.port": args.ui_port, "spark.ui.showConsoleProgress": "false"},
    )
    query = (
        spark.readStream.format("crkafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("kafka.group.id", args.group)
        .option("subscribe", args.topic)
        .option("coordinator", args.coordinator)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
        # a killed driver's members hold the partitions for a session timeout: short, so
        # the restarted driver's join is quick
        .option("kafka.session.timeout.ms", 6000)
        .option("kafka.heartbeat.interval.ms", 1000)
        .load()
        .select("topic", "partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", args.out)
        .option("checkpointLocation", args.checkpoint)
        .trigger(processingTime=f"{args.trigger_ms} milliseconds")
        .start()
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"query {query.id} started, application {spark.sparkContext.applicationId}", flush=True)
    rc = 0
    try:
        while not stop.wait(0.2):
            if query.exception() is not None:
                print(f"query failed: {query.exception()}", file=sys.stderr, flush=True)
                rc = 1
                break
    finally:
        query.stop()
        spark.stop()
    return rc


if __name__ == "__main__":
    sys.exit(main())
