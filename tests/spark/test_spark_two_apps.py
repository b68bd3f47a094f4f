"""Two (or three) Spark applications in one consumer group, each with its own
checkpoint location and parquet output, under a steady input and the default
consumer settings: the second joins while the first runs, and the first is
stopped for good while a batch is in flight (``examples/spark_handover.py``).
Across every application's committed output, each record exactly once, and
the group's committed offsets at the end of every partition."""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

import pytest

from cr_consumer.testing.kafka_util import create_topic

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_handover.py"

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.xdist_group("spark"), pytest.mark.timeout(900)]


def load_example():
    spec = importlib.util.spec_from_file_location("spark_handover", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _scenario(bootstrap, coordinator, names, tmp_path, *, kill: bool) -> dict:
    example = load_example()
    args = types.SimpleNamespace(
        bootstrap=bootstrap,
        coordinator=coordinator,
        topic=create_topic(bootstrap, names.topic(), partitions=4),
        group=names.group(),
        rate=150.0,
        row_delay_ms=2.0,
        max_offsets_per_trigger=600,
    )
    result = example.run_scenario(args, tmp_path, kill=kill)
    logs = "\n".join(p.read_text()[-1500:] for p in sorted(tmp_path.glob("*/app.log")))
    assert result["ok"], f"{result}\n{logs}"
    return result


def test_the_first_application_stopped_for_good_mid_batch_hands_its_batch_to_the_second(
    bootstrap, coordinator, names, tmp_path
):
    result = _scenario(bootstrap, coordinator, names, tmp_path, kill=False)
    assert result["giver_in_flight_at_stop"], result  # the stop abandoned a batch: the second read it
    assert all(n > 0 for n in result["per_app"].values()), result


def test_kill_9_of_a_taker_and_then_of_the_giver_for_good(bootstrap, coordinator, names, tmp_path):
    result = _scenario(bootstrap, coordinator, names, tmp_path, kill=True)
    assert result["taker_in_flight_at_kill"], result
    assert result["giver_in_flight_at_stop"], result
    assert all(n > 0 for n in result["per_app"].values()), result
