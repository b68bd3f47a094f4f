"""How the runner starts one member process (``crkafka member``).

:meth:`MemberLauncher.launch`:

1. Open the member's log ``<state_dir>/logs/<name>.log`` (appended over
   restarts; the :class:`~cr_consumer.runtime.runner.member_proc.MemberProc`
   holds it until the process is reaped).
2. Start ``argv(name, min_members)`` with the caller's environment plus
   ``extra_env``, this source tree first on ``PYTHONPATH``, stdout and stderr to
   the log, and the parent-death signal (a killed runner leaves no member behind).
3. Kafka properties, when there are any, go to the member as JSON on its stdin,
   written then closed, never on its command line where any local user could
   read them (``ps``). The document fits a pipe buffer (``encode_for_stdin``
   bounds it), so this does not wait for the member; a member that died at once
   (broken pipe) is the supervisor's to restart.

:meth:`MemberLauncher.hand_over` gives a member's identity to a warm standby
instead, :meth:`MemberLauncher.spawn_standby` starts one (``standby.py``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import BinaryIO

import cr_consumer
from coordinator.protocol.common.osutil import die_with_parent_preexec
from cr_consumer.runtime.runner.handoff import Handoff, HandoffError
from cr_consumer.runtime.runner.member_proc import MemberProc
from cr_consumer.runtime.runner.standby_proc import HandoffFailed, StandbyProc, StandbyState

log = logging.getLogger(__name__)

#: The directory holding the ``cr_consumer`` package: first on the members'
#: ``PYTHONPATH`` so they run this source tree. Never a directory inside the
#: package, whose sub-packages (``operator``, ``kafka``) would shadow the
#: standard library's and kafka-python's modules of the same name.
SOURCE_ROOT = Path(cr_consumer.__file__).resolve().parent.parent
#: The member's command line for (name, members the first reset waits for).
Argv = Callable[[str, int], list[str]]
#: The module a member's command line runs (``member_argv``): a standby is
#: handed the arguments that follow ``python -m MEMBER_MODULE``.
MEMBER_MODULE = "cr_consumer.cli.member"
#: The standby's module (``cr_consumer/cli/standby.py``).
STANDBY_MODULE = "cr_consumer.cli.standby"
#: Bound on a hand-over, from writing it to the standby's answer (under a
#: millisecond at the median, at most 0.1 s seen at load 10: BENCHMARKS.md).
#: Without it a standby stopped (SIGSTOP) or wedged at the hand-over would hold the member's identity without ever running it: the
#: supervisor sees a live process, the region waits for a member that never
#: joins. After it the standby is killed and the member started cold, so a
#: hand-over never costs more than this on top of a cold start.
HANDOFF_TIMEOUT_S = 1.0


class MemberLauncher:
    """Starts member processes; called under the supervisor's lock only."""

    def __init__(
        self,
        argv: Argv,
        log_dir: Path,
        *,
        extra_env: dict[str, str] | None = None,
        kafka_stdin: bytes | None = None,
        standby_argv: list[str] | None = None,
    ) -> None:
        self._argv = argv
        self.log_dir = log_dir
        self._extra_env = dict(extra_env or {})
        self._kafka_stdin = kafka_stdin
        #: The standby's command line (``python -m cr_consumer.cli.standby PIPELINE``); None: no standby.
        self.standby_argv = list(standby_argv) if standby_argv is not None else None

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self._extra_env)
        root = str(SOURCE_ROOT)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return env

    def launch(self, m: MemberProc, min_members: int = 1) -> None:
        """Start ``m``'s process (steps 1-3); sets ``m.proc``, ``m.log_file``, ``m.last_start``."""
        if m.log_file is None:
            m.log_file = open(self.log_path(m.name), "ab")  # noqa: SIM115 (closed when the process is reaped)
        stdin = subprocess.PIPE if self._kafka_stdin is not None else subprocess.DEVNULL
        m.proc = subprocess.Popen(
            self._argv(m.name, min_members),
            stdout=m.log_file,
            stderr=subprocess.STDOUT,
            stdin=stdin,
            env=self._env(),
            preexec_fn=die_with_parent_preexec(),
        )
        if self._kafka_stdin is not None:
            self._hand_kafka_properties(m, self._kafka_stdin)
        m.last_start = time.monotonic()
        log.info("started %s (pid %d)", m.name, m.proc.pid)

    def spawn_standby(self, log_file: BinaryIO) -> StandbyProc:
        """Start a standby: its stdin a pipe for the hand-over, its output to
        ``log_file``, and the write end of a status pipe passed as ``--status-fd N``
        (``handoff.py``: it says ``ready``, then answers the hand-over there)."""
        if self.standby_argv is None:
            raise ValueError("this launcher has no standby command")
        status_r, status_w = os.pipe()
        try:
            proc = subprocess.Popen(
                [*self.standby_argv, "--status-fd", str(status_w)],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.PIPE,
                pass_fds=(status_w,),
                env=self._env(),
                preexec_fn=die_with_parent_preexec(),
            )
        except BaseException:
            os.close(status_r)
            raise
        finally:
            os.close(status_w)  # the standby's copy only: its end is the pipe's end
        return StandbyProc(proc, status_r, time.monotonic())

    def hand_over(self, m: MemberProc, standby: StandbyProc, min_members: int = 1) -> None:
        """Make the READY ``standby`` member ``m`` (``standby_proc.py`` step 2): write
        the hand-over and the Kafka properties (as a cold start's step 3), close
        its stdin, wait for its answer, all within HANDOFF_TIMEOUT_S. Returns once ``m.proc`` is the
        standby and ``m.last_start`` set; HandoffFailed (``m`` unchanged, the
        standby ENDED: the caller reaps it and starts ``m`` cold) otherwise."""
        cmd = self._argv(m.name, min_members)
        if cmd[1:3] != ["-m", MEMBER_MODULE]:
            standby.machine.to(StandbyState.ENDED, "not handed a member command")
            raise HandoffFailed(f"the member command {cmd[:3]} is not {MEMBER_MODULE}'s")
        try:
            document = Handoff(argv=tuple(cmd[3:]), log=str(self.log_path(m.name))).encode()
        except HandoffError as exc:
            standby.machine.to(StandbyState.ENDED, "the hand-over does not encode")
            raise HandoffFailed(str(exc)) from None
        took = standby.hand_over(document + (self._kafka_stdin or b""), HANDOFF_TIMEOUT_S)
        if took != m.name:  # it runs the argv it was handed; a different name is its bug, logged
            log.warning("%s: the standby (pid %d) answered with member %r", m.name, standby.pid, took)
        m.proc = standby.proc
        m.last_start = time.monotonic()
        log.info("started %s on the standby (pid %d)", m.name, standby.pid)

    @staticmethod
    def _hand_kafka_properties(m: MemberProc, document: bytes) -> None:
        assert m.proc is not None
        assert m.proc.stdin is not None
        try:
            m.proc.stdin.write(document)
            m.proc.stdin.flush()  # a broken pipe shows here, not in close()
        except BrokenPipeError:
            log.warning("%s exited before it read its Kafka properties", m.name)
        finally:
            # close() re-flushing what the dead member never read: logged above
            with contextlib.suppress(BrokenPipeError):
                m.proc.stdin.close()


