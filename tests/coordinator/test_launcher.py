"""The coordinator launcher owns the thread reading its child's stdout: every
way the child ends (terminate, kill, restart) joins it."""

from __future__ import annotations

import math
import threading

import pytest

from coordinator.launcher import CoordinatorProcess, CoordinatorStartError


def _readers() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("coordinator-stdout-")}


def test_terminate_kill_and_restart_join_the_stdout_reader(tmp_path):
    before = _readers()
    proc = CoordinatorProcess(tmp_path / "state")
    proc.start()
    first = f"coordinator-stdout-{proc.pid}"
    assert first in _readers()
    proc.restart(hard=True)  # kill, then start again on the same endpoint
    assert first not in _readers()
    second = f"coordinator-stdout-{proc.pid}"
    assert second in _readers()
    assert proc.terminate() == 0
    assert _readers() == before


@pytest.mark.parametrize("bad", [math.inf, math.nan, 0.0, -1.0])
def test_unbounded_waits_are_refused_before_anything_starts(tmp_path, bad):
    with pytest.raises(ValueError, match="start_timeout"):
        CoordinatorProcess(tmp_path / "state", start_timeout=bad)
    proc = CoordinatorProcess(tmp_path / "state")
    with pytest.raises(ValueError, match="timeout"):
        proc.terminate(bad)
    assert not (tmp_path / "state").exists()


def test_a_child_that_never_gets_ready_is_not_left_running(tmp_path):
    fake = tmp_path / "fake-python"  # stands in for `python -m coordinator`: a broken ready line, then a hang
    fake.write_text("#!/bin/sh\necho 'ready http=-'\nexec sleep 60\n")
    fake.chmod(0o755)
    proc = CoordinatorProcess(tmp_path / "state", python=str(fake), start_timeout=5.0)
    with pytest.raises(CoordinatorStartError, match="without its endpoint"):
        proc.start()
    assert not proc.running
    assert proc.returncode is not None
    assert f"coordinator-stdout-{proc.pid}" not in _readers()
