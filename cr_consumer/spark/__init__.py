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


__all__ = ["FORMAT_NAME", "register"]
