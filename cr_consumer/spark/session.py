"""Registering ``crkafka`` with a SparkSession, and the local and standalone-cluster sessions
the examples, tests and benches use.

Kept out of the package ``__init__``, so that importing ``cr_consumer.spark``
imports nothing (no pyspark) and no module of the package imports its parent.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
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


def local_session(app_name: str, *, cores: int = 2, max_failures: int = 1) -> SparkSession:
    """A local SparkSession with ``crkafka`` registered, set up as this machine needs:
    workers run this interpreter (PYSPARK_PYTHON), Spark binds to loopback, no UI,
    few shuffle partitions, logs at ERROR. Used by the examples, tests and benches.
    ``max_failures``: attempts of a task before its job fails (local mode retries no task by
    default)."""
    return _session(
        f"local[{cores}]" if max_failures == 1 else f"local[{cores},{max_failures}]",
        app_name,
        {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": str(cores)},
    )


def cluster_session(
    master: str, app_name: str, python_path: str, *, executor_memory: str = "1g", conf: Mapping[str, str] | None = None
) -> SparkSession:
    """A driver session on the standalone cluster at ``master`` (``spark://HOST:PORT``) with
    ``crkafka`` registered: the driver on loopback, executors of one core and
    ``executor_memory``, the project importable on them through
    ``spark.executorEnv.PYTHONPATH`` = ``python_path`` (docs/spark.md, "Standalone cluster");
    ``conf`` adds or overrides settings."""
    return _session(
        master,
        app_name,
        {
            "spark.driver.host": "127.0.0.1",
            "spark.executor.memory": executor_memory,
            "spark.executor.cores": "1",
            "spark.executorEnv.PYTHONPATH": python_path,
            "spark.sql.shuffle.partitions": "2",
            **(conf or {}),
        },
    )


def _session(master: str, app_name: str, conf: Mapping[str, str]) -> SparkSession:
    """Workers run this interpreter (PYSPARK_PYTHON), Spark binds to loopback, logs at ERROR."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name).config("spark.driver.bindAddress", "127.0.0.1")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


__all__ = ["cluster_session", "local_session", "register"]
