"""The crkafka sink's driver half (``commit`` and ``abort``) on real transactions, without Spark:
the tasks' prepared transactions are made here the way a task makes them (one transactional
producer per task index, flushed, left open), and the driver's calls run as Spark runs them."""

from __future__ import annotations

import uuid

import pytest
from pyspark.sql.types import StringType, StructType

from coordinator.kafka.raw_batches import read_committed
from cr_consumer.kafka.kafka_python.producer import TransactionalProducer, producer_config
from cr_consumer.runtime.pipeline.kafka_sink import PRODUCER_DEFAULTS
from cr_consumer.spark.sink.decisions import DecisionLog
from cr_consumer.spark.sink.options import DEFAULT_DECISION_PREFIX, parse_sink_options
from cr_consumer.spark.sink.reports import Decision, SinkCommitMessage, TaskOutcome, TaskReport
from cr_consumer.spark.sink.writer import CrKafkaStreamWriter, transactional_id
from cr_consumer.testing.kafka_util import create_topic

pytestmark = [pytest.mark.timeout(120)]


def _prepare(bootstrap: str, topic: str, query: str, batch: int, task: int, values: list[bytes]) -> SinkCommitMessage:
    """What a task does (writer steps 3-4): its report, its transaction left open."""
    producer = TransactionalProducer(producer_config(bootstrap, {}, transactional_id(query, task), PRODUCER_DEFAULTS))
    try:
        producer.begin()
        for value in values:
            producer.send(topic, None, value, [], task)
        producer.flush(30.0)
        txn = producer.prepared(producer.outcome().partitions)
    finally:
        producer.close(5.0)
    return SinkCommitMessage(TaskReport(query, batch, task, 0, TaskOutcome.PREPARED, txn).encode())


def _writer(bootstrap: str, topic: str) -> CrKafkaStreamWriter:
    options = parse_sink_options({"kafka.bootstrap.servers": bootstrap, "topic": topic})
    return CrKafkaStreamWriter(options, StructType().add("value", StringType()))


def _committed(bootstrap: str, topic: str, partitions: int = 2) -> tuple[list[bytes], int, int]:
    """(committed values, open transactions, aborted records) over the topic's partitions."""
    settings = {"bootstrap_servers": bootstrap, "request_timeout_ms": 10_000, "client_id": "sink-test"}
    reads = [read_committed(settings, topic, p) for p in range(partitions)]
    values = [r.value for read in reads for r in read.records]
    return values, sum(len(read.open_transactions) for read in reads), sum(read.aborted_records for read in reads)


def test_abort_fences_every_task_of_the_batch(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    query = str(uuid.uuid4())
    writer = _writer(bootstrap, topic)
    reported = _prepare(bootstrap, topic, query, 0, 0, [b"a", b"b"])
    _prepare(bootstrap, topic, query, 0, 1, [b"c"])  # its task then failed: no message
    writer.abort([reported, None], 0)
    assert _committed(bootstrap, topic) == ([], 0, 3)


def test_a_replayed_decided_batch_commits_the_recorded_transactions_once(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    query = str(uuid.uuid4())
    writer = _writer(bootstrap, topic)
    writer.commit([_prepare(bootstrap, topic, query, 0, t, [f"0-{t}".encode()]) for t in range(2)], 0)
    first = [_prepare(bootstrap, topic, query, 1, t, [f"1-{t}".encode()]) for t in range(2)]
    # The first attempt's driver records batch 1's decision and dies before any commit.
    DecisionLog(writer.settings, DEFAULT_DECISION_PREFIX, query).record(_decision(query, 1, first), 30.0)
    # The replay's tasks find the decision and write nothing; its commit commits the recorded ones.
    replay = [SinkCommitMessage(TaskReport(query, 1, t, 0, TaskOutcome.DECIDED).encode()) for t in range(2)]
    writer.commit(replay, 1)
    writer.commit(replay, 1)  # Spark may deliver it again after a restart: harmless
    values, still_open, aborted = _committed(bootstrap, topic)
    assert sorted(values) == [b"0-0", b"0-1", b"1-0", b"1-1"]
    assert (still_open, aborted) == (0, 0)


def test_a_narrower_replay_fences_the_task_indexes_a_wider_attempt_left_open(bootstrap, names):
    """Batch 0 ran with three tasks (the query's width); batch 1's first attempt with three
    tasks prepared and its driver died before its decision; the replay has two tasks: its commit
    fences the third index, whose transaction is aborted instead of staying open for good."""
    topic = create_topic(bootstrap, names.topic(), partitions=3)
    query = str(uuid.uuid4())
    writer = _writer(bootstrap, topic)
    writer.commit([_prepare(bootstrap, topic, query, 0, t, [f"0-{t}".encode()]) for t in range(3)], 0)
    for t in range(3):
        _prepare(bootstrap, topic, query, 1, t, [f"1-{t}-first".encode()])
    writer.commit([_prepare(bootstrap, topic, query, 1, t, [f"1-{t}".encode()]) for t in range(2)], 1)
    values, still_open, aborted = _committed(bootstrap, topic, partitions=3)
    assert sorted(values) == [b"0-0", b"0-1", b"0-2", b"1-0", b"1-1"]
    assert (still_open, aborted) == (0, 3)
    last = DecisionLog(writer.settings, DEFAULT_DECISION_PREFIX, query).last(30.0)
    assert last is not None
    assert (last.batch, last.width) == (1, 3)


def test_a_report_of_another_batch_fails_the_commit_before_anything_changes(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    query = str(uuid.uuid4())
    writer = _writer(bootstrap, topic)
    messages = [_prepare(bootstrap, topic, query, 3, 0, [b"x"])]
    with pytest.raises(RuntimeError, match="batch 3"):
        writer.commit(messages, 4)
    assert DecisionLog(writer.settings, DEFAULT_DECISION_PREFIX, query).last(30.0) is None
    assert _committed(bootstrap, topic)[1] == 1  # still open: nothing was decided


def _decision(query: str, batch: int, messages: list[SinkCommitMessage]) -> Decision:
    txns = tuple(txn for m in messages if (txn := TaskReport.decode(m.report).txn) is not None)
    return Decision(query, batch, txns, len(messages))
