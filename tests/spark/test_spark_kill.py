"""kill -9 of the query process in the middle of a batch, restart from the
checkpoint location: no gap, no duplicate, committed offsets = the output."""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

import pytest

from cr_consumer.kafka_util import create_topic, produce

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.xdist_group("spark"), pytest.mark.timeout(900)]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_wordcount.py"


def load_example():
    spec = importlib.util.spec_from_file_location("spark_wordcount", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kill9_mid_batch_then_restart_is_exactly_once(bootstrap, coordinator, names, tmp_path):
    example = load_example()
    args = types.SimpleNamespace(
        bootstrap=bootstrap, coordinator=coordinator, topic=names.topic(), group=names.group(),
        members=2, records=12000, max_records_per_batch=1500, session_timeout_ms=6000,
    )
    create_topic(bootstrap, args.topic, partitions=4)
    produce(bootstrap, args.topic, (example.line_for(i) for i in range(args.records)))
    result = example.kill_restart_verify(args, tmp_path)
    logs = "\n".join((tmp_path / f"query-{i}.log").read_text()[-3000:] for i in (1, 2))
    assert 0 < result["killed_at"] < args.records, result
    assert result["restart_rc"] == 0, logs
    assert result["duplicates"] == 0 and result["gaps"] == 0, result
    assert result["records_out"] == result["distinct"] == args.records, result
    assert result["counts_match"], result
    assert result["committed"] == result["per_partition"] == {p: args.records // 4 for p in range(4)}, result
