"""Two Spark applications (two processes, own checkpoint locations and outputs) in
one consumer group: the second joins while the first is reading, the group moves
partitions to it, and across the two outputs every record is there exactly once."""

from __future__ import annotations

import collections
import importlib.util
import os
import signal
import types
from pathlib import Path

import pytest

from cr_consumer.testing.kafka_util import committed_offsets, create_topic, produce

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_wordcount.py"


def load_example():
    spec = importlib.util.spec_from_file_location("spark_wordcount", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.xdist_group("spark"), pytest.mark.timeout(900)]


def _records(out) -> collections.Counter:
    example = load_example()
    _, offsets = example.output_state(out)
    return collections.Counter((p, o) for (_t, p), offs in offsets.items() for o in offs)


def test_two_applications_in_one_group_hand_over_exactly_once(bootstrap, coordinator, names, tmp_path):
    example = load_example()
    topic, group = names.topic(), names.group()
    create_topic(bootstrap, topic, partitions=4)
    half = 4000
    produce(bootstrap, topic, (example.line_for(i) for i in range(half)))
    args = types.SimpleNamespace(bootstrap=bootstrap, coordinator=coordinator, topic=topic, group=group, members=1,
                                 records=2 * half, max_records_per_batch=400, session_timeout_ms=6000)
    dirs = [tmp_path / "app-a", tmp_path / "app-b"]
    for d in dirs:
        (d / "out").mkdir(parents=True)
    procs = []
    try:
        procs.append(example.run_query_process(args, dirs[0], sink_delay=0.3, exit_when_done=False,
                                               log_name="query.log"))
        example.wait_until(lambda: sum(_records(dirs[0] / "out").values()) > 0, 180, "the first output", procs[0])
        procs.append(example.run_query_process(args, dirs[1], sink_delay=0.3, exit_when_done=False,
                                               log_name="query.log", starting_offsets="committed"))
        # the second application's members joined: the group has moved partitions to it
        example.wait_until(lambda: "members joined group" in (dirs[1] / "query.log").read_text(), 180,
                           "the second application to join", procs[1])
        produce(bootstrap, topic, (example.line_for(i) for i in range(half, 2 * half)))

        def total():
            return sum(sum(_records(d / "out").values()) for d in dirs)

        example.wait_until(lambda: total() >= 2 * half, 240, f"{2 * half} records in the two outputs")
        expected = {p: 2 * half // 4 for p in range(4)}
        example.wait_until(lambda: committed_offsets(bootstrap, group, topic) == expected, 120, "the commits")
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc in procs:
            try:
                proc.wait(60)
            except Exception:  # noqa: BLE001 - a stuck process is killed below
                os.killpg(proc.pid, signal.SIGKILL)
    a, b = (_records(d / "out") for d in dirs)
    both = a + b
    logs = "\n".join((d / "query.log").read_text()[-2000:] for d in dirs)
    assert a and b, logs
    assert max(both.values()) == 1, f"read twice across the two applications: {[k for k, c in both.items() if c > 1][:10]}"
    assert set(both) == {(p, o) for p in range(4) for o in range(2 * half // 4)}, logs
