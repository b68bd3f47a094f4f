"""The Spark source runner's process hooks, in a real child process: SIGTERM
(query stop) and SIGHUP (pyspark's daemon shutting down its process group when
the JVM goes away) both close the members before the process exits."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

CHILD = r"""
import signal, sys, time
from cr_consumer.spark import runner
out = sys.argv[1]
hold = len(sys.argv) > 2  # the close waits for a line on stdin (a signal can arrive during it)
stop = len(sys.argv) > 3  # the main thread closes as the reader's stop() does
def close():
    if hold:
        print("closing", flush=True)
        sys.stdin.readline()
    with open(out, "a") as f:
        f.write("closed\n")
signal.signal(signal.SIGHUP, signal.SIG_DFL)  # as pyspark's daemon leaves it in a forked worker
runner.install(close)
print("ready", flush=True)
if stop:
    runner.close_group("the query stops")
    print("after the close", flush=True)  # not reached: the deferred signal exits
time.sleep(60)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_signal_closes_the_members_once_then_exits(tmp_path, signum):
    out = tmp_path / "closed.txt"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(out), "hold"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signum)
        assert proc.stdout.readline().strip() == "closing"
        # a second signal while closing (Spark sends SIGTERM twice) must not close again
        proc.send_signal(signum)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert out.read_text() == "closed\n"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_signal_during_the_stop_close_waits_for_it_then_exits(tmp_path, signum):
    """Spark calls the reader's stop() and then sends SIGTERM, which arrives
    while stop()'s close runs: the close completes (every member leaves and
    unregisters), then the process exits. Exiting at the signal left the
    members registered in the coordinator."""
    out = tmp_path / "closed.txt"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(out), "hold", "stop"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        assert proc.stdout.readline().strip() == "closing"
        proc.send_signal(signum)
        proc.send_signal(signum)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.wait(timeout=20) == 0
        assert proc.stdout.read() == "", "the deferred signal exits the process when the close ends"
    finally:
        if proc.poll() is None:
            proc.kill()
    assert out.read_text() == "closed\n"


def test_watchdog_closes_the_members_when_the_parent_dies(tmp_path):
    """The runner's parent (the JVM, or pyspark's daemon) dies: the orphan closes its members and exits."""
    out = tmp_path / "closed.txt"
    child_pid = None
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]]);"
            "print(c.pid, flush=True); time.sleep(60)",
            CHILD,
            str(out),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        child_pid = int(parent.stdout.readline())
        assert parent.stdout.readline().strip() == "ready"  # the child (same stdout) has its hooks
        parent.kill()
        parent.wait(10)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (out.exists() and out.read_text()):
            time.sleep(0.1)
        assert out.read_text() == "closed\n"
    finally:
        parent.kill()
        if child_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child_pid, signal.SIGKILL)
