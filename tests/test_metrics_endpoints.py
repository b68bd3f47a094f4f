"""Every /metrics endpoint (coordinator, a region member, the Spark source runner)
passes ``promtool check metrics`` with nothing to say, exposes per-partition lag
and committed offsets with ``topic`` and ``partition`` labels, and has every
metric the Grafana dashboard queries."""

from __future__ import annotations

import socket
import time

import pytest

from cr_consumer.runtime.runner.region_runner import Region
from cr_consumer.testing.kafka_util import create_topic, produce, unique_name

from support.metrics import dashboard_metric_names, exposed_names, promtool_problems, samples, scrape
from support.region import wait_region

pytestmark = pytest.mark.slow

PARTITIONS = 2
RECORDS = 300

PASSTHROUGH = """
from cr_consumer.runtime import KafkaSource, Pipeline

def build(ctx):
    return (Pipeline(KafkaSource(topics=[ctx.param("topic")], options={"start_position": "earliest"}))
            .sink(ctx.file_sink()))
"""
#: The member region's pipeline: a dead-letter sink, and a map that rejects every value ending in 7.
DEAD_LETTER = """
from cr_consumer.runtime import KafkaSource, Pipeline

def check(r):
    if r.value.endswith(b"7"):
        raise ValueError("ends in 7")
    return r

def build(ctx):
    return (Pipeline(KafkaSource(topics=[ctx.param("topic")], options={"start_position": "earliest"}),
                     dead_letter=ctx.file_sink("dlq"))
            .map(check).sink(ctx.file_sink()))
"""


