"""Options fail at load() naming the option; offsets and Arrow batches round-trip."""

from __future__ import annotations

import json
import re

import pytest

from cr_consumer.kafka.client import KafkaRecord, TimestampType
from cr_consumer.kafka.start_position import StartKind, StartPosition
from cr_consumer.spark.arrow import Columns, arrow_schema, spark_schema
from cr_consumer.spark.offsets import OffsetFormatError, SourceOffset
from cr_consumer.spark.options import InvalidOptionError, parse_options

BASE = {
    "kafka.bootstrap.servers": "127.0.0.1:9092",
    "kafka.group.id": "g",
    "subscribe": "a,b",
    "coordinator": "tcp://127.0.0.1:5570",
}

BAD = [
    ({"kafka.bootstrap.servers": None}, "kafka.bootstrap.servers"),
    ({"kafka.bootstrap.servers": "nohostport"}, "kafka.bootstrap.servers"),
    ({"coordinator": ""}, "coordinator"),
    ({"coordinator": None, "members": "2"}, "members"),
    ({"coordinator": None, "regionIndex": "1"}, "regionIndex"),
    ({"coordinator": "localhost:5570"}, "coordinator"),
    ({"subscribe": None}, "subscribe"),
    ({"subscribePattern": "a.*"}, "subscribe"),
    ({"subscribe": "bad topic"}, "subscribe"),
    ({"members": "0"}, "members"),
    ({"members": "two"}, "members"),
    ({"startingTimestamp": "soon"}, "startingTimestamp"),
    ({"startingOffsetsByTimestamp": '{"a":{"0":-1}}'}, "startingOffsetsByTimestamp"),
    ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
    ({"minPartitions": "0"}, "minPartitions"),
    ({"failOnDataLoss": "maybe"}, "failOnDataLoss"),
    ({"startingOffsets": "first"}, "startingOffsets"),
    ({"kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset"),
    ({"kafka.enable.auto.commit": "true"}, "kafka.enable.auto.commit"),
    ({"kafka.no.such.property": "1"}, "kafka.no.such.property"),
    ({"kafka.session.timeout.ms": "soon"}, "kafka.session.timeout.ms"),
    ({"colour": "blue"}, "colour"),
    ({"kafka.client": "java"}, "kafka.client"),
    ({"commitOnBatchRead": "yes please"}, "commitOnBatchRead"),
    ({"commitOnBatchRead": "true", "kafka.group.id": None}, "commitOnBatchRead"),
]


def _opts(**changes):
    out = dict(BASE)
    for k, v in changes.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return {k.lower(): v for k, v in out.items()}  # Spark delivers lower-cased keys


@pytest.mark.parametrize(("change", "option"), BAD, ids=[o for _, o in BAD])
def test_invalid_option_is_named(change, option):
    with pytest.raises(InvalidOptionError) as err:
        parse_options(_opts(**change))
    assert err.value.option.lower() == option.lower()
    assert option in str(err.value)


def test_valid_options_parse():
    o = parse_options(
        _opts(
            **{
                "members": "3",
                "startingTimestamp": "2024-01-01T00:00:00Z",
                "kafka.session.timeout.ms": "6000",
                "kafka.check.crcs": "false",
            }
        )
    )
    assert o.topics == ("a", "b")
    assert o.pattern is None
    assert o.members == 3
    assert o.starting == StartPosition(StartKind.TIMESTAMP, timestamp_ms=1704067200000)
    assert o.consumer_properties == {"session.timeout.ms": 6000, "check.crcs": False}
    p = parse_options(_opts(subscribe=None, subscribePattern=r"orders-\d+"))
    assert p.pattern == r"orders-\d+"
    assert p.topics == ()


def test_offset_json_round_trip():
    off = SourceOffset(
        epoch=3, positions={("a", 0): 10, ("a.b-c", 11): 7}, first={("a.b-c", 11): 2}, query="5f0c2a91d3e84b7a"
    )
    wire = json.loads(json.dumps(off.to_json()))
    assert wire == {
        "v": 1,
        "epoch": 3,
        "offsets": {"a:0": 10, "a.b-c:11": 7},
        "from": {"a.b-c:11": 2},
        "query": "5f0c2a91d3e84b7a",
    }
    assert SourceOffset.from_json(wire) == off
    assert SourceOffset.from_json(wire).to_json() == wire
    assert SourceOffset.initial().to_json() == SourceOffset.initial().to_json() == {"v": 1, "epoch": 0, "offsets": {}}
    with pytest.raises(OffsetFormatError, match="version"):
        SourceOffset.from_json({"v": 2, "epoch": 0, "offsets": {}})
    with pytest.raises(OffsetFormatError, match="partition key"):
        SourceOffset.from_json({"v": 1, "epoch": 0, "offsets": {"nocolon": 1}, "query": "5f0c2a91d3e84b7a"})


def test_offset_query_id_round_trips_and_is_bounded():
    off = SourceOffset(epoch=1, positions={("a", 0): 4}, query="5f0c2a91d3e84b7a")
    wire = json.loads(json.dumps(off.to_json()))
    assert wire["query"] == "5f0c2a91d3e84b7a"
    assert SourceOffset.from_json(wire) == off
    with pytest.raises(OffsetFormatError, match="no query id"):  # only the initial offset has none
        SourceOffset.from_json({**wire, "query": ""})
    for bad in ("x" * 16, "5F0C2A91D3E84B7A", "ab", "a" * 33, 7, None, "5f0c2a91\n"):
        with pytest.raises(OffsetFormatError, match="query id"):
            SourceOffset.from_json({**wire, "query": bad})


def test_each_query_has_its_own_coordinator_group():
    from cr_consumer.spark.control import coordinator_group

    assert coordinator_group("orders", "5f0c2a91d3e84b7a") == "orders#q5f0c2a91d3e84b7a"


def test_arrow_batch_matches_spark_schema():
    from pyspark.sql.pandas.types import to_arrow_schema

    assert to_arrow_schema(spark_schema(), timezone="UTC").equals(arrow_schema())
    columns = Columns("t", 1, include_headers=True)
    columns.extend_records(
        [
            KafkaRecord("t", 1, 5, 1_700_000_000_123, TimestampType.CREATE_TIME, b"k", b"v"),
            KafkaRecord("t", 1, 6, 1_700_000_000_124, TimestampType.LOG_APPEND_TIME, None, b"w", (("h", b"x"),)),
        ]
    )
    batch = columns.take(2)
    assert batch.schema.equals(arrow_schema())
    assert len(columns) == 0
    rows = batch.to_pylist()
    assert [(r["partition"], r["offset"], r["key"], r["value"], r["timestampType"]) for r in rows] == [
        (1, 5, b"k", b"v", 0),
        (1, 6, None, b"w", 1),
    ]
    assert rows[1]["headers"] == [{"key": "h", "value": b"x"}]
    assert rows[0]["timestamp"].timestamp() == 1_700_000_000.123


@pytest.mark.spark
@pytest.mark.xdist_group("spark")
def test_invalid_options_fail_at_load(spark):
    def load(**changes):
        reader = spark.readStream.format("crkafka")
        for k, v in _opts(**changes).items():
            reader = reader.option(k, v)
        return reader.load()

    df = load()  # valid options load without touching Kafka
    assert df.isStreaming
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    for change, option in [
        ({"members": "0"}, "members"),
        ({"colour": "blue"}, "colour"),
        ({"subscribePattern": "x"}, "subscribe"),
        ({"kafka.no.such.property": "1"}, "kafka.no.such.property"),
        ({"kafka.heartbeat.interval.ms": "30000"}, "kafka.*"),
    ]:
        with pytest.raises(Exception, match=re.escape(f"crkafka option '{option}'")):
            load(**change)


def test_membership_configs():
    from cr_consumer.spark.client_properties import member_name, membership_properties

    options = parse_options(_opts(members="2", **{"kafka.group.instance.id": "etl", "kafka.max.poll.records": "300"}))
    configs = [membership_properties(options, "g", i) for i in range(options.members)]
    assert [member_name(i) for i in range(2)] == ["crkafka-0", "crkafka-1"]
    assert [c["group.instance.id"] for c in configs] == ["etl-0", "etl-1"]  # static membership: one id each
    assert {c["group.id"] for c in configs} == {"g"}
    assert not any(c["enable.auto.commit"] for c in configs)
    assert {c["max.poll.records"] for c in configs} == {300}
    with pytest.raises(InvalidOptionError, match=r"heartbeat\.interval\.ms"):
        parse_options(_opts(**{"kafka.heartbeat.interval.ms": "30000"}))


def test_query_of_checkpoint_reads_the_newest_offset_log_entry(tmp_path):
    from cr_consumer.spark.control import query_of_checkpoint

    assert query_of_checkpoint(tmp_path / "none") is None
    offsets = tmp_path / "offsets"
    offsets.mkdir()
    assert query_of_checkpoint(tmp_path) is None
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}'
    (offsets / "0").write_text(f'v1\n{meta}\n{{"v":1,"epoch":0,"offsets":{{}}}}\n')
    assert query_of_checkpoint(tmp_path) is None  # the initial offset: no query id yet
    (offsets / "10").write_text(f'v1\n{meta}\n{{"v":1,"epoch":3,"offsets":{{}},"query":"5f0c2a91d3e84b7a"}}\n')
    (offsets / "9").write_text(f'v1\n{meta}\n{{"v":1,"epoch":2,"offsets":{{}},"query":"0000000000000000"}}\n')
    (offsets / ".10.crc").write_text("x")
    assert query_of_checkpoint(tmp_path) == "5f0c2a91d3e84b7a"


