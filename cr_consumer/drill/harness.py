"""The drill's handle on a running region: member processes it can kill, add and remove.

:func:`start_region` starts ``members`` ``crkafka member`` processes of one
pipeline against a coordinator endpoint. By default it uses the runtime's
runner (``cr_consumer.runtime.runner.region_runner.Region``, the same code as ``crkafka
run``) through :class:`RunnerRegion`; with ``CRKAFKA_DRILL_HARNESS=process``
it uses the drill's own minimal supervisor :class:`ProcessRegion` (useful to
tell a runner problem from a region problem). Both offer:

* ``members()``: names of the members whose process is alive;
* ``kill(name)``: SIGKILL that member's process (no clean shutdown); the
  supervisor restarts it under the same name, as ``crkafka run`` does;
* ``add_member()``: start one more member (a new name);
* ``remove_member(name)``: stop that member cleanly (SIGTERM: it leaves the
  region and the group) and do not restart it;
* ``pid(name)``: the pid of that member's running process (pause-member);
* ``stop()``: stop the supervisor, SIGTERM every member, SIGKILL any that is
  still alive after ``STOP_TIMEOUT_S``.

Supervisor thread (owned by the handle, stopped by ``stop()``): every
``SUPERVISE_PERIOD_S`` it restarts members whose process ended without being
removed; a member that exits with code 3 (the region FAILED) is not restarted
and is recorded in ``failed``.

Every member's stdout/stderr goes to ``<log_dir>/<name>.log`` (appended over
restarts). With ``fault_dir``, every member process gets
``$CRKAFKA_FAULT_DIR`` (``cr_consumer/runtime/member/fault_points.py``): the drill can
arm the runtime's fault points there.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from cr_consumer.runtime.member.fault_points import ENV_FAULT_DIR

log = logging.getLogger(__name__)

#: How often the supervisor looks for dead members.
SUPERVISE_PERIOD_S = 0.2
#: Bound on a member's clean shutdown before SIGKILL, so a wedged member
#: cannot hang the end of a drill.
STOP_TIMEOUT_S = 15.0
#: A member silent this long is dropped by the controller (heartbeats every 0.5 s):
#: shorter than the broker's session timeout so that a kill -9 is seen quickly,
#: long enough that a busy 2-core machine does not cause false alarms.
MEMBER_TIMEOUT_S = 3.0
#: The region's drain and reset timeouts (the runner's defaults): how long a
#: phase waits for a member that stays silent.
PHASE_TIMEOUT_S = 30.0
#: Exit code of a member whose region FAILED (cr_consumer.runtime.member.process).
EXIT_REGION_FAILED = 3


class ProcessRegion:
    def __init__(self, *, pipeline: str, members: int, coordinator: str, bootstrap: str, group: str,
                 output_dir: Path, state_dir: Path, log_dir: Path, params: dict[str, str],
                 period_s: float = 1.0, member_timeout_s: float = MEMBER_TIMEOUT_S,
                 max_resets: int = 10, extra_args: list[str] | None = None,
                 fault_dir: Path | None = None, phase_timeout_s: float = PHASE_TIMEOUT_S) -> None:
        self.log_dir = Path(log_dir)
        self.env = dict(os.environ, PYTHONUNBUFFERED="1")
        if fault_dir is not None:
            self.env[ENV_FAULT_DIR] = str(fault_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.base_cmd = [
            sys.executable, "-m", "cr_consumer.cli.main", "member", pipeline,
            "--coordinator", coordinator, "--bootstrap", bootstrap, "--group", group,
            "--out", str(output_dir), "--state-dir", str(state_dir), "--period", str(period_s),
            "--member-timeout", str(member_timeout_s), "--max-resets", str(max_resets),
            "--min-members", str(members),
            "--drain-timeout", str(phase_timeout_s), "--reset-timeout", str(phase_timeout_s),
        ]
        for k, v in params.items():
            self.base_cmd += ["--param", f"{k}={v}"]
        self.base_cmd += list(extra_args or [])
        self._lock = threading.Lock()
        self._procs: dict[str, subprocess.Popen] = {}
        self._removed: set[str] = set()
        self.failed: dict[str, int] = {}
        self.restarts = 0
        self._next = 0
        self._stop = threading.Event()
        for _ in range(members):
            self.add_member()
        self._thread = threading.Thread(target=self._supervise, name="drill-supervisor", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ processes
    def _spawn(self, name: str) -> subprocess.Popen:
        logf = open(self.log_dir / f"{name}.log", "ab")
        try:
            return subprocess.Popen(self.base_cmd + ["--name", name], stdout=logf, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=self.env)
        finally:
            logf.close()  # the child has its own descriptor

    def _supervise(self) -> None:
        while not self._stop.wait(SUPERVISE_PERIOD_S):
            with self._lock:
                for name, proc in list(self._procs.items()):
                    code = proc.poll()
                    if code is None or name in self._removed or self._stop.is_set():
                        continue
                    if code == EXIT_REGION_FAILED:
                        self.failed[name] = code
                        del self._procs[name]
                        log.error("member %s exited: the region FAILED; not restarting it", name)
                        continue
                    log.info("member %s (pid %s) exited with %s: restarting it", name, proc.pid, code)
                    self._procs[name] = self._spawn(name)
                    self.restarts += 1

    # ------------------------------------------------------------------ handle
    def members(self) -> list[str]:
        with self._lock:
            return [n for n, p in self._procs.items() if p.poll() is None and n not in self._removed]

    def pids(self) -> dict[str, int]:
        with self._lock:
            return {n: p.pid for n, p in self._procs.items() if p.poll() is None}

    def pid(self, name: str) -> int:
        pid = self.pids().get(name)
        if pid is None:
            raise RuntimeError(f"member {name!r} has no live process")
        return pid

    def kill(self, name: str) -> int:
        with self._lock:
            proc = self._procs.get(name)
            if proc is None or proc.poll() is not None:
                raise RuntimeError(f"member {name!r} has no live process to kill")
            proc.send_signal(signal.SIGKILL)
            proc.wait(STOP_TIMEOUT_S)
            return proc.pid

    def add_member(self) -> str:
        with self._lock:
            name = f"m{self._next}"
            self._next += 1
            self._procs[name] = self._spawn(name)
            return name

    def remove_member(self, name: str | None = None) -> str:
        with self._lock:
            if name is None:
                live = [n for n, p in self._procs.items() if p.poll() is None and n not in self._removed]
                if not live:
                    raise RuntimeError("remove_member: no live member")
                name = live[-1]
            proc = self._procs.get(name)
            if proc is None:
                raise RuntimeError(f"remove_member: unknown member {name!r}")
            self._removed.add(name)
        _terminate(proc)
        return name

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(STOP_TIMEOUT_S)
        with self._lock:
            procs = list(self._procs.values())
            self._removed.update(self._procs)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            _wait_or_kill(p)


def _terminate(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    _wait_or_kill(proc)


def _wait_or_kill(proc: subprocess.Popen) -> None:
    try:
        proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        log.warning("member pid %s did not stop within %.0fs: SIGKILL", proc.pid, STOP_TIMEOUT_S)
        proc.kill()
        proc.wait(STOP_TIMEOUT_S)


class RunnerRegion:
    """Adapter from the runtime's ``Region`` handle to the drill's handle.

    Member logs go to ``<state_dir>/logs/<member>.log`` (the runner's layout).
    """

    def __init__(self, *, pipeline: str, members: int, coordinator: str, bootstrap: str, group: str,
                 output_dir: Path, state_dir: Path, log_dir: Path, params: dict[str, str],
                 period_s: float = 1.0, member_timeout_s: float = MEMBER_TIMEOUT_S, max_resets: int = 10,
                 fault_dir: Path | None = None, phase_timeout_s: float = PHASE_TIMEOUT_S) -> None:
        from cr_consumer.runtime.runner.region_runner import Region

        env = {ENV_FAULT_DIR: str(fault_dir)} if fault_dir is not None else None
        self.region = Region(pipeline, members=members, bootstrap=bootstrap, coordinator=coordinator, group=group,
                             output_dir=output_dir, state_dir=state_dir, period_s=period_s,
                             member_timeout_s=member_timeout_s, max_consecutive_resets=max_resets,
                             drain_timeout_s=phase_timeout_s, reset_timeout_s=phase_timeout_s,
                             params=dict(params), env=env).start()

    def members(self) -> list[str]:
        """Members whose process is running now (not those waiting for a restart)."""
        return [n for n, pid in self.region.pids().items() if pid]

    def pid(self, name: str) -> int:
        pid = self.region.pids().get(name)
        if pid is None:
            raise RuntimeError(f"member {name!r} has no running process")
        return pid

    def kill(self, name: str) -> int:
        return self.region.kill(name)

    def add_member(self) -> str:
        return self.region.add_member()

    def remove_member(self, name: str | None = None) -> str:
        return self.region.remove_member(name)

    @property
    def failed(self) -> str | None:
        return self.region.failed

    def stop(self) -> None:
        self.region.stop()


def start_region(**kwargs):
    if os.environ.get("CRKAFKA_DRILL_HARNESS", "runner") == "process":
        return ProcessRegion(**kwargs)
    return RunnerRegion(**kwargs)
