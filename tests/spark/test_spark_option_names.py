"""Spark's Kafka source option names: values, the closest valid name for an
unknown one, and the schema in Spark's column order."""

from __future__ import annotations

import pytest

from cr_consumer.kafka.start_position import StartKind
from cr_consumer.spark.arrow import Columns, arrow_schema, spark_schema
from cr_consumer.spark.options import InvalidOptionError, parse_options

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "a", "coordinator": "tcp://127.0.0.1:5570"}


def parse(**changes):
    opts = {**BASE, **changes}
    return parse_options({k.lower(): v for k, v in opts.items() if v is not None})


def test_spark_names_parse():
    o = parse(
        **{
            "kafka.group.id": "etl",
            "startingOffsets": '{"a":{"0":23,"1":-2}}',
            "maxOffsetsPerTrigger": "500",
            "minPartitions": "8",
            "failOnDataLoss": "false",
            "includeHeaders": "true",
            "kafka.session.timeout.ms": "6000",
        }
    )
    assert o.group_id == "etl"
    assert o.group_for("q1") == "etl"
    assert o.starting.kind is StartKind.SPECIFIC
    assert o.starting.values == ((("a", 0), 23), (("a", 1), -2))
    assert (o.max_offsets_per_trigger, o.min_partitions, o.fail_on_data_loss, o.include_headers) == (
        500,
        8,
        False,
        True,
    )
    assert o.consumer_properties == {"session.timeout.ms": 6000}
    default = parse()
    assert default.starting is None
    assert default.starting_or(StartKind.LATEST).kind is StartKind.LATEST
    assert default.fail_on_data_loss
    assert not default.include_headers
    assert default.group_id is None
    assert default.group_for("5f0c2a91d3e84b7a") == "crkafka-5f0c2a91d3e84b7a"
    assert parse(groupIdPrefix="etl").group_for("ab") == "etl-ab"
    assert parse(startingTimestamp="1700000000000").starting.timestamp_ms == 1_700_000_000_000
    by_time = parse(startingOffsetsByTimestamp='{"a":{"0":1700000000000}}').starting
    assert by_time.kind is StartKind.TIMESTAMP
    assert by_time.value_of("a", 0) == 1_700_000_000_000
    assert parse(subscribe=None, assign='{"a":[1,0],"b":[2]}').assign == (("a", 0), ("a", 1), ("b", 2))
    assert parse(endingOffsets='{"a":{"0":-1}}').ending == ((("a", 0), -1),)


@pytest.mark.parametrize(
    ("given", "closest"),
    [
        ("group.id", "kafka.group.id"),
        ("startPosition", "startingOffsets"),
        ("startTime", "startingTimestamp"),
        ("maxRecordsPerBatch", "maxOffsetsPerTrigger"),
    ],
)
def test_refused_names_suggest_the_option_to_use(given, closest):
    for changes in ({given: "1"}, {given: "1", closest: "1"}):
        with pytest.raises(InvalidOptionError) as err:
            parse(**changes)
        assert err.value.option == given.lower()
        assert f"unknown option; did you mean {closest}?" in str(err.value)


@pytest.mark.parametrize(
    ("given", "closest"),
    [
        ("startingOffset", "startingOffsets"),
        ("maxOffsetPerTrigger", "maxOffsetsPerTrigger"),
        ("subscribepatern", "subscribePattern"),
        ("failOnDataLos", "failOnDataLoss"),
        ("includeHeader", "includeHeaders"),
    ],
)
def test_unknown_option_names_the_closest(given, closest):
    with pytest.raises(InvalidOptionError) as err:
        parse(**{given: "1"})
    assert err.value.option == given.lower()
    assert f"did you mean {closest}?" in str(err.value)


def test_contradictions_and_unsupported_options_fail():
    for changes, option in [
        ({"assign": '{"a":[0]}'}, "subscribe"),
        ({"subscribe": None, "assign": "[0]"}, "assign"),
        ({"startingOffsets": "earliest", "startingTimestamp": "5"}, "startingTimestamp"),
        ({"startingOffsets": '{"a":{"0":-3}}'}, "startingOffsets"),
        ({"endingTimestamp": "5"}, "endingtimestamp"),
        ({"groupIdPrefix": "a b"}, "groupIdPrefix"),
    ]:
        with pytest.raises(InvalidOptionError) as err:
            parse(**changes)
        assert err.value.option == option, (changes, str(err.value))


def test_schema_in_spark_order_with_optional_headers():
    from pyspark.sql.pandas.types import to_arrow_schema

    for headers in (False, True):
        assert to_arrow_schema(spark_schema(headers), timezone="UTC").equals(arrow_schema(headers))
    assert spark_schema(False).fieldNames() == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
    ]
    assert spark_schema(True).fieldNames()[-1] == "headers"
    columns = Columns("t", 1, include_headers=False)
    columns.extend([5], [1_700_000_000_123], [0], [b"k"], [b"v"], [[("h", b"x")]])
    batch = columns.take(1)
    assert batch.schema.equals(arrow_schema(False))
    assert batch.to_pylist()[0]["timestampType"] == 0
    assert batch.to_pylist()[0]["topic"] == "t"
