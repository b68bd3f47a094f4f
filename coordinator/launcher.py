"""Start, stop, kill and restart a ``cr-coordinator`` process (tests, ``crkafka run``, drills, demos).

Life cycle of :class:`CoordinatorProcess`:

1. ``start()`` runs ``python -m coordinator --bind B --state-dir D [--http H]
   [extra args]`` with stderr (its log) going to ``log_path``. With
   ``bind=None`` the coordinator binds a free loopback port (``tcp://127.0.0.1:*``);
   ``http="auto"`` picks a free HTTP port the same way.
2. It waits for the process's ``ready endpoint=... http=...`` line (bounded
   by ``start_timeout``), then probes it with a client until it answers a ping
   itself (``CoordinatorClient.probe``: a standby's redirect is not followed),
   i.e. the log replay is done (same bound). A process that exits or never
   gets ready raises :class:`CoordinatorStartError` with the tail of its log.
3. The resolved endpoint and HTTP address are kept: ``restart()`` binds the
   same ones, so clients keep working across a restart.
4. ``terminate()`` sends SIGTERM (clean shutdown) and waits ``STOP_TIMEOUT_S``,
   then SIGKILL; ``kill()`` sends SIGKILL at once (the crash drill). Both
   reap the process and join the thread reading its stdout (it ends at the
   process's EOF; ``PUMP_JOIN_S`` bounds the join).
"""

from __future__ import annotations

import logging
import math
import os
import queue
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any, BinaryIO

from coordinator.protocol.common.osutil import die_with_parent_preexec
from coordinator.protocol.common.waiting import WaitTimeout, wait_until

log = logging.getLogger(__name__)

#: Bound on waiting for the ready line and the first successful ping, so a
#: coordinator that cannot bind or load turns into an error, not a hang.
START_TIMEOUT_S = 30.0
#: How long terminate() waits after SIGTERM before SIGKILL, and any wait for
#: the process to end: a coordinator wedged in shutdown cannot hang the caller.
STOP_TIMEOUT_S = 10.0
#: Bound of one probe while waiting for the coordinator to answer: a loading one answers
#: LOAD_IN_PROGRESS at once, so this only bounds a ping lost on a fresh connection.
PROBE_S = 0.5
#: Bound on joining the stdout reader once the process ended (it sees EOF at
#: once), so a descendant still holding the pipe cannot hang stop.
PUMP_JOIN_S = 2.0


def _child_preexec(max_open_files: int | None) -> Callable[[], None] | None:
    """``die_with_parent_preexec``, plus an RLIMIT_NOFILE for the child when given."""
    die = die_with_parent_preexec()
    if max_open_files is None:
        return die

    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max_open_files, max_open_files))
        if die is not None:
            die()

    return preexec


def _check_wait(name: str, seconds: float) -> None:
    """A wait bound must be finite and > 0: an infinite or NaN one never ends."""
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"{name} must be a finite number of seconds > 0, got {seconds!r}")


class CoordinatorStartError(RuntimeError):
    """The coordinator process exited or did not become ready in time."""


