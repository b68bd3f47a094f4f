"""`make demo` checks DEMO_KAFKA_CLIENT before it starts anything: an unknown value
stops it at once, naming the allowed values, with no broker, coordinator or member
process started and no output directory made."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from support.paths import EXAMPLES, REPO


def _demo_module():
    spec = importlib.util.spec_from_file_location("demo_under_test", EXAMPLES / "demo.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("value", ["kafka-python", "librdkafka", None])
def test_the_allowed_clients_and_the_default_pass(value):
    assert _demo_module().checked_kafka_client(value) == value


@pytest.mark.parametrize("value", ["kafka_python", "rdkafka", "Librdkafka", " librdkafka", "java"])
def test_an_unknown_client_is_refused_naming_the_allowed_values(value):
    demo = _demo_module()
    with pytest.raises(demo.DemoSettingError) as info:
        demo.checked_kafka_client(value)
    message = str(info.value)
    assert f"DEMO_KAFKA_CLIENT={value!r}" in message
    assert "kafka-python" in message
    assert "librdkafka" in message


def test_make_demo_with_an_unknown_client_stops_before_starting_anything(tmp_path):
    out = tmp_path / "demo-out"
    env = dict(os.environ, DEMO_KAFKA_CLIENT="no-such-client", DEMO_OUT=str(out))
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "demo.py")], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2, proc.stderr
    assert "DEMO_KAFKA_CLIENT='no-such-client'" in proc.stderr
    assert "kafka-python or librdkafka" in proc.stderr
    # no part ran: nothing printed by a part, no output directory, no process left
    assert "==" not in proc.stdout
    assert "demo parts" not in proc.stdout
    assert not out.exists()