def free_port_pair() -> int:
    """A port p with p and p+1 free now (member-0 and member-1 of a base port)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port >= 65535:
            continue
        with socket.socket() as s2:
            try:
                s2.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise AssertionError("no two consecutive free ports")


def by_partition(text: str, name: str, topic: str) -> dict[int, float]:
    return {int(labels["partition"]): value for labels, value in samples(text, name) if labels["topic"] == topic}


@pytest.fixture(scope="module")
def region_expositions(bootstrap, tmp_path_factory):
    """A one-member region that consumed RECORDS records and checkpointed them:
    the coordinator's and the member's exposition."""
    tmp = tmp_path_factory.mktemp("metrics-region")
    topic = create_topic(bootstrap, unique_name("metrics-t"), partitions=PARTITIONS)
    produce(bootstrap, topic, [b"v%d" % i for i in range(RECORDS)])
    pipeline = tmp / "dead_letter.py"
    pipeline.write_text(DEAD_LETTER)
    base = free_port_pair()
    region = Region(
        str(pipeline),
        members=1,
        bootstrap=bootstrap,
        output_dir=tmp / "out",
        state_dir=tmp / "state",
        period_s=0.3,
        member_timeout_s=3.0,
        params={"topic": topic},
        kafka={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000},
        metrics_port=base,
    )
    with region:
        assert region.metrics_addresses() == {"member-0": f"127.0.0.1:{base}"}

        def member_settled() -> str | None:
            try:
                member = scrape(f"127.0.0.1:{base}")
            except OSError:
                return None  # the member is still starting
            committed = by_partition(member, "crkafka_consumer_committed_offset", topic)
            lag = by_partition(member, "crkafka_consumer_lag", topic)
            settled = (
                len(committed) == PARTITIONS
                and sum(committed.values()) == RECORDS
                and len(lag) == PARTITIONS
                and sum(lag.values()) == 0
            )
            return member if settled else None

        def coordinator_settled() -> str | None:
            coordinator = scrape(region.http_address)
            checkpoints = [
                v
                for labels, v in samples(coordinator, "crkafka_region_checkpoints_total")
                if labels["region"] == region.group
            ]
            return coordinator if checkpoints and checkpoints[0] >= 2 else None

        member = wait_region(region, member_settled, 60, "the member's metrics to settle", interval=0.2)
        # the coordinator refreshes its region gauges and counters every second
        coordinator = wait_region(region, coordinator_settled, 30, "the coordinator's region metrics", interval=0.2)
        yield {"topic": topic, "group": region.group, "member": member, "coordinator": coordinator}


def test_member_endpoint_passes_promtool_and_shows_lag_per_partition(region_expositions):
    e = region_expositions
    text, topic = e["member"], e["topic"]
    assert promtool_problems(text) == ""
    end = by_partition(text, "crkafka_consumer_end_offset", topic)
    position = by_partition(text, "crkafka_consumer_position", topic)
    committed = by_partition(text, "crkafka_consumer_committed_offset", topic)
    assert set(end) == set(position) == set(committed) == set(range(PARTITIONS))
    assert sum(end.values()) == RECORDS
    assert position == end == committed  # all consumed and committed: lag 0 everywhere
    assert by_partition(text, "crkafka_consumer_lag", topic) == {p: 0.0 for p in range(PARTITIONS)}
    assert samples(text, "crkafka_consumer_records_submitted_total")[0][1] == RECORDS
    drains = samples(text, "crkafka_consumer_drains_total")[0][1]
    assert drains >= 1
    assert samples(text, "crkafka_consumer_drain_duration_seconds_count")[0][1] == drains
    assert samples(text, "crkafka_consumer_resets_total")[0][1] >= 1  # the region's first reset
    assert not any(name.startswith("cr_consumer_") for name in exposed_names(text))
    rejected = [(labels, v) for labels, v in samples(text, "crkafka_pipeline_dead_letter_records_total")]
    # each record once at least; a reset before a checkpoint replays and counts again
    assert [labels for labels, _ in rejected] == [{"stage": "01-map", "error_type": "ValueError"}]
    assert rejected[0][1] >= RECORDS // 10


def test_coordinator_endpoint_passes_promtool_with_region_counters_and_histograms(region_expositions):
    e = region_expositions
    text, group = e["coordinator"], e["group"]
    assert promtool_problems(text) == ""
    checkpoints = dict((labels["region"], v) for labels, v in samples(text, "crkafka_region_checkpoints_total"))
    assert checkpoints[group] >= 2
    count = dict(
        (labels["region"], v) for labels, v in samples(text, "crkafka_region_checkpoint_duration_seconds_count")
    )
    assert count[group] >= 2
    resets = dict((labels["region"], v) for labels, v in samples(text, "crkafka_region_resets_total"))
    assert resets[group] >= 1
    assert (
        dict((labels["region"], v) for labels, v in samples(text, "crkafka_region_reset_duration_seconds_count"))[group]
        >= 1
    )
    phases = {labels["phase"]: v for labels, v in samples(text, "crkafka_region_phase") if labels["region"] == group}
    assert sum(phases.values()) == 1
    assert phases["FAILED"] == 0
    assert len(phases) >= 4  # every phase, one set
    requests = {labels["type"]: v for labels, v in samples(text, "crkafka_coordinator_requests_total")}
    assert requests  # the members' requests are counted by type
    assert all(name.startswith("crkafka_") or name.startswith(("python_", "process_")) for name in exposed_names(text))


def test_dashboard_queries_only_exposed_metrics(region_expositions):
    e = region_expositions
    endpoints = {
        "crkafka_consumer_": e["member"],
        "crkafka_coordinator_": e["coordinator"],
        "crkafka_region_": e["coordinator"],
    }
    names = dashboard_metric_names()
    assert {
        "crkafka_consumer_lag",
        "crkafka_region_reset_duration_seconds_bucket",
        "crkafka_coordinator_limit_rejections_total",
    } <= names
    missing = []
    for name in sorted(names):
        prefix = next((p for p in endpoints if name.startswith(p)), None)
        assert prefix is not None, f"{name}: no endpoint serves this prefix"
        if name not in exposed_names(endpoints[prefix]):
            missing.append(name)
    assert not missing, f"the dashboard queries metrics no endpoint exposes: {missing}"


def test_spark_runner_endpoint_passes_promtool(bootstrap, names, tmp_path):
    """The Spark source runner's endpoint, served by the query planner the runner
    drives (latestOffset and commit as Spark calls them, the ranges read as the
    executors read them, without a JVM)."""
    from coordinator.launcher import CoordinatorProcess
    from cr_consumer.spark.executor import read_range
    from cr_consumer.spark.offsets import SourceOffset
    from cr_consumer.spark.options import parse_options
    from cr_consumer.spark.planner import QueryPlanner
    from cr_consumer.spark.ranges import batch_ranges

    topic = create_topic(bootstrap, names.topic(), partitions=PARTITIONS)
    produce(bootstrap, topic, [b"s%d" % i for i in range(RECORDS)])
    coordinator = CoordinatorProcess(tmp_path / "coordinator")
    coordinator.start()
    planner = None
    try:
        options = parse_options(
            {
                "kafka.bootstrap.servers": bootstrap,
                "kafka.group.id": names.group(),
                "subscribe": topic,
                "coordinator": coordinator.endpoint,
                "members": "2",
                "startingOffsets": "earliest",
                "metricsPort": "0",
                "kafka.session.timeout.ms": "6000",
                "kafka.heartbeat.interval.ms": "1000",
            }
        )
        planner = QueryPlanner(options)
        start, rows = SourceOffset.initial(), 0
        deadline = time.monotonic() + 60
        while rows < RECORDS:
            assert time.monotonic() < deadline, f"stuck at {rows}/{RECORDS}, stats {planner.stats}"
            end = planner.latest_offset(start, None)
            rows += sum(b.num_rows for rng in batch_ranges(start, end, None) for b in read_range(options, rng))
            planner.commit(start)  # Spark commits the previous end after planning the next
            start = end
        planner.latest_offset(start, None)  # idle: hands out an empty batch so that Spark delivers the commit
        planner.commit(start)
        assert planner.metrics_endpoint is not None
        assert planner.metrics_endpoint.address is not None
        text = scrape(planner.metrics_endpoint.address)
        assert promtool_problems(text) == ""
        committed = by_partition(text, "crkafka_consumer_committed_offset", topic)
        assert sorted(committed) == list(range(PARTITIONS))
        assert sum(committed.values()) == RECORDS
        assert by_partition(text, "crkafka_consumer_lag", topic) == {p: 0 for p in range(PARTITIONS)}
        operators = {labels["operator"] for labels, _ in samples(text, "crkafka_consumer_assigned_partitions")}
        assert operators == {"crkafka-0", "crkafka-1"}
        assert sum(v for _, v in samples(text, "crkafka_consumer_assigned_partitions")) == PARTITIONS
        assert samples(text, "crkafka_spark_planned_rows_total")[0][1] == RECORDS
        assert samples(text, "crkafka_spark_commits_total")[0][1] >= 1
        # the dashboard's per-partition panels work for Spark runners too
        assert {"crkafka_consumer_lag", "crkafka_consumer_committed_offset"} <= exposed_names(text)
    finally:
        from cr_consumer.spark.executor import close_worker_readers

        close_worker_readers()  # the cached executor consumers would retry the broker after it stops
        if planner is not None:
            planner.close()
        coordinator.terminate()


def test_crkafka_run_gives_each_member_base_port_plus_index(bootstrap, names, tmp_path):
    """``crkafka run --metrics-port BASE``: member-N serves on BASE+N and says so at start."""
    import subprocess
    import sys
    from pathlib import Path

    topic = create_topic(bootstrap, names.topic(), partitions=PARTITIONS)
    produce(bootstrap, topic, [b"c%d" % i for i in range(RECORDS)])
    pipeline = tmp_path / "passthrough.py"
    pipeline.write_text(PASSTHROUGH)
    base = free_port_pair()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cr_consumer.cli.main",
            "run",
            str(pipeline),
            "--members",
            "2",
            "--bootstrap",
            bootstrap,
            "--group",
            names.group(),
            "--param",
            f"topic={topic}",
            "--out",
            str(tmp_path / "out"),
            "--state-dir",
            str(tmp_path / "state"),
            "--period",
            "0.5",
            "--duration",
            "60",
            "--status-every",
            "30",
            "--metrics-port",
            str(base),
            "--kafka",
            "session.timeout.ms=6000",
            "--kafka",
            "heartbeat.interval.ms=1000",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    try:
        assigned: dict[int, float] = {}
        deadline = time.monotonic() + 60
        while len(assigned) < 2 or sum(assigned.values()) != PARTITIONS:  # both serve; every partition assigned
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, f"members not serving: {assigned}"
            for i in range(2):
                try:
                    text = scrape(f"127.0.0.1:{base + i}")
                except OSError:
                    continue
                assert promtool_problems(text) == ""
                ((labels, value),) = samples(text, "crkafka_consumer_assigned_partitions")
                assert labels == {"operator": f"member-{i}"}
                assigned[i] = value
            time.sleep(0.2)
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out[-3000:]
    for i in range(2):
        assert f"member-{i}: metrics on http://127.0.0.1:{base + i}/metrics" in out
