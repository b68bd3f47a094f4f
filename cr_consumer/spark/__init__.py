"""The ``crkafka`` Spark Structured Streaming source (see ``docs/spark.md``).

    from cr_consumer.spark import register
    register(spark)
    df = (spark.readStream.format("crkafka")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("group.id", "orders-etl")
          .option("subscribe", "orders")
          .option("coordinator", "tcp://127.0.0.1:5570")
          .option("members", 2)
          .load())

Importing this package does not import pyspark; :func:`register` does.
"""

from __future__ import annotations

FORMAT_NAME = "crkafka"


def register(spark) -> None:
    """Register the ``crkafka`` data source with a SparkSession."""
    from cr_consumer.spark.source import CrKafkaDataSource

    spark.dataSource.register(CrKafkaDataSource)


def local_session(app_name: str, *, cores: int = 2):
    """A local SparkSession with ``crkafka`` registered, set up as this machine needs:
    workers run this interpreter (PYSPARK_PYTHON), Spark binds to loopback, no UI,
    few shuffle partitions, logs at ERROR. Used by the examples, tests and benches."""
    import os
    import sys

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


__all__ = ["FORMAT_NAME", "local_session", "register"]