#: Region settings a settings dict may leave out, and the member flag of each.
OPTIONAL_REGION_FLAGS = {
    "failure_memory_s": "--failure-memory",
    "reset_backoff_s": "--reset-backoff",
    "reset_backoff_max_s": "--reset-backoff-max",
}


def member_argv(
    python: str,
    pipeline: str,
    *,
    name: str,
    coordinator: str,
    bootstrap: str,
    group: str,
    output_dir: str,
    state_dir: str,
    region_index: int,
    min_members: int,
    region: Mapping[str, object],
    params: Mapping[str, object],
    kafka_stdin: bool,
    kafka_client: str | None = None,
    log_level: str = "INFO",
    log_format: str = "text",
    curve: tuple[str, str] | None = None,
    metrics: tuple[str, int] | None = None,
) -> list[str]:
    """The command line of one member process (what ``crkafka run`` spawns), the
    inverse of ``cr_consumer.cli.member.add_arguments`` (a test parses it back);
    ``region`` is a region-settings dict as ``cli.member.region_settings`` returns. Kafka properties are never on it: with
    ``kafka_stdin`` the member reads them from stdin
    (``properties.encode_for_stdin``)."""
    cmd = [
        python,
        "-m",
        "cr_consumer.cli.member",
        "--log-level",
        str(log_level),
        "--log-format",
        log_format,
        pipeline,
        "--coordinator",
        coordinator,
        "--bootstrap",
        bootstrap,
        "--group",
        group,
        "--name",
        name,
        "--out",
        str(output_dir),
        "--state-dir",
        str(state_dir),
        "--region-index",
        str(region_index),
        "--min-members",
        str(min_members),
        "--period",
        str(region["period_s"]),
        "--drain-timeout",
        str(region["drain_timeout_s"]),
        "--reset-timeout",
        str(region["reset_timeout_s"]),
        "--max-resets",
        str(region["max_consecutive_resets"]),
        "--member-timeout",
        str(region["member_timeout_s"]),
    ]
    for key, flag in OPTIONAL_REGION_FLAGS.items():  # absent: the member's default
        if key in region:
            cmd += [flag, str(region[key])]
    if region["mode"] == "operator_driven":
        cmd.append("--operator-driven")
    for k, v in params.items():
        cmd += ["--param", f"{k}={v}"]
    if kafka_stdin:
        cmd.append("--kafka-stdin")
    if kafka_client is not None:
        cmd += ["--kafka-client", kafka_client]
    if curve is not None:
        cmd += ["--curve-server-key", str(curve[0]), "--curve-keypair", str(curve[1])]
    if metrics is not None:
        cmd += ["--metrics-host", metrics[0], "--metrics-port", str(metrics[1])]
    return cmd