def test_kafka_client_and_batch_commit_options():
    from cr_consumer.kafka.client import ClientKind

    default = parse_options(_opts())
    assert default.client is ClientKind.LIBRDKAFKA  # the executors' default, unlike the operator's
    assert not default.commit_on_batch_read
    chosen = parse_options(_opts(**{"kafka.client": "kafka-python", "commitOnBatchRead": "true"}))
    assert chosen.client is ClientKind.KAFKA_PYTHON
    assert chosen.commit_on_batch_read
    assert chosen.consumer_properties == {}  # kafka.client is the source's option, not a consumer property


def test_a_property_librdkafka_refuses_fails_load_naming_it():
    with pytest.raises(InvalidOptionError) as err:
        parse_options(_opts(**{"kafka.metrics.num.samples": "3", "kafka.client": "librdkafka"}))
    assert "metrics.num.samples" in str(err.value)
    assert "kafka.client=kafka-python" in str(err.value)
    ok = parse_options(_opts(**{"kafka.metrics.num.samples": "3", "kafka.client": "kafka-python"}))
    assert ok.consumer_properties == {"metrics.num.samples": 3}
    fetch = parse_options(_opts(**{"kafka.fetch.max.wait.ms": "20", "kafka.client": "librdkafka"}))  # renamed: accepted
    assert fetch.consumer_properties == {"fetch.max.wait.ms": 20}


def test_librdkafka_without_confluent_kafka_fails_load_naming_the_extra(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "confluent_kafka" else real(name, *a)
    )
    with pytest.raises(InvalidOptionError) as err:
        parse_options(_opts(**{"kafka.client": "librdkafka"}))
    assert err.value.option == "kafka.client"
    assert "cr-consumer[librdkafka]" in str(err.value)
    assert parse_options(_opts(**{"kafka.client": "kafka-python"})).client.value == "kafka-python"


def test_only_a_streaming_query_needs_the_coordinator():
    from cr_consumer.spark.arrow import spark_schema
    from cr_consumer.spark.reader import CrKafkaBatchReader
    from cr_consumer.spark.source import CrKafkaDataSource

    source = CrKafkaDataSource(_opts(coordinator=None))
    assert source.source_options().coordinator is None
    assert isinstance(source.reader(spark_schema(False)), CrKafkaBatchReader)
    with pytest.raises(InvalidOptionError) as err:
        source.streamReader(spark_schema(False))
    assert err.value.option == "coordinator"
    assert "streaming query" in str(err.value)
