"""Metrics without a broker: the coordinator's registry through promtool, port
allocation of a region's members, the Spark option, a member whose metrics port
is taken, and the region histograms' life cycle."""

from __future__ import annotations

import socket
import sys

import pytest

from coordinator.protocol.region.replies import RegionPhase
from coordinator.protocol.wire.status import StoreStats
from coordinator.server.metrics import CoordinatorMetrics, RegionSample
from cr_consumer.exit_code import ExitCode
from cr_consumer.runtime.member.process import Member
from cr_consumer.runtime.member.setup import MemberSettings
from cr_consumer.runtime.runner.launch import member_argv
from cr_consumer.runtime.runner.region_runner import MAX_METRICS_PORTS, Region
from cr_consumer.spark.options import InvalidOptionError, parse_options

from support.metrics import exposed_names, promtool_problems, samples

PHASES = tuple(phase.value for phase in RegionPhase)

PIPELINE = """
from cr_consumer.runtime import KafkaSource, Pipeline

def build(ctx):
    return Pipeline(KafkaSource(topics=["t"])).sink(ctx.file_sink())
"""


def test_coordinator_registry_passes_promtool_and_drops_a_dropped_region():
    m = CoordinatorMetrics()
    m.requests.labels("register").inc()
    m.errors.labels("TIMEOUT").inc()
    m.limit_rejections.labels("max_groups").inc(2)
    m.set_connections(3, 100)
    m.update_from_stats(
        StoreStats(
            control_variables=5,
            groups=1,
            documents=0,
            log_bytes=4096,
            log_records=3,
            live_entries=6,
            dead_entries=0,
            compactions=2,
            compaction_running=False,
            compaction_failures=0,
            expire_failures=0,
            largest_compaction_record_bytes=0,
            compaction_max_pause_ms=0.0,
            fsyncs=3,
            load_seconds=0.0,
            truncated_bytes=0,
        )
    )
    m.regions.update([RegionSample("orders", "RUNNING", 7, 7, 2, 0, False, 3, failure_streak=4)], PHASES)
    m.regions.checkpoint_done("orders", 0.04)
    m.regions.reset_done("orders", 1.2)
    text = m.render().decode()
    assert promtool_problems(text) == ""
    assert samples(text, "crkafka_region_checkpoints_total") == [({"region": "orders"}, 7.0)]
    assert samples(text, "crkafka_region_resets_total") == [({"region": "orders"}, 2.0)]
    assert samples(text, "crkafka_region_failure_streak") == [({"region": "orders"}, 4.0)]
    assert samples(text, "crkafka_region_reset_duration_seconds_count") == [({"region": "orders"}, 1.0)]
    assert samples(text, "crkafka_coordinator_limit_rejections_total") == [({"limit": "max_groups"}, 2.0)]
    assert samples(text, "crkafka_coordinator_compactions_total") == [({}, 2.0)]
    assert samples(text, "crkafka_coordinator_log_bytes") == [({}, 4096.0)]
    assert all(not n.startswith(("coordinator_", "region_")) for n in exposed_names(text))

    m.regions.update([], PHASES)  # the region expired: its series go
    text = m.render().decode()
    assert "orders" not in text
    assert promtool_problems(text) == ""


def test_promtool_reports_a_bad_exposition():
    """The check can fail: a counter without _total and a gauge with it."""
    bad = "# HELP bad_count c\n# TYPE bad_count counter\nbad_count 1\n"
    assert promtool_problems(bad) != ""


def test_members_get_base_port_plus_index():
    region = Region("x.py", members=2, bootstrap="127.0.0.1:9092", metrics_port=9400)
    assert region.metrics_bind("member-0") == ("127.0.0.1", 9400)
    assert region.metrics_bind("member-7") == ("127.0.0.1", 9407)
    argv = member_argv(
        sys.executable,
        "x.py",
        name="member-1",
        coordinator="tcp://127.0.0.1:1",
        bootstrap="b:1",
        group="g",
        output_dir="o",
        state_dir="s",
        region_index=0,
        min_members=1,
        region={
            "mode": "periodic",
            "period_s": 1,
            "drain_timeout_s": 1,
            "reset_timeout_s": 1,
            "max_consecutive_resets": 1,
            "member_timeout_s": 1,
        },
        params={},
        kafka_stdin=False,
        metrics=("0.0.0.0", 9401),
    )
    assert argv[-4:] == ["--metrics-host", "0.0.0.0", "--metrics-port", "9401"]
    assert Region("x.py", members=1, bootstrap="b:1").metrics_bind("member-0") is None
    with pytest.raises(ValueError, match="metrics port"):
        Region("x.py", members=1, bootstrap="b:1", metrics_port=65535 - MAX_METRICS_PORTS + 1)


def test_spark_metrics_port_option():
    base = {
        "kafka.bootstrap.servers": "127.0.0.1:9092",
        "kafka.group.id": "g",
        "subscribe": "a",
        "coordinator": "tcp://127.0.0.1:5570",
    }
    assert parse_options(base).metrics_port is None
    opts = parse_options({**base, "metricsPort": "9500", "metricsHost": "0.0.0.0"})
    assert (opts.metrics_port, opts.metrics_host) == (9500, "0.0.0.0")
    for bad in ("-1", "70000", "x"):
        with pytest.raises(InvalidOptionError, match="metricsPort"):
            parse_options({**base, "metricsport": bad})


def test_member_with_its_metrics_port_taken_exits_with_bad_settings(tmp_path, caplog):
    (tmp_path / "p.py").write_text(PIPELINE)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = MemberSettings(
            pipeline=str(tmp_path / "p.py"),
            bootstrap="127.0.0.1:9",
            group="g",
            coordinator="tcp://127.0.0.1:9",
            member="member-0",
            output_dir=tmp_path / "out",
            state_dir=tmp_path / "state",
            metrics_port=port,
        )
        assert Member(settings).run() == ExitCode.CONFIG
    assert f"cannot serve /metrics on 127.0.0.1:{port}" in caplog.text


def test_spark_runner_with_its_metrics_port_taken_fails_before_any_member_joins():
    from cr_consumer.spark.offsets import SourceOffset
    from cr_consumer.spark.planner import QueryPlanner

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        planner = QueryPlanner(
            parse_options(
                {
                    "kafka.bootstrap.servers": "127.0.0.1:9",
                    "kafka.group.id": "g",
                    "subscribe": "a",
                    "coordinator": "tcp://127.0.0.1:9",
                    "metricsPort": str(port),
                }
            )
        )
        try:
            with pytest.raises(OSError, match=f"cannot serve /metrics on 127.0.0.1:{port}"):
                planner.latest_offset(SourceOffset.initial(), None)  # the first trigger starts the members
            assert planner.members == []
            assert planner.metrics_endpoint is None
        finally:
            planner.close()
