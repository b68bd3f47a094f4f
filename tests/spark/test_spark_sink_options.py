"""The crkafka sink's options, input schema and reports: refused whole, naming what is wrong."""

from __future__ import annotations

import json

import pytest
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, LongType, StringType, StructType

from coordinator.protocol.region.transactions import PreparedTxn, TxnPartition
from coordinator.protocol.wire.errors import Invalid
from cr_consumer.spark.options import InvalidOptionError
from cr_consumer.spark.sink.options import input_columns, parse_sink_options
from cr_consumer.spark.sink.reports import MAX_TASKS, Decision, TaskOutcome, TaskReport

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "out", "checkpointLocation": "/tmp/ck"}


def test_options_are_typed_and_keep_spark_names():
    options = parse_sink_options({**BASE, "kafka.linger.ms": "5", "kafka.compression.type": "gzip"})
    assert options.topic == "out"
    assert options.properties() == {"linger.ms": 5, "compression.type": "gzip"}
    assert options.decision_prefix == "crkafka-sink-decisions"


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"kafka.bootstrap.servers": "nohostport"}, "kafka.bootstrap.servers"),
        ({"topic": "no spaces"}, "topic"),
        ({"subscribe": "x"}, "subscribe"),
        ({"kafka.transactional.id": "mine"}, "kafka.transactional.id"),
        ({"kafka.acks": "1"}, "kafka.acks"),
        ({"kafka.linger.ms": "soon"}, "kafka.linger.ms"),
        ({"kafka.no.such.setting": "1"}, "kafka.no.such.setting"),
        ({"decisionTopicPrefix": "x" * 240}, "decisionTopicPrefix"),
    ],
)
def test_bad_options_name_the_option(change, named):
    with pytest.raises(InvalidOptionError) as err:
        parse_sink_options({**BASE, **change})
    assert err.value.option.lower() == named.lower(), err.value


HEADERS = ArrayType(StructType().add("key", StringType()).add("value", BinaryType()))


def test_input_schema_is_spark_kafka_sinks():
    options = parse_sink_options({k: v for k, v in BASE.items() if k != "topic"})
    schema = (
        StructType()
        .add("extra", LongType())
        .add("value", StringType())
        .add("key", BinaryType())
        .add("topic", StringType())
        .add("partition", IntegerType())
        .add("headers", HEADERS)
    )
    columns = input_columns(schema, options)
    assert (columns.value, columns.key, columns.topic, columns.partition, columns.headers) == (1, 2, 3, 4, 5)
    with pytest.raises(InvalidOptionError, match="column value"):
        input_columns(StructType().add("key", StringType()).add("topic", StringType()), options)
    with pytest.raises(InvalidOptionError, match="'topic'"):
        input_columns(StructType().add("value", StringType()), options)
    with pytest.raises(InvalidOptionError, match="column partition"):
        input_columns(
            StructType().add("value", StringType()).add("topic", StringType()).add("partition", LongType()), options
        )
    bad = ArrayType(StructType().add("key", StringType()).add("value", StringType()))
    with pytest.raises(InvalidOptionError, match="column headers"):
        input_columns(StructType().add("value", StringType()).add("topic", StringType()).add("headers", bad), options)


TXN = PreparedTxn("crkafka-sink-q-0", 7, 1, (TxnPartition("out", 0, 12),))


def test_reports_and_decisions_round_trip():
    report = TaskReport("q", 3, 0, 1, TaskOutcome.PREPARED, TXN)
    assert TaskReport.decode(report.encode()) == report
    decision = Decision("q", 3, (TXN,), 4)
    assert Decision.decode(decision.encode(), "d") == decision


@pytest.mark.parametrize(
    "doc",
    [
        {"v": 2, "query": "q", "batch": 0, "task": 0, "attempt": 0, "outcome": "empty"},
        {"v": 1, "query": "q", "batch": -1, "task": 0, "attempt": 0, "outcome": "empty"},
        {"v": 1, "query": "q", "batch": 0, "task": MAX_TASKS, "attempt": 0, "outcome": "empty"},
        {"v": 1, "query": "q", "batch": 0, "task": 0, "attempt": 0, "outcome": "done"},
        {"v": 1, "query": "q", "batch": 0, "task": 0, "attempt": 0, "outcome": "prepared"},
        {"v": 1, "query": "q", "batch": 0, "task": 0, "attempt": 0, "outcome": "empty", "txn": TXN.to_wire()},
        {"v": 1, "query": "", "batch": 0, "task": 0, "attempt": 0, "outcome": "empty"},
    ],
)
def test_a_bad_report_is_refused(doc):
    with pytest.raises(Invalid):
        TaskReport.decode(json.dumps(doc))


def test_a_bad_decision_is_refused():
    with pytest.raises(Invalid):
        Decision.decode(b"not json", "d")
    with pytest.raises(Invalid):
        Decision.decode(json.dumps({"v": 2, "query": "q", "batch": 0, "txns": [{"tid": "t"}], "width": 1}), "d")
    good = {"v": 2, "query": "q", "batch": 0, "txns": [], "width": 1}
    assert Decision.decode(json.dumps(good), "d") == Decision("q", 0, (), 1)
    for bad in ({"width": MAX_TASKS + 1}, {"width": -1}, {"width": None}, {"v": 1}):
        with pytest.raises(Invalid):
            Decision.decode(json.dumps({**good, **bad}), "d")
