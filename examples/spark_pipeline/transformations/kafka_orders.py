"""A streaming table over Kafka, read by ``crkafka``, in a declarative pipeline.

``spark-pipelines`` (shipped with PySpark 4.x) imports this file in its own
Python process, a Spark Connect client, and sends the table's definition to
the server, which runs the flow as a streaming query into the table
``kafka_orders`` of its catalog. Each ``spark-pipelines run`` reads what
arrived since the last run (the flow's checkpoint is under the spec's
``storage``) and stops; the consumer group ``CRKAFKA_GROUP`` holds the run's
end when it returns.

Run it (the project installed in the Python of the server and of the CLI,
with the ``connect`` extra; a broker and a ``cr-coordinator`` running):

    export CRKAFKA_BOOTSTRAP=127.0.0.1:9092 CRKAFKA_TOPIC=orders \\
           CRKAFKA_COORDINATOR=tcp://127.0.0.1:5570 CRKAFKA_GROUP=orders-pipeline
    spark-pipelines run --spec examples/spark_pipeline/spark-pipeline.yml
    # or against a running Spark Connect server:
    spark-pipelines --remote sc://127.0.0.1:15002 run --spec examples/spark_pipeline/spark-pipeline.yml

``tests/spark/test_spark_connect.py`` runs it twice against a local server.
"""

from __future__ import annotations

import os

from pyspark import pipelines as dp
from pyspark.sql import DataFrame, SparkSession

from cr_consumer.spark.session import register

# the CLI's session (a Spark Connect one); registering a data source is allowed in a
# definition file (the CLI refuses only session mutations such as conf.set)
spark = SparkSession.active()
register(spark)


@dp.table(comment="Kafka records of CRKAFKA_TOPIC, each once, in Spark's Kafka schema")
def kafka_orders() -> DataFrame:
    return (
        spark.readStream.format("crkafka")
        .option("kafka.bootstrap.servers", os.environ.get("CRKAFKA_BOOTSTRAP", "127.0.0.1:9092"))
        .option("subscribe", os.environ.get("CRKAFKA_TOPIC", "orders"))
        .option("kafka.group.id", os.environ.get("CRKAFKA_GROUP", "orders-pipeline"))
        .option("coordinator", os.environ.get("CRKAFKA_COORDINATOR", "tcp://127.0.0.1:5570"))
        .option("startingOffsets", "earliest")
        .load()
    )
