"""One SparkSession for all Spark tests (a Spark start costs ~8 s).

All Spark tests carry ``xdist_group("spark")`` so that, under
``pytest -n 2 --dist loadgroup``, they run on one worker and share this session.
"""

from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")  # without it the source runner dies silently (see the notes)


@pytest.fixture(scope="session")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from cr_consumer.spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("crkafka-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture
def coordinator(tmp_path):
    """A real coordinator process on a free loopback port."""
    from coordinator.launcher import CoordinatorProcess

    with CoordinatorProcess(state_dir=tmp_path / "coordinator") as proc:
        yield proc.endpoint
