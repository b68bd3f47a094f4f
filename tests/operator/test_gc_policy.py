"""The operator's garbage-collector policy: FREEZE moves the start-up heap out of
the collector's scans after start() and thaws it at close(), NONE leaves the
collector alone."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref

import pytest

from cr_consumer import ConsumerOperator, OperatorConfig
from cr_consumer.operator.config import ConfigError
from cr_consumer.operator.gc_policy import GcPolicy, apply_gc_policy, release_gc_policy
from cr_consumer.testing.kafka_util import create_topic


@pytest.fixture(autouse=True)
def thawed():
    """Each test starts and ends with nothing frozen (the freeze is process wide)."""
    gc.unfreeze()
    yield
    gc.unfreeze()


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_freeze_frees_garbage_first_then_freezes_what_is_alive():
    kept = {"alive": [1, 2, 3]}
    garbage = _cycle()  # unreachable cycle: only the cyclic collector frees it
    assert garbage() is not None
    apply_gc_policy(GcPolicy.FREEZE, "test")
    assert garbage() is None, "the cycle made before the freeze was collected, not frozen"
    frozen = gc.get_freeze_count()
    assert frozen > 0
    assert not any(o is kept for o in gc.get_objects()), "the live dict moved to the permanent generation"
    young = _Node()
    assert any(o is young for o in gc.get_objects()), "objects made later are collected as usual"
    later = _cycle()
    gc.collect()
    assert later() is None


def test_none_leaves_the_collector_alone():
    gc.disable()
    try:
        garbage = _cycle()
        apply_gc_policy(GcPolicy.NONE, "test")
        assert gc.get_freeze_count() == 0
        assert garbage() is not None, "no collection was run"
        assert not gc.isenabled(), "the program's own setting is kept"
    finally:
        gc.enable()
        gc.collect()


def test_policy_must_be_the_enum():
    with pytest.raises(TypeError):
        apply_gc_policy("freeze", "test")  # type: ignore[arg-type]


def _config(**kw) -> OperatorConfig:
    return OperatorConfig(bootstrap_servers="127.0.0.1:9092", group_id="g", operator_name="m0", topics=["t"], **kw)


def test_config_default_is_freeze_and_none_opts_out():
    assert _config().gc_policy is GcPolicy.FREEZE
    assert _config(gc_policy="none").gc_policy is GcPolicy.NONE
    assert _config(gc_policy=" Freeze ").gc_policy is GcPolicy.FREEZE
    with pytest.raises(ConfigError, match="GcPolicy: 'off' is not one of freeze, none"):
        _config(gc_policy="off")


@pytest.mark.parametrize("policy, frozen", [("freeze", True), ("none", False)])
def test_operator_start_applies_the_policy(bootstrap, names, policy, frozen):
    topic = create_topic(bootstrap, names.topic(), 1)
    config = OperatorConfig(bootstrap_servers=bootstrap, group_id=names.group(), operator_name="m0",
                            topics=[topic], gc_policy=policy)
    op = ConsumerOperator(config, submit_batch=lambda records: None)
    assert gc.get_freeze_count() == 0
    op.start()
    try:
        assert (gc.get_freeze_count() > 0) is frozen
        assert any(o is op for o in gc.get_objects()) is not frozen
    finally:
        op.close()


#: Run in a child process: pytest's log capture keeps references to whatever the
#: operator logged, so an operator is never freed inside the test process itself.
_CLOSED_OPERATOR_SCRIPT = """
import gc, sys, weakref
from cr_consumer import ConsumerOperator, OperatorConfig
config = OperatorConfig(bootstrap_servers=sys.argv[1], group_id=sys.argv[2], operator_name="m0",
                        topics=[sys.argv[3]], gc_policy=sys.argv[4])
op = ConsumerOperator(config, submit_batch=lambda records: None)
op.start()
frozen_while_running = gc.get_freeze_count()
op.close()
ref = weakref.ref(op)
del op
gc.collect()
print(frozen_while_running > 0, gc.get_freeze_count() == 0, ref() is None)
"""


def test_close_thaws_so_that_the_closed_operator_is_freed(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), 1)
    out = subprocess.run([sys.executable, "-c", _CLOSED_OPERATOR_SCRIPT, bootstrap, names.group(), topic, "freeze"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    frozen, thawed, freed = out.stdout.split()
    assert (frozen, thawed, freed) == ("True", "True", "True")


def test_release_with_none_leaves_a_freeze_alone():
    gc.freeze()
    frozen = gc.get_freeze_count()
    release_gc_policy(GcPolicy.NONE, "test")
    assert gc.get_freeze_count() == frozen > 0
    release_gc_policy(GcPolicy.FREEZE, "test")
    assert gc.get_freeze_count() == 0
