"""The one garbage-collector policy (``coordinator/protocol/common/gc_policy.py``):
freeze after start-up and thaw at close, a higher young threshold while a
member runs, the collector paused around a block; NONE leaves the collector
alone. Freezing is process wide: each test starts and ends thawed, and the
coordinator's checks run in their own process."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from collections.abc import Callable

import pytest

from coordinator.launcher import CoordinatorProcess
from coordinator.protocol.common.gc_policy import (
    YOUNG_THRESHOLD,
    GcPolicy,
    collector_paused,
    freeze_after_start,
    raise_young_threshold,
    restore_thresholds,
    thaw_at_close,
)
from coordinator.protocol.common.waiting import wait_until


@pytest.fixture(autouse=True)
def collector_state():
    """Each test starts from, and leaves, a thawed heap and the thresholds it found."""
    saved = gc.get_threshold()
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    yield
    gc.unfreeze()
    gc.set_threshold(*saved)


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def _collected(obj: object) -> bool:
    """``obj`` is in the collected generations (not frozen)."""
    return any(o is obj for o in gc.get_objects())


# ---------------------------------------------------------------- freeze and thaw


def test_freeze_frees_garbage_first_then_freezes_what_is_alive():
    kept = {"alive": [1, 2, 3]}
    garbage = _cycle()  # unreachable cycle: only the cyclic collector frees it
    assert garbage() is not None
    frozen = freeze_after_start(GcPolicy.FREEZE, "test")
    assert garbage() is None, "the cycle made before the freeze was collected, not frozen"
    assert frozen > 0
    assert not _collected(kept), "the live dict moved to the permanent generation"
    young = _Node()
    assert _collected(young), "objects made later are collected as usual"
    later = _cycle()
    gc.collect()
    assert later() is None


def test_freeze_with_none_leaves_the_collector_alone():
    gc.disable()
    try:
        garbage = _cycle()
        assert freeze_after_start(GcPolicy.NONE, "test") == 0
        assert gc.get_freeze_count() == 0
        assert garbage() is not None, "no collection was run"
        assert not gc.isenabled(), "the program's own setting is kept"
    finally:
        gc.enable()
        gc.collect()


def test_thaw_with_none_leaves_a_freeze_alone():
    # Checked on an object of its own: the freeze count also drops whenever any
    # frozen object is freed (by another thread, or garbage of an earlier test).
    kept = {"alive": [1, 2, 3]}
    gc.freeze()
    thaw_at_close(GcPolicy.NONE, "test")
    assert not _collected(kept), "still frozen"
    thaw_at_close(GcPolicy.FREEZE, "test")
    assert _collected(kept)
    assert gc.get_freeze_count() == 0


# ---------------------------------------------------------------- the young threshold


def test_freeze_raises_the_young_threshold_and_shutdown_restores_it():
    gc.set_threshold(700, 7, 9)
    previous = raise_young_threshold(GcPolicy.FREEZE, "member-0")
    assert previous == (700, 7, 9)
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 7, 9)
    restore_thresholds(previous)
    assert gc.get_threshold() == (700, 7, 9)


def test_a_higher_threshold_set_by_the_program_is_kept():
    gc.set_threshold(YOUNG_THRESHOLD * 2, 10, 10)
    previous = raise_young_threshold(GcPolicy.FREEZE, "member-0")
    assert gc.get_threshold() == (YOUNG_THRESHOLD * 2, 10, 10)
    restore_thresholds(previous)
    assert gc.get_threshold() == (YOUNG_THRESHOLD * 2, 10, 10)


@pytest.mark.parametrize("young", [700, 0])
def test_policy_none_or_collections_switched_off_leave_the_thresholds_alone(young):
    gc.set_threshold(young, 10, 10)
    policy = GcPolicy.NONE if young else GcPolicy.FREEZE
    previous = raise_young_threshold(policy, "member-0")
    assert previous is None
    assert gc.get_threshold() == (young, 10, 10)
    restore_thresholds(previous)
    assert gc.get_threshold() == (young, 10, 10)


# ---------------------------------------------------------------- paused around a block


def test_the_collector_is_off_inside_the_block_and_on_after_it():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(KeyError), collector_paused():
        raise KeyError("x")
    assert gc.isenabled(), "an exception in the block turns the collector back on"


def test_a_collector_off_already_stays_off():
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


# ---------------------------------------------------------------- the policy's type


@pytest.mark.parametrize(
    "operation",
    [
        lambda policy: freeze_after_start(policy, "test"),
        lambda policy: thaw_at_close(policy, "test"),
        lambda policy: raise_young_threshold(policy, "test"),
    ],
    ids=["freeze", "thaw", "threshold"],
)
def test_a_policy_must_be_the_enum(operation: Callable[[GcPolicy], object]):
    with pytest.raises(TypeError, match="policy must be a GcPolicy"):
        operation("freeze")  # type: ignore[arg-type]
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == (700, 10, 10)


# ---------------------------------------------------------------- the coordinator process

CHILD = """
import gc, sys
from coordinator.protocol.common.gc_policy import GcPolicy, freeze_after_start
kept = [{"state": i} for i in range(10000)]  # a loaded state: long-lived containers
frozen = freeze_after_start(GcPolicy(sys.argv[1]), "coordinator")
print(frozen, gc.get_freeze_count(), gc.get_count()[2])
"""


def _child(policy: str) -> list[int]:
    out = subprocess.run([sys.executable, "-c", CHILD, policy], capture_output=True, text=True, timeout=60, check=True)
    return [int(x) for x in out.stdout.split()]


def test_freeze_moves_the_loaded_heap_out_of_the_collections():
    frozen, count, _ = _child("freeze")
    assert frozen == count
    assert count > 10000  # the 10,000 state dicts and the modules


def test_none_leaves_the_loaded_heap_alone():
    frozen, count, _ = _child("none")
    assert (frozen, count) == (0, 0)


@pytest.mark.parametrize(
    ("policy", "line"),
    [("freeze", "coordinator: gc: "), ("none", "coordinator: gc: policy none, the collector is left alone")],
)
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
    if policy == "freeze":
        assert "objects frozen" in text
