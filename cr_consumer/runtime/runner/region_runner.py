"""Run a pipeline as a region of member processes, from Python or ``crkafka run``.

``run_pipeline(pipeline, members=3, bootstrap=...)`` (or ``Region(...).start()``)
returns a :class:`Region` handle:

1. Start a coordinator process (``coordinator.launcher``) unless an endpoint is
   given; it holds the region controller.
2. Start N ``crkafka member`` processes (``python -m cr_consumer.cli.main member``),
   named ``member-0`` ... ``member-<N-1>``, each logging to
   ``<state_dir>/logs/<name>.log``. Kafka properties go to each member as
   JSON on its stdin (written, then closed, at every start), never on its
   command line, where any local user could read them (``ps``).
   With ``metrics_port`` (``crkafka run --metrics-port BASE``) member-N
   serves Prometheus ``/metrics`` on ``metrics_host:BASE+N``: ports are a
   function of the member's name, so a restarted member keeps its port and
   scrape targets never change; an added member takes the next index.
3. A supervisor thread (owned by the handle) checks the processes every
   ``SUPERVISE_S``: a member that died (kill -9, crash) is restarted under the
   same name, at once, with a backoff only when it keeps dying
   (``member_proc.py``); a member that
   exits with code 3 (region FAILED) or 2 (bad settings) is not restarted and
   marks the region failed; its last ERROR line (from its log) is part of
   ``failed``, and a member restarted after a failure logs its last ERROR
   line too, so the reason reaches the console. The coordinator this handle started is restarted
   on the same endpoint and state dir if it dies.
4. ``stop()`` (also on Ctrl-C / SIGTERM in ``crkafka run``): stop the
   supervisor, SIGTERM every member (SIGKILL after ``STOP_TIMEOUT_S``), then
   the coordinator.

Fault handles for drills and tests: ``kill(member)`` (SIGKILL; the supervisor
restarts it), ``add_member()``, ``remove_member()`` (SIGTERM, not restarted),
``kill_coordinator()``, ``status()`` (the controller's region status),
``wait_until(predicate, timeout)``, ``pids()``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coordinator.launcher import die_with_parent_preexec
from cr_consumer.kafka.properties import encode_for_stdin
from cr_consumer.runtime.member.setup import SettingsError, default_stem
from cr_consumer.runtime.runner.member_proc import MemberProc

log = logging.getLogger(__name__)

#: Supervisor poll interval: bounds how long a dead member stays dead.
SUPERVISE_S = 0.1
#: SIGTERM -> SIGKILL grace for a member at stop()/remove_member(), so a wedged
#: member (a sink stuck in I/O) cannot hang the runner's shutdown.
STOP_TIMEOUT_S = 10.0
#: Members with a metrics port (metrics_port + N for member-N): bounds the
#: port range a region takes so a base port is checked once, up front.
MAX_METRICS_PORTS = 1000
#: Bytes read back from the end of a member's log to find its last ERROR line.
LOG_TAIL_BYTES = 64 * 1024
#: The member's own loggers: their ERROR records state why it stopped.
MEMBER_LOGGERS = frozenset({"cr_consumer.runtime.member.process", "__main__", "cr_consumer.cli.member"})
#: Longest error line echoed (the rest of a long line stays in the log).
MAX_ECHO_CHARS = 500
#: Bound on one status request, so a dead or restarting coordinator makes
#: status() fail (and wait_until() retry) instead of blocking the caller.
STATUS_TIMEOUT_S = 3.0


class RegionFailed(RuntimeError):
    pass


class Region:
    """A running region of member processes (see the module docstring)."""

    def __init__(
        self,
        pipeline: str,
        *,
        members: int = 3,
        bootstrap: str,
        coordinator: str | None = None,
        group: str | None = None,
        output_dir: str | os.PathLike = "out",
        state_dir: str | os.PathLike = "state",
        period_s: float = 1.0,
        operator_driven: bool = False,
        drain_timeout_s: float = 30.0,
        reset_timeout_s: float = 30.0,
        max_consecutive_resets: int = 5,
        member_timeout_s: float = 5.0,
        region_index: int = 0,
        params: dict[str, Any] | None = None,
        kafka: dict[str, Any] | None = None,
        restart_members: bool = True,
        log_level: str = "INFO",
        log_format: str = "text",
        python: str = sys.executable,
        env: dict[str, str] | None = None,
        curve_server_key: str | None = None,
        curve_key: str | None = None,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
    ) -> None:
        if members < 1:
            raise ValueError(f"members must be >= 1, got {members}")
        if not bootstrap:
            raise ValueError("bootstrap is required (HOST:PORT of the Kafka cluster or embedded broker)")
        self.pipeline = str(pipeline)
        self.n_members = members
        self.bootstrap = bootstrap
        self.endpoint = coordinator
        stem = default_stem(self.pipeline)
        self.group = group or f"crkafka-{stem}-{uuid.uuid4().hex[:8]}"
        self.output_dir = Path(output_dir).resolve()
        self.state_dir = Path(state_dir).resolve()
        self.region_settings = {
            "mode": "operator_driven" if operator_driven else "periodic",
            "period_s": period_s,
            "drain_timeout_s": drain_timeout_s,
            "reset_timeout_s": reset_timeout_s,
            "max_consecutive_resets": max_consecutive_resets,
            "member_timeout_s": member_timeout_s,
        }
        self.region_index = region_index
        self.params = dict(params or {})
        self.kafka = dict(kafka or {})
        self._kafka_stdin = encode_for_stdin(self.kafka) if self.kafka else None  # checks the size up front
        self.restart_members = restart_members
        self.log_level = log_level
        self.log_format = log_format
        self.python = python
        self.env = dict(env or {})
        if (curve_server_key is None) != (curve_key is None):
            raise ValueError("curve_server_key and curve_key go together (CURVE needs both)")
        if curve_server_key is not None and coordinator is None:
            raise ValueError("CURVE keys are for an external coordinator (coordinator=...); the one the runner "
                             "starts listens on loopback without CURVE")
        self.curve = (curve_server_key, curve_key) if curve_server_key else None
        if metrics_port is not None and not 1 <= metrics_port <= 65535 - MAX_METRICS_PORTS:
            raise ValueError(f"metrics port must be 1..{65535 - MAX_METRICS_PORTS} (member-N serves on "
                             f"port+N), got {metrics_port}")
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        self.coordinator_proc: Any = None
        self.members: dict[str, MemberProc] = {}
        self._next_index = 0
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._supervisor: threading.Thread | None = None
        self.failed: str | None = None
        self.failed_code: int | None = None
        self.events: list[dict] = []  # (time, kind, member): starts, deaths, restarts, kills

    # ------------------------------------------------------------------ life cycle
    def start(self) -> Region:
        from cr_consumer.runtime.member.setup import load_pipeline_module

        load_pipeline_module(self.pipeline)  # fail here, clearly, not in N member logs
        self._check_kafka_settings()
        self.output_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / "logs").mkdir(parents=True, exist_ok=True)
        if self.endpoint is None:
            from coordinator.launcher import CoordinatorProcess

            self.coordinator_proc = CoordinatorProcess(
                self.state_dir / "coordinator", http="auto", log_path=self.state_dir / "logs" / "coordinator.log")
            self.coordinator_proc.start()
            self.endpoint = self.coordinator_proc.endpoint
            log.info("coordinator started at %s (pid %s)", self.endpoint, self.coordinator_proc.pid)
        with self._lock:
            for _ in range(self.n_members):
                self._add(min_members=self.n_members)
        self._supervisor = threading.Thread(target=self._supervise, name="region-supervisor", daemon=True)
        self._supervisor.start()
        return self

    def _check_kafka_settings(self) -> None:
        """The Kafka properties and region timeouts as a member's source will check
        them (its topics come from the pipeline's build(), which only a member runs:
        a placeholder stands in), so a bad one fails here rather than in every member."""
        from cr_consumer.operator.config import ConfigError, OperatorConfig

        try:
            OperatorConfig(bootstrap_servers=self.bootstrap, group_id=self.group, operator_name="member-0",
                           coordinator=self.endpoint or "tcp://127.0.0.1:1", topics=("placeholder",),
                           region_index=self.region_index, consumer_properties=self.kafka,
                           drain_timeout_s=float(self.region_settings["drain_timeout_s"]),
                           reset_timeout_s=float(self.region_settings["reset_timeout_s"]))
        except (ConfigError, TypeError, ValueError) as exc:
            raise SettingsError(f"Kafka settings: {exc}") from None

    def stop(self) -> None:
        self._stop.set()
        if self._supervisor is not None:
            self._supervisor.join(5.0)
        with self._lock:
            for m in self.members.values():
                if m.proc is not None and m.proc.poll() is None:
                    m.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            for m in self.members.values():
                self._reap(m, deadline)
        if self.coordinator_proc is not None:
            self.coordinator_proc.terminate()

    def __enter__(self) -> Region:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ members
    def _command(self, name: str, min_members: int) -> list[str]:
        from cr_consumer.cli.member import member_argv

        return member_argv(self.python, self.pipeline, name=name, coordinator=self.endpoint,
                           bootstrap=self.bootstrap, group=self.group, output_dir=str(self.output_dir),
                           state_dir=str(self.state_dir), region_index=self.region_index, min_members=min_members,
                           region=self.region_settings, params=self.params,
                           kafka_stdin=self._kafka_stdin is not None,
                           log_level=self.log_level, log_format=self.log_format, curve=self.curve, metrics=self.metrics_bind(name))

    def metrics_bind(self, name: str) -> tuple[str, int] | None:
        """member-N's /metrics: metrics_port + N, the same port across restarts."""
        if self.metrics_port is None:
            return None
        index = int(name.rsplit("-", 1)[1])
        if index >= MAX_METRICS_PORTS:
            raise ValueError(f"{name}: more than {MAX_METRICS_PORTS} members with metrics ports")
        return self.metrics_host, self.metrics_port + index

    def metrics_addresses(self) -> dict[str, str]:
        """HOST:PORT of each live member's /metrics (empty without metrics_port)."""
        with self._lock:
            names = [name for name, m in self.members.items() if not m.removed]
        out = {}
        for name in names:
            bind = self.metrics_bind(name)
            if bind is not None:
                out[name] = f"{bind[0]}:{bind[1]}"
        return out

    def _spawn(self, m: MemberProc, min_members: int | None = None) -> None:
        if m.log_file is None:
            m.log_file = open(self.state_dir / "logs" / f"{m.name}.log", "ab")  # noqa: SIM115 (closed in _reap)
        env = dict(os.environ)
        env.update(self.env)
        root = str(Path(__file__).resolve().parents[3])  # the repository root (the package is cr_consumer/runtime/runner)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        stdin = subprocess.PIPE if self._kafka_stdin is not None else subprocess.DEVNULL
        m.proc = subprocess.Popen(self._command(m.name, min_members or 1), stdout=m.log_file,
                                  stderr=subprocess.STDOUT, stdin=stdin, env=env,
                                  preexec_fn=die_with_parent_preexec())
        if self._kafka_stdin is not None:
            self._hand_kafka_properties(m)
        m.last_start = time.monotonic()
        self._event("start", m.name, pid=m.proc.pid)
        log.info("started %s (pid %d)", m.name, m.proc.pid)

    def _hand_kafka_properties(self, m: MemberProc) -> None:
        """Write the properties to the new member's stdin and close it. The document
        fits a pipe buffer (encode_for_stdin bounds it), so this does not wait for
        the member; a member that died at once (broken pipe) is the supervisor's."""
        assert m.proc is not None and m.proc.stdin is not None and self._kafka_stdin is not None
        try:
            m.proc.stdin.write(self._kafka_stdin)
        except BrokenPipeError:
            log.warning("%s exited before it read its Kafka properties", m.name)
        finally:
            try:
                m.proc.stdin.close()
            except BrokenPipeError:
                pass

    def _add(self, min_members: int = 1) -> str:
        name = f"member-{self._next_index}"
        self._next_index += 1
        m = MemberProc(name)
        self.members[name] = m
        self._spawn(m, min_members)
        return name

    def add_member(self) -> str:
        """Start one more member process; returns its name."""
        with self._lock:
            return self._add()

    def remove_member(self, name: str | None = None) -> str:
        """Stop a member for good (SIGTERM: it leaves the region and the group)."""
        with self._lock:
            live = [n for n, m in self.members.items() if not m.removed]
            if not live:
                raise ValueError("no member to remove")
            name = name or live[-1]
            m = self.members[name]
            m.removed = True
            if m.proc is not None and m.proc.poll() is None:
                m.proc.send_signal(signal.SIGTERM)
            self._event("remove", name)
            self._reap(m, time.monotonic() + STOP_TIMEOUT_S)
            return name

    def kill(self, name: str, sig: int = signal.SIGKILL) -> int:
        """Send ``sig`` (SIGKILL) to a member; the supervisor restarts it. Returns the pid."""
        with self._lock:
            m = self.members[name]
            if m.proc is None or m.proc.poll() is not None:
                raise ValueError(f"{name} is not running")
            pid = m.proc.pid
            m.proc.send_signal(sig)
            self._event("kill", name, pid=pid, signal=int(sig))
            return pid

    def kill_coordinator(self) -> int | None:
        """SIGKILL the coordinator this handle started; the supervisor restarts it."""
        if self.coordinator_proc is None:
            raise ValueError("this region uses an external coordinator")
        with self._lock:
            pid = self.coordinator_proc.pid
            self.coordinator_proc.kill()
            self._event("kill", "coordinator", pid=pid)
            return pid

    @property
    def http_address(self) -> str | None:
        """HOST:PORT of the coordinator's /metrics and /status (when this handle started it)."""
        return self.coordinator_proc.http_address if self.coordinator_proc is not None else None

    def pids(self) -> dict[str, int | None]:
        with self._lock:
            return {n: (m.proc.pid if m.proc is not None and m.proc.poll() is None else None)
                    for n, m in self.members.items() if not m.removed}

    def live_members(self) -> list[str]:
        with self._lock:
            return [n for n, m in self.members.items() if not m.removed]

    def restarts(self) -> dict[str, int]:
        with self._lock:
            return {n: m.restarts for n, m in self.members.items()}

    # ------------------------------------------------------------------ observation
    def status(self, timeout: float = STATUS_TIMEOUT_S) -> dict[str, Any]:
        """The controller's view: phase, members, last consistent checkpoint, counters, events."""
        from coordinator.client import CoordinatorClient

        kwargs: dict[str, Any] = {}
        if self.curve is not None:
            from coordinator.security import load_keypair, load_public_key

            kwargs = {"curve_server_key": load_public_key(self.curve[0]), "curve_keypair": load_keypair(self.curve[1])}
        with CoordinatorClient(self.endpoint, timeout=timeout, **kwargs) as client:
            reply = client.request("region_status", {"region": self.group}, timeout)
        out = dict(reply["region"])
        out["events"] = reply.get("events", [])
        return out

    def wait_until(self, predicate: Callable[[dict], bool], timeout: float, interval: float = 0.1) -> dict:
        """Poll ``status()`` until ``predicate(status)``; raises TimeoutError with the last
        status, or RegionFailed when the region failed meanwhile."""
        deadline = time.monotonic() + timeout
        last: dict | None = None
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            try:
                last = self.status(timeout=min(STATUS_TIMEOUT_S, max(0.2, deadline - time.monotonic())))
            except Exception as exc:  # the coordinator may be restarting or the region not created yet
                last_error = exc
                last = None
            if last is not None:
                if predicate(last):
                    return last
                if last.get("phase") == "FAILED":
                    raise RegionFailed(f"region {self.group} FAILED: {last.get('failed_reason')}")
            if self.failed:
                raise RegionFailed(self.failed)
            time.sleep(interval)
        raise TimeoutError(f"region {self.group}: condition not met within {timeout}s; last status {last!r}"
                           + (f"; last error {last_error!r}" if last is None and last_error else ""))

    def _event(self, kind: str, member: str, **info: Any) -> None:
        self.events.append({"t": time.time(), "kind": kind, "member": member, **info})

    # ------------------------------------------------------------------ supervisor
    def _reap(self, m: MemberProc, deadline: float) -> None:
        if m.proc is not None:
            try:
                m.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop in time: SIGKILL", m.name)
                m.proc.kill()
                m.proc.wait(5.0)
        if m.log_file is not None:
            m.log_file.close()
            m.log_file = None

    def _supervise(self) -> None:
        while not self._stop.wait(SUPERVISE_S):
            try:
                self._check_members()
                self._check_coordinator()
            except Exception:  # keep supervising; the next round retries
                log.exception("region supervisor: check failed")

    def _check_members(self) -> None:
        now = time.monotonic()
        with self._lock:
            for m in self.members.values():
                if m.removed or m.proc is None:
                    continue
                code = m.proc.poll()
                if code is None:
                    continue
                if m.next_start == 0.0:  # first time we see it dead
                    m.exit_codes.append(code)
                    self._event("exit", m.name, pid=m.proc.pid, code=code)
                    reason = self.last_error(m.name)
                    if code in (2, 3):
                        self.failed_code = code
                        self.failed = (f"{m.name} exited with code {code} "
                                       f"({'region FAILED' if code == 3 else 'bad settings'})"
                                       + (f": {reason}" if reason else "") + "; see its log "
                                       f"{self.state_dir / 'logs' / (m.name + '.log')}")
                        log.error("%s", self.failed)
                        m.removed = True
                        continue
                    if not self.restart_members:
                        m.removed = True
                        continue
                    m.schedule_restart(now)  # at once, unless it keeps dying (member_proc.py)
                    log.warning("%s (pid %d) exited with code %s; restarting in %.1fs%s", m.name, m.proc.pid, code,
                                m.delay, f" (last error: {reason})" if reason else "")
                if now >= m.next_start:
                    m.next_start = 0.0
                    m.restarts += 1
                    self._spawn(m)
                    self._event("restart", m.name, pid=m.proc.pid)

    def last_error(self, name: str) -> str | None:
        """The message of the last ERROR (or CRITICAL) record in a member's log, read
        from its last :data:`LOG_TAIL_BYTES`; text or JSON log format. A record of the
        member's own loggers (:data:`MEMBER_LOGGERS`, which name the cause and the
        address) wins over a later one of its threads or libraries."""
        path = self.state_dir / "logs" / f"{name}.log"
        try:
            with open(path, "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - LOG_TAIL_BYTES))
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError as exc:
            log.warning("%s: cannot read its log %s: %s", name, path, exc)
            return None
        errors = [e for e in map(_error_record, lines) if e is not None]
        own = [message for logger, message in errors if logger in MEMBER_LOGGERS]
        if own or errors:
            return (own or [errors[-1][1]])[-1][:MAX_ECHO_CHARS]
        return None

    def _check_coordinator(self) -> None:
        c = self.coordinator_proc
        with self._lock:
            if c is None or self._stop.is_set() or c.running:
                return
            log.warning("coordinator exited (%s); restarting it on %s", c.returncode, self.endpoint)
            c.restart()
            self._event("restart", "coordinator", pid=c.pid)

    # ------------------------------------------------------------------ exit code
    def exit_code(self) -> int:
        """0, or the failing member's code: 2 bad settings, 3 region FAILED."""
        if self.failed:
            return self.failed_code or 3
        return 0


def _error_record(line: str) -> tuple[str, str] | None:
    """(logger, message) of one log line when it is an ERROR/CRITICAL record, else None."""
    if line.startswith("{"):
        try:
            doc = json.loads(line)
        except ValueError:
            return None
        if isinstance(doc, dict) and doc.get("level") in ("ERROR", "CRITICAL"):
            return str(doc.get("logger", "")), str(doc.get("msg", ""))
        return None
    for level in (" ERROR ", " CRITICAL "):
        head, sep, tail = line.partition(level)
        if sep and head[:4].isdigit():  # "<asctime> ERROR <logger> [<thread>] <message>"
            logger, _, rest = tail.partition(" ")
            return logger, rest.partition("] ")[2] or rest
    return None


def run_pipeline(pipeline: str, **kwargs: Any) -> Region:
    """Start a region for ``pipeline`` (module name or .py path) and return its handle."""
    return Region(pipeline, **kwargs).start()
