"""OperatorConfig: validation at construction, derived Kafka settings."""

from __future__ import annotations

import pytest

from cr_consumer import OperatorConfig, StartKind, StartPosition
from cr_consumer.kafka.kafka_python.properties import kafka_python_config
from cr_consumer.operator.config import ConfigError, MalformedPolicy, RegionMode

BASE = dict(bootstrap_servers="127.0.0.1:9092", group_id="g", operator_name="m0", topics=["t"])


def cfg(**kw):
    return OperatorConfig(**{**BASE, **kw})


def test_defaults_and_derived_timeouts():
    c = cfg(drain_timeout_s=180, reset_timeout_s=20)
    assert c.start_position == StartPosition(StartKind.COMMITTED)
    assert c.region_mode is RegionMode.PERIODIC
    assert c.effective_queue_capacity == 50_000
    k = kafka_python_config(c.client_properties())
    assert k["enable_auto_commit"] is False
    assert k["max_poll_interval_ms"] == 540_000  # 3 x max(drain, reset)
    assert k["metadata_max_age_ms"] == 2000
    assert k["max_poll_records"] == 500
    assert k["group_id"] == "g"
    assert k["fetch_max_bytes"] == 1024 * 1024
    assert k["fetch_max_wait_ms"] == 100  # not Kafka's 50 MB / 500 ms
    assert [a.name for a in k["partition_assignment_strategy"]] == ["range", "roundrobin"]
    assert c.merge_timeout_s == 10.0  # min(reset/2, max.poll.interval/2, 15)


def test_pass_through_properties_by_dotted_name():
    c = cfg(
        consumer_properties={
            "fetch.max.bytes": 1024,
            "metadata.max.age.ms": 60000,
            "session.timeout.ms": 6000,
            "max.poll.interval.ms": 10,
        }
    )
    k = kafka_python_config(c.client_properties())
    assert k["fetch_max_bytes"] == 1024
    assert k["metadata_max_age_ms"] == 2000  # capped
    assert k["session_timeout_ms"] == 6000
    assert k["heartbeat_interval_ms"] == 2000
    assert k["max_poll_interval_ms"] == 540_000  # raised to the floor


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        (dict(topics=[], pattern=None), "no subscription"),
        (dict(pattern="x.*"), "either topics or pattern"),
        (dict(topics=(), pattern="(["), "not a valid regular expression"),
        (dict(start_position="specific"), "an offset or time belongs to one partition"),
        (
            dict(start_position=StartPosition(StartKind.TIMESTAMP, values=((("t", 0), 5),))),
            "an offset or time belongs to one partition",
        ),
        (dict(start_position="timestamp"), "StartPosition.at_time(ms)"),
        (dict(start_position=StartPosition.at_time(-1)), "int >= 0"),
        (dict(start_position=StartPosition(StartKind.EARLIEST, timestamp_ms=5)), "takes no time"),
        (dict(start_position="beginning"), "not one of"),
        (dict(start_position="sideways"), "not one of"),
        (dict(region_mode="operator_driven"), "trigger_count > 0"),
        (dict(region_mode="operator_driven", trigger_count=0), "trigger_count > 0"),
        (dict(trigger_count=5), "only used with region_mode operator_driven"),
        (dict(max_poll_records=0), "max_poll_records"),
        (dict(queue_capacity=10), "queue_capacity must be an integer >= max_poll_records"),
        (dict(drain_timeout_s=0), "drain_timeout_s"),
        (dict(coordinator="localhost:5570"), "coordinator endpoint must look like tcp://HOST:PORT"),
        (dict(operator_name=""), "operator_name"),
        (dict(value_deserializer="json"), "value_deserializer must be callable"),
        (dict(on_malformed="ignore"), "MalformedPolicy"),
        (dict(consumer_properties={"enable.auto.commit": True}), "the operator's drain"),
        (dict(consumer_properties={"group.id": "x"}), "OperatorConfig(group_id"),
        (dict(consumer_properties={"fetch_max_bytes": 1}), "dotted Kafka name"),
        (dict(consumer_properties={"no.such.setting": 1}), "unknown consumer property 'no.such.setting'"),
        (dict(consumer_properties={"partition.assignment.strategy": "sticky"}), "is not supported"),
        (
            dict(consumer_properties={"partition.assignment.strategy": ["cooperative-sticky", "range"]}),
            "cannot be combined with eager assignors",
        ),
        (dict(consumer_properties={"auto.offset.reset": "smallest"}), "auto.offset.reset"),
        (
            dict(consumer_properties={"session.timeout.ms": 3000, "heartbeat.interval.ms": 3000}),
            "heartbeat.interval.ms",
        ),
    ],
)
def test_bad_settings_fail_naming_the_setting(kw, words):
    with pytest.raises(ConfigError, match=None) as info:
        cfg(**kw)
    assert words in str(info.value)


