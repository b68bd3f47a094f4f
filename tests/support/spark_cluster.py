"""A Spark standalone cluster on loopback, started from the PySpark install: one
master and N workers, each its own JVM (``spark-class``), for tests and benches.

Life cycle of :class:`StandaloneCluster`:

1. ``start()`` picks free loopback ports, starts the master and every worker at
   once (a worker retries its registration until the master listens), each in
   a session of its own with ``PR_SET_PDEATHSIG``, and polls the master's JSON
   UI (``/json``) until every worker is ALIVE (``CLUSTER_READY_TIMEOUT_S``). A
   daemon that exits meanwhile fails the start with its log's tail.
2. The workers launch the executors of each application as their own child
   JVMs (``CoarseGrainedExecutorBackend``, in the worker's process group);
   :meth:`executor_pid` finds one by application and executor id.
3. ``stop()`` sends SIGTERM to each daemon's process group (the worker's
   shutdown hook stops its executors), waits ``CLUSTER_STOP_TIMEOUT_S``, then
   SIGKILLs the group, and waits until no process of any group is left
   (:func:`stop_daemons`; :func:`spawn_daemon` and it also serve
   ``support/spark_connect.py``).

The daemons run without the caller's ``PYTHONPATH``: the executors' path to the
project is the application's to give (``spark.executorEnv.PYTHONPATH``, see
``docs/spark.md``), as on a real cluster.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

import attrs

from coordinator.protocol.common.osutil import die_with_parent_preexec, free_port
from coordinator.protocol.common.waiting import wait_until

#: Bound on the master and the workers coming up and every worker registering:
#: three JVMs start at once on 2 shared cores (~10 s alone); past it the start fails
#: instead of hanging the test session.
CLUSTER_READY_TIMEOUT_S = 90.0
#: How long stop_daemons() waits for a daemon's process group after SIGTERM before SIGKILL,
#: so a wedged JVM cannot hold the end of a test module.
CLUSTER_STOP_TIMEOUT_S = 15.0
#: Bound on one HTTP request to the master's JSON UI, so a JVM that accepts but does
#: not answer cannot stall the readiness poll.
HTTP_TIMEOUT_S = 2.0
#: Heap of the master and worker daemons: they only schedule (Spark's default is 1 GiB each).
DAEMON_MEMORY = "256m"


class ClusterStartError(RuntimeError):
    """The standalone cluster did not come up."""


def spark_home() -> Path:
    """The PySpark install, which holds ``bin/spark-class`` and Spark's jars."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().split("\0")
    except (FileNotFoundError, ProcessLookupError):
        return []


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        kids = _children(todo.pop())
        found += kids
        todo += kids
    return found


def _gone(pid: int) -> bool:
    """Exited: no such process, or a zombie waiting for its reaper."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def _wait_group_gone(pgid: int, what: str) -> None:
    wait_until(lambda: _group_gone(pgid), CLUSTER_STOP_TIMEOUT_S, f"every process of {what} gone")


@attrs.define
class SparkDaemon:
    """One JVM started from the PySpark install, the leader of its own process group, its
    output in ``log_path``."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    log_file: BinaryIO

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""


def spawn_daemon(workdir: Path, name: str, argv: list[str], env: Mapping[str, str]) -> SparkDaemon:
    """Start ``argv`` (a script of the PySpark install) in ``workdir``, in a session of its own
    with ``PR_SET_PDEATHSIG``, stdout and stderr to ``workdir/<name>.log``. Its environment is
    the caller's without ``PYTHONPATH`` and ``SPARK_HOME``, then ``SPARK_HOME`` of the PySpark
    install, then ``env``."""
    log_path = workdir / f"{name}.log"
    log_file = open(log_path, "ab")  # noqa: SIM115 (closed by stop_daemons())
    full_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    full_env.update(SPARK_HOME=str(spark_home()), **env)
    try:
        proc = subprocess.Popen(
            argv,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=workdir,
            env=full_env,
            start_new_session=True,  # its children share its group: stop_daemons() ends them with it
            preexec_fn=die_with_parent_preexec(),
        )
    except BaseException:
        log_file.close()
        raise
    return SparkDaemon(name, proc, log_path, log_file)


