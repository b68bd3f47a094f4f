"""The member's collector tuning: under the FREEZE policy the young generation is
collected less often while records flow, the older thresholds stay, and shutdown
puts the previous thresholds back; NONE (and collections switched off) leave the
collector alone."""

from __future__ import annotations

import gc

import pytest

from cr_consumer.operator.gc_policy import GcPolicy
from cr_consumer.runtime.member.collector import YOUNG_THRESHOLD, restore_collector, tune_collector


@pytest.fixture(autouse=True)
def thresholds():
    """Each test starts from, and leaves, the thresholds it found."""
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def test_freeze_raises_the_young_threshold_and_shutdown_restores_it():
    gc.set_threshold(700, 7, 9)
    previous = tune_collector(GcPolicy.FREEZE, "member-0")
    assert previous == (700, 7, 9)
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 7, 9)
    restore_collector(previous)
    assert gc.get_threshold() == (700, 7, 9)


def test_a_higher_threshold_set_by_the_program_is_kept():
    gc.set_threshold(YOUNG_THRESHOLD * 2, 10, 10)
    previous = tune_collector(GcPolicy.FREEZE, "member-0")
    assert gc.get_threshold() == (YOUNG_THRESHOLD * 2, 10, 10)
    restore_collector(previous)
    assert gc.get_threshold() == (YOUNG_THRESHOLD * 2, 10, 10)


@pytest.mark.parametrize("young", [700, 0])
def test_policy_none_or_collections_switched_off_leave_the_collector_alone(young):
    gc.set_threshold(young, 10, 10)
    policy = GcPolicy.NONE if young else GcPolicy.FREEZE
    previous = tune_collector(policy, "member-0")
    assert previous is None
    assert gc.get_threshold() == (young, 10, 10)
    restore_collector(previous)
    assert gc.get_threshold() == (young, 10, 10)


def test_a_policy_that_is_not_a_gc_policy_is_refused():
    with pytest.raises(TypeError):
        tune_collector("freeze", "member-0")  # type: ignore[arg-type]
    assert gc.get_threshold() == (700, 10, 10)
