"""The operator applies the garbage-collector policy (``coordinator/protocol/common/gc_policy.py``,
tested there): OperatorConfig.gc_policy, FREEZE after start() and thawed at
close(), NONE leaves the collector alone."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from coordinator.protocol.common.gc_policy import GcPolicy
from cr_consumer import ConsumerOperator, OperatorConfig
from cr_consumer.operator.config import ConfigError
from cr_consumer.testing.kafka_util import create_topic


@pytest.fixture(autouse=True)
def thawed():
    """Each test starts and ends with nothing frozen (the freeze is process wide)."""
    gc.unfreeze()
    yield
    gc.unfreeze()


def _config(**kw) -> OperatorConfig:
    return OperatorConfig(bootstrap_servers="127.0.0.1:9092", group_id="g", operator_name="m0", topics=["t"], **kw)


def test_config_default_is_freeze_and_none_opts_out():
    assert _config().gc_policy is GcPolicy.FREEZE
    assert _config(gc_policy="none").gc_policy is GcPolicy.NONE
    assert _config(gc_policy=" Freeze ").gc_policy is GcPolicy.FREEZE
    with pytest.raises(ConfigError, match="GcPolicy: 'off' is not one of freeze, none"):
        _config(gc_policy="off")


@pytest.mark.parametrize(("policy", "frozen"), [("freeze", True), ("none", False)])
def test_operator_start_applies_the_policy(bootstrap, names, policy, frozen):
    topic = create_topic(bootstrap, names.topic(), 1)
    config = OperatorConfig(
        bootstrap_servers=bootstrap, group_id=names.group(), operator_name="m0", topics=[topic], gc_policy=policy
    )
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
    out = subprocess.run(
        [sys.executable, "-c", _CLOSED_OPERATOR_SCRIPT, bootstrap, names.group(), topic, "freeze"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    frozen, thawed, freed = out.stdout.split()
    assert (frozen, thawed, freed) == ("True", "True", "True")