def test_enums_from_strings_and_roundrobin_only():
    c = cfg(
        start_position="Earliest",
        on_malformed="FAIL",
        consumer_properties={"partition.assignment.strategy": ["roundrobin"]},
    )
    assert c.start_position == StartPosition(StartKind.EARLIEST)
    assert cfg(start_position=StartKind.LATEST).start_position.kind is StartKind.LATEST
    assert c.on_malformed is MalformedPolicy.FAIL
    assert [a.name for a in kafka_python_config(c.client_properties())["partition_assignment_strategy"]] == [
        "roundrobin"
    ]
    c = cfg(region_mode="operator_driven", trigger_count=100, start_position=StartPosition.at_time(0))
    assert c.trigger_count == 100


def test_cooperative_sticky_alone_is_the_incremental_switch():
    assert cfg().cooperative is False
    for spelling in (
        "cooperative-sticky",
        ["org.apache.kafka.clients.consumer.CooperativeStickyAssignor"],
        "CooperativeStickyAssignor",
    ):
        c = cfg(consumer_properties={"partition.assignment.strategy": spelling})
        assert c.cooperative is True
        assert [a.name for a in kafka_python_config(c.client_properties())["partition_assignment_strategy"]] == [
            "cooperative-sticky"
        ]
    assert cfg(consumer_properties={"partition.assignment.strategy": "range,roundrobin"}).cooperative is False


def test_frozen():
    c = cfg()
    with pytest.raises(AttributeError):
        c.group_id = "other"


@pytest.mark.parametrize("name", ["drain_timeout_s", "reset_timeout_s", "commit_period_s", "coordinator_timeout_s"])
@pytest.mark.parametrize("value", [float("inf"), float("nan"), 86_401, True, 0, -1])
def test_durations_are_bounded(name, value):
    """An infinite, NaN, boolean or over-a-day duration would make a wait that must end unbounded."""
    with pytest.raises(ConfigError, match=name):
        cfg(**{name: value})


def test_the_filter_of_aborted_records_is_the_source_s_own_property_and_needs_read_committed():
    on = cfg(consumer_properties={"isolation.level": "read_committed", "crkafka.filter.aborted": "true"})
    assert on.filter_aborted is True
    assert "crkafka.filter.aborted" not in on.client_properties()  # read by the source, never by the client
    # the source keeps read_committed itself: its client must return open transactions' records
    assert kafka_python_config(on.client_properties())["isolation_level"] == "read_uncommitted"
    assert cfg(consumer_properties={"isolation.level": "read_committed"}).client_properties()["isolation.level"] == (
        "read_committed"
    )
    assert cfg().filter_aborted is False  # off by default
    assert cfg(consumer_properties={"crkafka.filter.aborted": False}).filter_aborted is False
    with pytest.raises(ConfigError, match=r"needs isolation\.level=read_committed"):
        cfg(consumer_properties={"crkafka.filter.aborted": True})
    with pytest.raises(ConfigError, match="must be true or false"):
        cfg(consumer_properties={"isolation.level": "read_committed", "crkafka.filter.aborted": "yes"})
    with pytest.raises(ConfigError, match=r"unknown property 'crkafka\.filter\.aborts'"):
        cfg(consumer_properties={"crkafka.filter.aborts": True})


def test_the_project_s_properties_reach_neither_a_client_nor_the_spark_source():
    from cr_consumer.kafka.property_rules import PropertyError, check_name, client_checked
    from cr_consumer.spark.options.kafka_properties import kafka_defaults, parse_kafka_property
    from cr_consumer.spark.options.values import InvalidOptionError

    with pytest.raises(PropertyError, match="never given to a Kafka client"):
        client_checked({"crkafka.filter.aborted": True})
    with pytest.raises(PropertyError, match="read by the consumer operator only"):
        check_name("crkafka.filter.aborted", clients=(), reserved={})
    with pytest.raises(InvalidOptionError, match="read by the consumer operator only"):
        parse_kafka_property("kafka.crkafka.filter.aborted", "true", kafka_defaults())
