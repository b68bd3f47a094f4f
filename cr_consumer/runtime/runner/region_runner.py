"""Run a pipeline as a region of member processes, from Python or ``crkafka run``.

``run_pipeline(pipeline, members=3, bootstrap=...)`` (or ``Region(...).start()``)
returns a :class:`Region` handle (a :class:`~cr_consumer.runtime.runner.handle.RegionHandle`):

1. Start a coordinator process (``coordinator.launcher``) unless an endpoint is
   given; it holds the region controller.
2. Start N ``crkafka member`` processes (``python -m cr_consumer.cli.member``),
   named ``member-0`` ... ``member-<N-1>``, each logging to
   ``<state_dir>/logs/<name>.log`` (``launch.py``: Kafka properties on stdin,
   never on a command line).
   With ``metrics_port`` (``crkafka run --metrics-port BASE``) member-N
   serves Prometheus ``/metrics`` on ``metrics_host:BASE+N``: ports are a
   function of the member's name, so a restarted member keeps its port and
   scrape targets never change; an added member takes the next index.
3. The supervisor (``supervisor.py``, a thread owned by the handle) restarts
   members that die and the coordinator this handle started, on a warm standby
   with ``standby`` (the default when members are restarted); a member's final
   exit sets ``failed``.
4. ``stop()`` (also on Ctrl-C / SIGTERM in ``crkafka run``): stop the
   supervisor, the standby, SIGTERM every member (SIGKILL after
   ``supervisor.STOP_TIMEOUT_S``), then the coordinator.

The fault handles for drills and tests are :class:`~cr_consumer.runtime.runner.handle.RegionHandle`'s,
plus ``kill_coordinator()``, ``status()`` (the controller's typed ``RegionStatus``,
``coordinator/protocol/region/status.py``), ``report()`` (it and the controller's
recent events) and ``wait_until(predicate, timeout)``.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coordinator.launcher import CoordinatorProcess
from coordinator.protocol.region.status import RegionReport, RegionStatus
from cr_consumer.exit_code import ExitCode
from cr_consumer.kafka.properties import encode_for_stdin
from cr_consumer.runtime.member.setup import SettingsError, default_stem
from cr_consumer.runtime.runner.launch import STANDBY_MODULE, MemberLauncher, member_argv
from cr_consumer.runtime.runner.member_proc import last_error
from cr_consumer.runtime.runner.region_status import STATUS_TIMEOUT_S, region_report, wait_for_status
from cr_consumer.runtime.runner.supervisor import MemberSupervisor, NotRunning

log = logging.getLogger(__name__)

#: Member processes of one region at once (start and add_member): they all run
#: on this host, so a typo in ``--members`` must not fork the machine to death.
MAX_MEMBERS = 1000
#: Members with a metrics port (metrics_port + N for member-N): bounds the
#: port range a region takes so a base port is checked once, up front.
MAX_METRICS_PORTS = 1000


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
        output_dir: str | os.PathLike[str] = "out",
        state_dir: str | os.PathLike[str] = "state",
        period_s: float = 1.0,
        operator_driven: bool = False,
        drain_timeout_s: float = 30.0,
        reset_timeout_s: float = 30.0,
        max_consecutive_resets: int = 5,
        failure_memory_s: float = 60.0,
        reset_backoff_s: float = 0.5,
        reset_backoff_max_s: float = 30.0,
        member_timeout_s: float = 5.0,
        region_index: int = 0,
        params: dict[str, object] | None = None,
        kafka: dict[str, Any] | None = None,
        kafka_client: str | None = None,
        restart_members: bool = True,
        log_level: str = "INFO",
        log_format: str = "text",
        python: str = sys.executable,
        env: dict[str, str] | None = None,
        curve_server_key: str | None = None,
        curve_keypair: str | None = None,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
        standby: bool = True,
    ) -> None:
        if isinstance(members, bool) or not isinstance(members, int) or not 1 <= members <= MAX_MEMBERS:
            raise ValueError(f"members must be an integer in 1..{MAX_MEMBERS}, got {members!r}")
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
            "failure_memory_s": failure_memory_s,
            "reset_backoff_s": reset_backoff_s,
            "reset_backoff_max_s": reset_backoff_max_s,
            "member_timeout_s": member_timeout_s,
        }
        self.region_index = region_index
        self.params = dict(params or {})
        self.kafka = dict(kafka or {})
        #: The members' Kafka client (``crkafka member --kafka-client``); None: the pipeline's choice.
        self.kafka_client = kafka_client
        self._kafka_stdin = encode_for_stdin(self.kafka) if self.kafka else None  # checks the size up front
        self.restart_members = restart_members
        self.log_level = log_level
        self.log_format = log_format
        self.python = python
        self.env = dict(env or {})
        if (curve_server_key is None) != (curve_keypair is None):
            raise ValueError("curve_server_key and curve_keypair go together (CURVE needs both)")
        if curve_server_key is not None and coordinator is None:
            raise ValueError(
                "CURVE keys are for an external coordinator (coordinator=...); the one the runner "
                "starts listens on loopback without CURVE"
            )
        self.curve: tuple[str, str] | None = (
            (curve_server_key, curve_keypair) if curve_server_key and curve_keypair else None
        )
        if metrics_port is not None and not 1 <= metrics_port <= 65535 - MAX_METRICS_PORTS:
            raise ValueError(
                f"metrics port must be 1..{65535 - MAX_METRICS_PORTS} (member-N serves on port+N), got {metrics_port}"
            )
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        #: Keep a warm standby member process (step 3); only when members are restarted.
        self.standby = bool(standby) and restart_members
        self.coordinator_proc: CoordinatorProcess | None = None
        self._supervisor: MemberSupervisor | None = None  # set by start()

    # ------------------------------------------------------------------ life cycle
    def start(self) -> Region:
        from cr_consumer.runtime.member.setup import load_pipeline_module

        load_pipeline_module(self.pipeline)  # fail here, clearly, not in N member logs
        self._check_kafka_settings()
        self.output_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / "logs").mkdir(parents=True, exist_ok=True)
        if self.endpoint is None:
            self.coordinator_proc = CoordinatorProcess(
                self.state_dir / "coordinator", http="auto", log_path=self.state_dir / "logs" / "coordinator.log"
            )
            self.coordinator_proc.start()
            self.endpoint = self.coordinator_proc.endpoint
            log.info("coordinator started at %s (pid %s)", self.endpoint, self.coordinator_proc.pid)
        launcher = MemberLauncher(
            self._command,
            self.state_dir / "logs",
            extra_env=self.env,
            kafka_stdin=self._kafka_stdin,
            standby_argv=self._standby_command(),
        )
        self._supervisor = MemberSupervisor(
            launcher, restart_members=self.restart_members, coordinator=self.coordinator_proc, standby=self.standby
        )
        try:
            self._supervisor.start(self.n_members)
        except BaseException:  # re-raised: stop what did start (members, the coordinator) first
            self.stop()
            raise
        return self

    def _check_kafka_settings(self) -> None:
        """The Kafka properties and region timeouts as a member's source will check
        them (its topics come from the pipeline's build(), which only a member runs:
        a placeholder stands in), so a bad one fails here rather than in every member."""
        from cr_consumer.operator.config import ConfigError, OperatorConfig

        try:
            OperatorConfig(
                bootstrap_servers=self.bootstrap,
                group_id=self.group,
                operator_name="member-0",
                coordinator=self.endpoint or "tcp://127.0.0.1:1",
                topics=("placeholder",),
                region_index=self.region_index,
                consumer_properties=self.kafka,
                client=self.kafka_client or "kafka-python",
                drain_timeout_s=float(self.region_settings["drain_timeout_s"]),
                reset_timeout_s=float(self.region_settings["reset_timeout_s"]),
            )
        except (ConfigError, TypeError, ValueError) as exc:
            raise SettingsError(f"Kafka settings: {exc}") from None

    def stop(self) -> None:
        """Step 4; the coordinator is terminated even when stopping the members raised."""
        try:
            if self._supervisor is not None:
                self._supervisor.stop()
        finally:
            if self.coordinator_proc is not None:
                self.coordinator_proc.terminate()

    def __enter__(self) -> Region:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ members
    def _command(self, name: str, min_members: int) -> list[str]:
        return member_argv(
            self.python,
            self.pipeline,
            name=name,
            coordinator=str(self.endpoint),
            bootstrap=self.bootstrap,
            group=self.group,
            output_dir=str(self.output_dir),
            state_dir=str(self.state_dir),
            region_index=self.region_index,
            min_members=min_members,
            region=self.region_settings,
            params=self.params,
            kafka_stdin=self._kafka_stdin is not None,
            kafka_client=self.kafka_client,
            log_level=self.log_level,
            log_format=self.log_format,
            curve=self.curve,
            metrics=self.metrics_bind(name),
        )

    def _standby_command(self) -> list[str]:
        cmd = [self.python, "-m", STANDBY_MODULE, self.pipeline]
        if self.kafka_client is not None:
            cmd += ["--kafka-client", self.kafka_client]
        return cmd

    def standby_pid(self) -> int | None:
        """The waiting standby's pid (None: no standby, or none ready now)."""
        return self._supervisor.standby_pid() if self._supervisor is not None else None

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
        out = {}
        for name in self.live_members():
            bind = self.metrics_bind(name)
            if bind is not None:
                out[name] = f"{bind[0]}:{bind[1]}"
        return out

    # ------------------------------------------------------------------ RegionHandle
    @property
    def supervisor(self) -> MemberSupervisor:
        if self._supervisor is None:
            raise NotRunning("the region is not started (Region.start())")
        return self._supervisor

    @property
    def failed(self) -> str | None:
        """Why the region failed (a member's final exit), or None."""
        return self._supervisor.failed if self._supervisor is not None else None

    @property
    def failed_code(self) -> ExitCode | None:
        return self._supervisor.failed_code if self._supervisor is not None else None

    @property
    def events(self) -> list[dict[str, Any]]:
        """Starts, exits, restarts, kills and removals, oldest first."""
        return list(self._supervisor.events) if self._supervisor is not None else []

    @property
    def members(self) -> list[str]:
        """Every member name started, removed ones included."""
        return self._supervisor.names() if self._supervisor is not None else []

    def add_member(self) -> str:
        """Start one more member process; returns its name. ValueError when
        MAX_MEMBERS are live already."""
        supervisor = self.supervisor
        if len(supervisor.live()) >= MAX_MEMBERS:
            raise ValueError(f"the region has {MAX_MEMBERS} live members already (MAX_MEMBERS)")
        return supervisor.add()

    def remove_member(self, name: str | None = None) -> str:
        """Stop a member for good (SIGTERM: it leaves the region and the group)."""
        return self.supervisor.remove(name)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> int:
        """Send ``sig`` (SIGKILL) to a member; the supervisor restarts it. Returns the pid."""
        return self.supervisor.kill(name, sig)

    def kill_coordinator(self) -> int | None:
        """SIGKILL the coordinator this handle started; the supervisor restarts it."""
        return self.supervisor.kill_coordinator()

    @property
    def http_address(self) -> str | None:
        """HOST:PORT of the coordinator's /metrics and /status (when this handle started it)."""
        return self.coordinator_proc.http_address if self.coordinator_proc is not None else None

    def pids(self) -> dict[str, int | None]:
        return self.supervisor.pids() if self._supervisor is not None else {}

    def pid(self, name: str) -> int:
        pid = self.pids().get(name)
        if pid is None:
            raise NotRunning(f"member {name!r} has no running process")
        return pid

    def live_members(self) -> list[str]:
        return self.supervisor.live() if self._supervisor is not None else []

    def running_members(self) -> list[str]:
        """Members whose process is running now (not those waiting for a restart)."""
        return [n for n, pid in self.pids().items() if pid]

    def restarts(self) -> dict[str, int]:
        return self.supervisor.restarts()

    # ------------------------------------------------------------------ observation
    def status(self, timeout: float = STATUS_TIMEOUT_S) -> RegionStatus:
        """The controller's view: phase, members, last consistent checkpoint, counters."""
        return self.report(timeout).region

    def report(self, timeout: float = STATUS_TIMEOUT_S) -> RegionReport:
        """The controller's view and its recent events about the region."""
        if self.endpoint is None:
            raise NotRunning("the region is not started (Region.start())")
        return region_report(self.endpoint, self.group, self.curve, timeout)

    def wait_until(
        self, predicate: Callable[[RegionStatus], bool], timeout: float, interval: float = 0.1
    ) -> RegionStatus:
        """Poll ``status()`` until ``predicate(status)``; raises TimeoutError with the last
        status, or RegionFailed when the region failed meanwhile (``region_status.py`` step 2)."""
        return wait_for_status(self, predicate, timeout, interval)

    def last_error(self, name: str) -> str | None:
        """The last ERROR line of a member's log (``member_proc.last_error``)."""
        return last_error(self.state_dir / "logs" / f"{name}.log")

    # ------------------------------------------------------------------ exit code
    def exit_code(self) -> ExitCode:
        """OK, or the failing member's final code (CONFIG, REGION_FAILED)."""
        if self.failed:
            return self.failed_code or ExitCode.REGION_FAILED
        return ExitCode.OK


def run_pipeline(pipeline: str, **kwargs: Any) -> Region:
    """Start a region for ``pipeline`` (module name or .py path) and return its handle."""
    return Region(pipeline, **kwargs).start()
