"""One SparkSession for all Spark tests (a Spark start costs ~8 s).

All Spark tests carry ``xdist_group("spark")`` so that, under
``pytest -n 2 --dist loadgroup``, they run on one worker and share this session;
those whose Spark runs in processes of their own (a driver killed, a standalone
cluster, a Connect server) run there too, so that one Spark JVM at a time shares
the machine's 2 cores with the other worker's tests.
"""

from __future__ import annotations

import pyarrow  # noqa: F401  (required: without it the source runner dies silently, see the notes)
import pyspark  # noqa: F401
import pytest


@pytest.fixture(scope="session")
def spark():
    from cr_consumer.spark.session import local_session

    session = local_session("crkafka-tests")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory):
    """A Spark standalone master and two workers of one core on loopback (``support/spark_cluster.py``),
    for the tests of one module; every process of it ends with the module, whatever its tests did."""
    from support.spark_cluster import StandaloneCluster

    with StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2, cores=1) as cluster:
        yield cluster


@pytest.fixture
def coordinator(tmp_path):
    """A real coordinator process on a free loopback port."""
    from coordinator.launcher import CoordinatorProcess

    with CoordinatorProcess(state_dir=tmp_path / "coordinator") as proc:
        yield proc.endpoint


@pytest.fixture(autouse=True)
def _close_executor_readers():
    """Range reads run in this process (tests without Spark) cache their consumers: closed
    after each test, before its broker stops."""
    yield
    from cr_consumer.spark.executor import close_worker_readers

    close_worker_readers()
