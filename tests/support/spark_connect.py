"""A local Spark Connect server on loopback, started from the PySpark install
(``sbin/start-connect-server.sh``), for tests: its clients are
``SparkSession.builder.remote(server.url)`` sessions.

Life cycle of :class:`ConnectServer`:

1. ``start()`` picks a free loopback port and runs ``start-connect-server.sh
   --wait`` (in the foreground, so the server is this process's child) through
   :func:`~support.spark_cluster.spawn_daemon`: a session of its own with
   ``PR_SET_PDEATHSIG``, its output in ``connect-server.log``. The server is a
   driver in ``local[cores]`` mode; its Python processes (the data source's
   planner and source runner, the tasks' workers) run this interpreter
   (``PYSPARK_PYTHON``) with the project on their ``PYTHONPATH``: the client
   pickles the data source class by reference, so the server must import it.
2. It polls the gRPC port until it accepts a connection
   (``CONNECT_READY_TIMEOUT_S``). A server that exits meanwhile, or a port
   still closed at the bound, fails the start with the log's tail, and what was
   started is stopped.
3. ``stop()`` is :func:`~support.spark_cluster.stop_daemons`: SIGTERM to the
   process group, SIGKILL after its bound, then every process below it.

The script's pid file and log directory are the server's work directory, so two
servers (two test workers, or another user's server) never refuse each other
through a shared ``/tmp`` pid file.
"""

from __future__ import annotations

import contextlib
import socket
import sys
from pathlib import Path

import attrs

from coordinator.protocol.common.osutil import free_port
from coordinator.protocol.common.waiting import wait_until

from support.spark_cluster import SparkDaemon, spark_home, spawn_daemon, stop_daemons

#: Bound on the server's start: one JVM that builds its SparkContext (~18 s alone at load 8 on
#: 2 cores, measured); past it the start fails instead of hanging the test module.
CONNECT_READY_TIMEOUT_S = 120.0
#: Bound on one connection attempt to the gRPC port during the readiness poll.
CONNECT_PROBE_TIMEOUT_S = 1.0
#: Error lines of the server's log quoted by a failed start.
MAX_ERROR_LINES = 5
#: The server driver's heap (Spark's default is 1 GiB; a test's records are few).
DRIVER_MEMORY = "768m"


class ConnectStartError(RuntimeError):
    """The Spark Connect server did not come up."""


def project_root() -> Path:
    """The directory holding the ``cr_consumer`` and ``coordinator`` packages under test."""
    import cr_consumer

    return Path(cr_consumer.__file__).resolve().parent.parent


def _port_open(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), CONNECT_PROBE_TIMEOUT_S):
        return True
    return False


@attrs.define
class ConnectServer:
    """A Spark Connect server on ``127.0.0.1:port`` running ``local[cores]``, its log, pid
    file and warehouse under ``workdir``. A context manager."""

    workdir: Path
    cores: int = 2
    port: int = attrs.field(init=False, default=0)
    _daemon: SparkDaemon | None = attrs.field(init=False, default=None)

    @property
    def url(self) -> str:
        """What ``SparkSession.builder.remote(...)`` and ``spark-pipelines --remote`` take."""
        return f"sc://127.0.0.1:{self.port}"

    @property
    def warehouse(self) -> Path:
        """``spark.sql.warehouse.dir``: where the tables of the server's catalog are written."""
        return self.workdir / "warehouse"

    def log_tail(self, n: int = 3000) -> str:
        return self._daemon.log_tail(n) if self._daemon is not None else ""

    def failure(self) -> str:
        """What a failed start says: the log's first error lines (a JVM's tail is mostly the
        stack of its last exception, the cause is above it), then its tail."""
        daemon = self._daemon
        if daemon is None:
            return ""
        try:
            lines = daemon.log_path.read_text(errors="replace").splitlines()
        except OSError:
            lines = []
        errors = [line for line in lines if " ERROR " in line or "Exception" in line][:MAX_ERROR_LINES]
        return "first errors:\n" + "\n".join(errors) + "\nlog tail:\n" + self.log_tail()

    def _ready(self) -> bool:
        daemon = self._daemon
        if daemon is None or daemon.proc.poll() is not None:
            code = daemon.proc.returncode if daemon is not None else None
            raise ConnectStartError(f"the Spark Connect server exited with {code} during start-up; {self.failure()}")
        return _port_open(self.port)

    def start(self) -> ConnectServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.host": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": str(self.cores),
            "spark.sql.warehouse.dir": str(self.warehouse),
        }
        argv = [
            str(spark_home() / "sbin" / "start-connect-server.sh"),
            "--wait",
            "--master",
            f"local[{self.cores}]",
            "--driver-memory",
            DRIVER_MEMORY,
        ]
        for key, value in conf.items():
            argv += ["--conf", f"{key}={value}"]
        env = {
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_PID_DIR": str(self.workdir),
            "SPARK_LOG_DIR": str(self.workdir),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYTHONPATH": str(project_root()),
        }
        self._daemon = spawn_daemon(self.workdir, "connect-server", argv, env)
        try:
            wait_until(self._ready, CONNECT_READY_TIMEOUT_S, f"the Spark Connect server on {self.url}", interval=0.2)
        except TimeoutError as exc:
            failure = self.failure()
            self.stop()
            raise ConnectStartError(f"{exc}; {failure}") from exc
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        daemon, self._daemon = self._daemon, None
        if daemon is not None:
            stop_daemons([daemon])

    def __enter__(self) -> ConnectServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["CONNECT_READY_TIMEOUT_S", "ConnectServer", "ConnectStartError", "project_root"]
