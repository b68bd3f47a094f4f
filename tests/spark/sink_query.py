"""The driver of a streaming query to the ``crkafka`` sink, as its own process: Spark's JSON file
source (``--input``, one file per batch) -> rows keyed by id, two tasks per batch ->
``format("crkafka")`` (``--topic``), ``trigger(availableNow=True)``: it stops when every file is
written.

Run by ``test_spark_sink.py`` with ``$CRKAFKA_FAULT_DIR`` set (the JVM and every Python worker
inherit it, so the sink's fault points are armed in the tasks and in the driver's commit), on a
local session whose tasks are retried once (``local[2,2]``), so that the test can crash a task
and kill the driver at a fault point, then start it again on the same checkpoint location.
"""

from __future__ import annotations

import argparse
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in ("bootstrap", "input", "topic", "checkpoint"):
        parser.add_argument(f"--{name}", required=True)
    args = parser.parse_args()

    from cr_consumer.spark.session import local_session

    spark = local_session("crkafka-sink-faults", max_failures=2)
    query = (
        spark.readStream.schema("id long, word string")
        .option("maxFilesPerTrigger", 1)
        .json(args.input)
        .repartition(2, "id")
        .selectExpr("cast(id as string) as key", "concat(word, '-', cast(id as string)) as value")
        .writeStream.format("crkafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", args.topic)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    print(f"query {query.id} started", flush=True)
    query.awaitTermination()
    rc = 0 if query.exception() is None else 1
    if rc:
        print(f"query failed: {query.exception()}", file=sys.stderr, flush=True)
    spark.stop()
    return rc


if __name__ == "__main__":
    sys.exit(main())
