"""The coordinator's garbage-collector policy: frozen once the state is loaded
(the default), left alone with ``--gc-policy none``. Freezing is process wide,
so each check runs in its own process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from coordinator.common.gc_policy import apply_after_load
from coordinator.common.waiting import wait_until
from coordinator.launcher import CoordinatorProcess

CHILD = """
import gc, sys
from coordinator.common.gc_policy import CoordinatorGcPolicy, apply_after_load
kept = [{"state": i} for i in range(10000)]  # a loaded state: long-lived containers
frozen = apply_after_load(CoordinatorGcPolicy(sys.argv[1]))
print(frozen, gc.get_freeze_count(), gc.get_count()[2])
"""


def _child(policy: str) -> list[int]:
    out = subprocess.run([sys.executable, "-c", CHILD, policy], capture_output=True, text=True, timeout=60, check=True)
    return [int(x) for x in out.stdout.split()]


def test_freeze_moves_the_loaded_heap_out_of_the_collections():
    frozen, count, _ = _child("freeze")
    assert frozen == count
    assert count > 10000  # the 10,000 state dicts and the modules


def test_none_leaves_the_collector_alone():
    frozen, count, _ = _child("none")
    assert (frozen, count) == (0, 0)


def test_a_policy_must_be_the_enum():
    with pytest.raises(TypeError):
        apply_after_load("freeze")  # type: ignore[arg-type]


@pytest.mark.parametrize("policy, line", [("freeze", "objects frozen after the load"),
                                          ("none", "policy none, the collector is left alone")])
def test_the_coordinator_process_applies_its_policy_after_the_load(tmp_path, policy, line):
    log = tmp_path / "coordinator.log"
    proc = CoordinatorProcess(tmp_path / "state", log_path=log, extra_args=["--gc-policy", policy])
    proc.start()  # returns once a ping is answered: the state is loaded
    try:
        wait_until(lambda: "gc: " in log.read_text(), 10, "the gc policy's log line")
    finally:
        proc.terminate()
    text = log.read_text()
    assert line in text
    assert text.count("gc: ") == 1
