"""A member's life at the console: SIGTERM while it is still joining the
coordinator is honoured at once, and a member that fails on a bad setting has
its reason (its log's last ERROR line) printed by ``crkafka run``."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from support.paths import REPO as ROOT

BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    return env


def test_sigterm_while_joining_an_unreachable_coordinator_stops_the_member(tmp_path):
    # Nothing listens on the port: the member waits to join (60 s) unless SIGTERM stops it.
    coordinator = f"tcp://127.0.0.1:{_free_port()}"
    proc = subprocess.Popen(
        [
            str(BIN / "crkafka"),
            "member",
            "examples.wordcount",
            "--coordinator",
            coordinator,
            "--bootstrap",
            "127.0.0.1:1",
            "--name",
            "m1",
            "--out",
            str(tmp_path / "out"),
            "--state-dir",
            str(tmp_path / "state"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=_env(),
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True).start()
    try:
        deadline = time.monotonic() + 30
        seen = []
        while time.monotonic() < deadline:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            seen.append(line)
            if "joining region" in line:
                break
        assert any(coordinator in line for line in seen), seen  # the coordinator is named
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        assert proc.wait(timeout=15) == 0
        assert time.monotonic() - started < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    rest = "".join(seen) + "".join(lines.queue)
    assert "stopped by SIGTERM" in rest
    assert "Traceback" not in rest


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_run_prints_a_failed_members_reason(tmp_path, log_format):
    """The pipeline module loads in the parent, but its build() fails in the member
    (exit 2): `crkafka run` says why, on stderr, and exits 2 (members log in the
    runner's format, and both are read back)."""
    module = tmp_path / "broken_build.py"
    module.write_text("def build(ctx):\n    return 42\n")
    proc = subprocess.run(
        [
            str(BIN / "crkafka"),
            "--log-format",
            log_format,
            "run",
            str(module),
            "--members",
            "1",
            "--bootstrap",
            "127.0.0.1:1",
            "--state-dir",
            str(tmp_path / "state"),
            "--out",
            str(tmp_path / "out"),
            "--duration",
            "60s",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=tmp_path,
        env=_env(),
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "member-0 exited with code 2 (bad settings)" in proc.stderr
    assert "build(ctx) returned int, not a Pipeline" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    member_log = (tmp_path / "state" / "logs" / "member-0.log").read_text().splitlines()
    assert member_log
    assert all(line.startswith("{") == (log_format == "json") for line in member_log)


def test_run_against_an_unreachable_coordinator_names_it_and_stops_promptly(tmp_path):
    """The status line names the coordinator that does not answer; at the end the
    member, still joining, stops on SIGTERM (no SIGKILL after the stop grace)."""
    coordinator = f"tcp://127.0.0.1:{_free_port()}"
    started = time.monotonic()
    proc = subprocess.run(
        [
            str(BIN / "crkafka"),
            "run",
            "examples.wordcount",
            "--members",
            "1",
            "--bootstrap",
            "127.0.0.1:1",
            "--coordinator",
            coordinator,
            "--status-every",
            "1s",
            "--duration",
            "3s",
            "--state-dir",
            str(tmp_path / "state"),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=_env(),
    )
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert f"status unavailable (no reply from the coordinator at {coordinator}" in proc.stdout
    assert "did not stop in time" not in proc.stderr
    assert time.monotonic() - started < 3 + 8
    member_log = (tmp_path / "state" / "logs" / "member-0.log").read_text()
    assert "stopped by SIGTERM before it was running" in member_log


def test_run_stops_a_member_bootstrapping_an_unreachable_broker_promptly(tmp_path):
    """The member joins the runner's coordinator, then waits for the broker (kafka-python
    retries for 30 s); at the end of --duration it stops on SIGTERM, not on SIGKILL."""
    started = time.monotonic()
    proc = subprocess.run(
        [
            str(BIN / "crkafka"),
            "run",
            "examples.wordcount",
            "--members",
            "1",
            "--bootstrap",
            "127.0.0.1:1",
            "--duration",
            "6s",
            "--state-dir",
            str(tmp_path / "state"),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=_env(),
    )
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "did not stop in time" not in proc.stderr
    assert time.monotonic() - started < 6 + 8
    member_log = (tmp_path / "state" / "logs" / "member-0.log").read_text()
    assert "Kafka 127.0.0.1:1" in member_log
    assert "SIGTERM: stopping" in member_log
    # clean exit, or exit after INTERRUPT_GRACE_S while kafka-python's bootstrap holds the close
    assert "stopped by SIGTERM before it was running" in member_log or "exiting now" in member_log
