"""kill -9 of the query process in the middle of a batch, restart from the
checkpoint location: no gap, no duplicate, committed offsets = the output."""

from __future__ import annotations

import contextlib
import importlib.util
import types
from pathlib import Path

import pytest

from cr_consumer.testing.kafka_util import create_topic, produce

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
        bootstrap=bootstrap,
        coordinator=coordinator,
        topic=names.topic(),
        group=names.group(),
        members=2,
        records=12000,
        max_offsets_per_trigger=1500,
        session_timeout_ms=None,
    )
    create_topic(bootstrap, args.topic, partitions=4)
    produce(bootstrap, args.topic, (example.line_for(i) for i in range(args.records)))
    result = example.kill_restart_verify(args, tmp_path)
    logs = "\n".join((tmp_path / f"query-{i}.log").read_text()[-3000:] for i in (1, 2))
    assert 0 < result["killed_at"] < args.records, result
    assert result["restart_rc"] == 0, logs
    assert result["duplicates"] == 0, result
    assert result["gaps"] == 0, result
    assert result["records_out"] == result["distinct"] == args.records, result
    assert result["counts_match"], result
    assert result["committed"] == result["per_partition"] == {p: args.records // 4 for p in range(4)}, result


def test_kill9_of_the_driver_alone_makes_the_members_leave(bootstrap, coordinator, names, tmp_path):
    """Only the driver dies: its JVM follows, the source runner exits and closes its members."""
    import os
    import signal
    import time

    from coordinator.client import CoordinatorClient
    from cr_consumer.spark.control import coordinator_group, query_of_checkpoint

    example = load_example()
    topic, group = names.topic(), names.group()
    create_topic(bootstrap, topic, partitions=2)
    produce(bootstrap, topic, (example.line_for(i) for i in range(500)))
    out = tmp_path / "out"
    args = types.SimpleNamespace(
        bootstrap=bootstrap,
        coordinator=coordinator,
        topic=topic,
        group=group,
        members=2,
        records=500,
        max_offsets_per_trigger=1000,
        session_timeout_ms=None,
    )
    proc = example.run_query_process(args, tmp_path, sink_delay=0.0, exit_when_done=False, log_name="query.log")
    try:
        with CoordinatorClient(coordinator, timeout=5.0) as client:
            example.wait_until(lambda: any(out.glob("batch-*.json")), 180, "a first batch", proc)
            query_id = query_of_checkpoint(tmp_path / "checkpoint")
            assert query_id, "the offset log records the query id"
            qgroup = coordinator_group(group, query_id)  # the members register in the query's coordinator group
            assert sorted(client.members(qgroup)) == ["crkafka-0", "crkafka-1"]
            os.kill(proc.pid, signal.SIGKILL)  # the driver only, not its process group
            proc.wait()
            # The chain: driver gone -> its JVM exits (stdin closed, shutdown hooks) ->
            # pyspark's daemon exits -> the runner is re-parented -> its watchdog
            # (1 s) closes the members. Alone this takes a few seconds. Under load the
            # members once never left: pyspark's daemon SIGHUPed the runner, which
            # then died without closing them (fixed: spark/runner.py handles SIGHUP).
            deadline = time.monotonic() + 60
            while client.members(qgroup) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert client.members(qgroup) == [], (tmp_path / "query.log").read_text()[-3000:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