def stop_daemons(daemons: list[SparkDaemon]) -> None:
    """Stop ``daemons`` in reverse order and every process below them:

    1. the descendants are listed first (pyspark's Python daemons under a JVM make
       process groups of their own);
    2. each daemon's process group gets SIGTERM (a JVM's shutdown hook stops what it
       started), is waited for ``CLUSTER_STOP_TIMEOUT_S``, then SIGKILLed;
    3. the descendants still running after ``CLUSTER_STOP_TIMEOUT_S`` are SIGKILLed.
    """
    below = [pid for daemon in daemons for pid in _descendants(daemon.proc.pid)]
    for daemon in reversed(daemons):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(daemon.proc.pid, signal.SIGTERM)
    for daemon in daemons:
        pgid = daemon.proc.pid
        try:
            daemon.proc.wait(CLUSTER_STOP_TIMEOUT_S)
            _wait_group_gone(pgid, daemon.name)
        except (subprocess.TimeoutExpired, TimeoutError):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            daemon.proc.wait(CLUSTER_STOP_TIMEOUT_S)
            _wait_group_gone(pgid, daemon.name)
        finally:
            daemon.log_file.close()
    left = lambda: [pid for pid in below if not _gone(pid)]  # noqa: E731
    with contextlib.suppress(TimeoutError):
        wait_until(lambda: not left(), CLUSTER_STOP_TIMEOUT_S, "the daemons' processes gone")
    for pid in left():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@attrs.define
class StandaloneCluster:
    """A master and ``workers`` workers of ``cores`` cores and ``memory`` each, on
    127.0.0.1, logs and work directories under ``workdir``. A context manager."""

    workdir: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    master_port: int = attrs.field(init=False, default=0)
    ui_port: int = attrs.field(init=False, default=0)
    _daemons: list[SparkDaemon] = attrs.field(init=False, factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def _spawn(self, name: str, args: list[str]) -> SparkDaemon:
        daemon = spawn_daemon(
            self.workdir,
            name,
            [str(spark_home() / "bin" / "spark-class"), *args],
            {"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": DAEMON_MEMORY},
        )
        self._daemons.append(daemon)
        return daemon

    def master_state(self) -> dict[str, object]:
        """The master's ``/json`` document (workers, applications)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=HTTP_TIMEOUT_S) as r:
            doc: dict[str, object] = json.load(r)
            return doc

    def _alive_workers(self) -> int:
        for daemon in self._daemons:
            if daemon.proc.poll() is not None:
                raise ClusterStartError(
                    f"{daemon.name} exited with {daemon.proc.returncode} during start-up:\n{daemon.log_tail()}"
                )
        try:
            state = self.master_state()
        except OSError:  # the master's UI is not listening yet
            return 0
        alive = state.get("aliveworkers")
        return alive if isinstance(alive, int) else 0

    def start(self) -> StandaloneCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.master_port, self.ui_port = free_port(), free_port()
        master = "org.apache.spark.deploy.master.Master"
        self._spawn(
            "master",
            [master, "--host", "127.0.0.1", "--port", str(self.master_port), "--webui-port", str(self.ui_port)],
        )
        for i in range(self.workers):
            self._spawn(
                f"worker-{i}",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(free_port()),
                    "--webui-port",
                    str(free_port()),
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.memory,
                    "--work-dir",
                    str(self.workdir / f"worker-{i}"),
                    self.master_url,
                ],
            )
        try:
            wait_until(
                lambda: self._alive_workers() >= self.workers,
                CLUSTER_READY_TIMEOUT_S,
                f"{self.workers} workers registered with {self.master_url}",
                interval=0.2,
            )
        except BaseException:
            self.stop()
            raise
        return self

    def worker_pids(self) -> list[int]:
        return [d.proc.pid for d in self._daemons if d.name.startswith("worker-")]

    def executor_pid(self, app_id: str, executor_id: str) -> int | None:
        """The pid of the executor JVM ``executor_id`` of application ``app_id``, or None."""
        for worker in self.worker_pids():
            for child in _children(worker):
                cmd = _cmdline(child)
                if "org.apache.spark.executor.CoarseGrainedExecutorBackend" not in cmd:
                    continue
                args = dict(itertools.pairwise(cmd))
                if args.get("--app-id") == app_id and args.get("--executor-id") == executor_id:
                    return child
        return None

    def stop(self) -> None:
        daemons, self._daemons = self._daemons, []
        stop_daemons(daemons)  # the workers (and their executors) before the master

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["ClusterStartError", "SparkDaemon", "StandaloneCluster", "spark_home", "spawn_daemon", "stop_daemons"]