class CoordinatorProcess:
    def __init__(
        self,
        state_dir: str | Path,
        *,
        bind: str | None = None,
        http: str | None = None,
        extra_args: Sequence[str] = (),
        log_path: str | Path | None = None,
        start_timeout: float = START_TIMEOUT_S,
        client_kwargs: dict[str, Any] | None = None,
        python: str = sys.executable,
        max_open_files: int | None = None,
    ) -> None:
        _check_wait("start_timeout", start_timeout)
        self.state_dir = Path(state_dir)
        self._bind = bind or "tcp://127.0.0.1:*"
        self._http = "127.0.0.1:0" if http == "auto" else http
        self.extra_args = list(extra_args)
        self.log_path = (
            Path(log_path) if log_path else self.state_dir.with_name(self.state_dir.name + ".coordinator.log")
        )
        self.start_timeout = start_timeout
        self.client_kwargs = dict(client_kwargs or {})
        self._python = python
        #: RLIMIT_NOFILE (soft and hard) of the child, for tests of descriptor exhaustion.
        self.max_open_files = max_open_files
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: BinaryIO | None = None
        self._pump: threading.Thread | None = None  # reads the child's stdout until EOF
        self.endpoint: str | None = None
        self.http_address: str | None = None

    # ------------------------------------------------------------------ control

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, *, serve: bool = True) -> CoordinatorProcess:
        """Start the process and wait for its ready line, then (``serve``) until it answers a
        ping; a standby (``--standby``) answers none before it takes over: ``serve=False``."""
        if self.running:
            raise RuntimeError(f"coordinator already running (pid {self.pid})")
        bind = self.endpoint or self._bind
        http = self.http_address or self._http
        cmd = [self._python, "-m", "coordinator", "--bind", bind, "--state-dir", str(self.state_dir)]
        if http:
            cmd += ["--http", http]
        cmd += self.extra_args
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 (closed in _reap)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        try:
            self._proc = subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=self._log_file,
                env=env,
                preexec_fn=_child_preexec(self.max_open_files),
            )
        except OSError:
            self._reap()
            raise
        lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        assert self._proc.stdout is not None  # stdout=PIPE
        self._pump = threading.Thread(
            target=_pump, args=(self._proc.stdout, lines), name=f"coordinator-stdout-{self._proc.pid}", daemon=True
        )
        self._pump.start()
        deadline = time.monotonic() + self.start_timeout
        try:
            ready = self._wait_ready(lines, deadline)
            self.endpoint = ready["endpoint"]
            self.http_address = None if ready.get("http", "-") == "-" else ready["http"]
            if serve:
                self._wait_ping(deadline)
        except BaseException:  # re-raised: a process that did not become ready is not left behind
            self.kill()
            raise
        return self

    def _wait_ready(self, lines: queue.SimpleQueue[str | None], deadline: float) -> dict[str, str]:
        """The fields of the child's ``ready`` line, read before ``deadline``."""
        assert self._proc is not None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CoordinatorStartError(f"coordinator not ready within {self.start_timeout}s\n{self.log_tail()}")
            try:
                line = lines.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if line is None:
                code = self._proc.wait(STOP_TIMEOUT_S)
                raise CoordinatorStartError(f"coordinator exited with {code} during start-up\n{self.log_tail()}")
            if line.startswith("ready "):
                fields = dict(kv.partition("=")[::2] for kv in line.split()[1:])
                if "endpoint" not in fields:
                    raise CoordinatorStartError(f"coordinator printed a ready line without its endpoint: {line!r}")
                return fields

    def _wait_ping(self, deadline: float) -> None:
        """Probe until the process answers a ping itself (the replay is done), the process exits,
        or the deadline."""
        from coordinator.client import CoordinatorClient, EndpointRole

        kwargs = {"timeout": PROBE_S, "try_timeout": PROBE_S, **self.client_kwargs}
        assert self.endpoint is not None  # set from the ready line before the first ping
        client = CoordinatorClient(self.endpoint, **kwargs)
        unanswered = "no answer yet"

        def answered() -> bool:
            nonlocal unanswered
            if self._proc is None or self._proc.poll() is not None:
                code = self._proc.wait(STOP_TIMEOUT_S) if self._proc else None
                self._reap()
                raise CoordinatorStartError(f"coordinator exited with {code} while loading\n{self.log_tail()}")
            role = client.probe(PROBE_S).role
            unanswered = f"its last answer: {role.value}"
            return role is EndpointRole.LEADER

        try:
            wait_until(answered, max(0.0, deadline - time.monotonic()), "the coordinator to answer a ping")
        except WaitTimeout:
            self.kill()
            raise CoordinatorStartError(
                f"coordinator bound but not answering ({unanswered})\n{self.log_tail()}"
            ) from None
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL, no clean shutdown (the crash drill)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGKILL)
            self._proc.wait(STOP_TIMEOUT_S)
        self._reap()

    def terminate(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM and wait for the clean shutdown (SIGKILL after ``timeout``); returns the exit code."""
        _check_wait("timeout", timeout)
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(STOP_TIMEOUT_S)
        code = self._proc.returncode
        self._reap()
        return code

    def restart(self, *, hard: bool = False) -> CoordinatorProcess:
        """Stop (SIGKILL if ``hard``, else SIGTERM) and start again on the same endpoint and state."""
        if hard:
            self.kill()
        else:
            self.terminate()
        return self.start()

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode if self._proc else None

    def _reap(self) -> None:
        """After the process ended: join its stdout reader, close its log."""
        if self._pump is not None:
            self._pump.join(PUMP_JOIN_S)
            if self._pump.is_alive():
                log.warning("the stdout reader of coordinator pid %s did not end within %.0fs", self.pid, PUMP_JOIN_S)
            self._pump = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> CoordinatorProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.terminate()


def _pump(stream: IO[bytes], lines: queue.SimpleQueue[str | None]) -> None:
    """Forward the child's stdout lines until EOF (owned by the child's lifetime)."""
    try:
        for raw in stream:
            lines.put(raw.decode(errors="replace").strip())
    finally:
        lines.put(None)
        stream.close()
