"""Registering ``crkafka`` with a SparkSession, and the local session the examples use.

Kept out of the package ``__init__``, so that importing ``cr_consumer.spark``
imports nothing (no pyspark) and no module of the package imports its parent.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Register the ``crkafka`` data source with a SparkSession, and the listener that
    tells a query's source runner when Spark has committed a batch (``sink_notices.py``)."""
    from cr_consumer.spark.sink_notices import install_listener
    from cr_consumer.spark.source import CrKafkaDataSource

    spark.dataSource.register(CrKafkaDataSource)
    install_listener(spark)


def local_session(app_name: str, *, cores: int = 2) -> SparkSession:
    """A local SparkSession with ``crkafka`` registered, set up as this machine needs:
    workers run this interpreter (PYSPARK_PYTHON), Spark binds to loopback, no UI,
    few shuffle partitions, logs at ERROR. Used by the examples, tests and benches."""
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


__all__ = ["local_session", "register"]
