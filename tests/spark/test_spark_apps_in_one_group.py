"""Three Spark applications in one consumer group, each with its own checkpoint
location and parquet output, under a steady input and the default consumer
settings (``examples/spark_handover.py``, its faults story): the second joins
the running first and is killed -9 for good mid-batch (a taker); the third
joins; the first is stopped by SIGTERM mid-batch (a giver) and restarted from
its checkpoint location; the third is killed -9 for good mid-batch (a giver).
Across every application's committed output, each produced record exactly
once with its value, and the group's committed offsets at the end of every
partition."""

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


def test_a_taker_killed_a_giver_stopped_and_restarted_a_giver_killed_for_good(bootstrap, coordinator, names, tmp_path):
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
    result = example.run_scenario(args, tmp_path, faults=True)
    logs = "\n".join(p.read_text()[-1500:] for p in sorted(tmp_path.glob("*/app.log")))
    # each stop abandoned a batch in flight: another application read it
    assert result["taker_in_flight_at_kill"], f"{result}\n{logs}"
    assert result["giver_in_flight_at_stop"], f"{result}\n{logs}"
    assert result["giver_in_flight_at_kill"], f"{result}\n{logs}"
    assert result["produced"] > 0
    assert (result["duplicates"], result["missing"], result["unexpected"]) == (0, 0, 0), f"{result}\n{logs}"
    assert result["committed"] == result["ends"], f"{result}\n{logs}"
    assert all(n > 0 for n in result["per_app"].values()), result
