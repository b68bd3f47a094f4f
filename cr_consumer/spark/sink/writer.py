"""The ``crkafka`` sink's protocol: each task writes its rows in one Kafka transaction and
leaves it prepared; the driver records the batch's decision in the query's decision log, then
commits every prepared transaction; a replayed batch finds the decision or fences what an
earlier attempt left open.

PySpark's streaming writer API: ``write(iterator)`` runs in an executor's Python worker for each
task of a micro-batch and returns a commit message; once every task succeeded the driver calls
``commit(messages, batchId)`` (in a Python process of its own, per call), else
``abort(messages, batchId)``. A task learns its query id, batch id, partition index and attempt
from its ``TaskContext`` (Spark's local properties ``sql.streaming.queryId`` and
``streaming.sql.batchId``). The query id is kept in the checkpoint location, so it is the same
after a restart.

Transactional ids: ``crkafka-sink-<query id>-<task index>``, one per task index of the query,
the same in every batch.

A task (``write``, executor):

1. Its identity from the ``TaskContext``; a query that is not a micro-batch one fails here.
2. It reads the decision log's last decision (``decisions.py``). If that is this batch, an
   earlier attempt of the batch was decided (its driver died before Spark's commit log): the
   task writes nothing and reports ``decided``, so that nothing of the decided transactions is
   fenced.
3. A transactional producer with the task's id: ``init_transactions`` fences the id's earlier
   producer and aborts its open transaction: an earlier attempt of this task (a retried task, a
   replayed batch), or, harmless, the previous batch's, committed already.
4. It begins a transaction, sends every row (``bound`` keeps the unanswered sends bounded),
   flushes (bounded by ``FLUSH_TIMEOUT_S``), checks that every send was acknowledged, and
   reports ``prepared`` with the transaction (id, producer id and epoch, each partition's first
   offset; ``reports.TaskReport``), or ``empty`` without rows. The producer is closed without
   ending the transaction: it stays open, flushed, for the driver to end.

The driver (``commit``):

1. Decodes every message (a missing or invalid one fails the commit before anything changes);
   all must name this query and batch, each task index once.
2. Reads the decision log's last decision.
3. If it is this batch (a replay of a decided batch): the recorded transactions are the
   batch's; any this attempt prepared is aborted (EndTxn). Else it fences the ids of the task
   indexes the query used before (the last decision's width) that this batch has not: an
   earlier, wider attempt of the batch may have left transactions open there, which would hold
   every ``read_committed`` reader of their partitions. Then it records the decision (the
   prepared transactions and the width; a batch without any records nothing) and waits until
   it is durable.
4. Commits each decided transaction (``transactions.commit_or_raise``: EndTxn with the recorded
   producer id and epoch, then the partitions' markers read back: COMMIT everywhere, else
   ``UnresolvedTransaction``, the commit and so the query fails naming the transaction).

``abort`` (a task failed): unless the batch is decided, every task index of the batch, and of
the last decision's width, has its id fenced (``transactions.fence``: whatever a task left open, prepared or not, is aborted); the
query id comes from a surviving task's report; with none, the ids wait for the next attempt's
tasks to fence them (step 3).

A crash, at each step, and what follows (Spark replays a batch missing from its commit log):

* a task before its report: Spark retries the task (step 3 fences the attempt's transaction) or
  fails the batch (``abort``; a restart replays it, and step 3 fences);
* the driver before step 3 made the decision durable: the replay finds no decision for the batch;
  its tasks fence the earlier attempt's transactions (aborted: their records are never
  visible) and write the rows again;
* the driver after the decision, during or after step 4 (a kill -9 of the driver before Spark's
  commit log): the replay's tasks find the decision and write nothing; its step 3 finds the
  decision and step 4 commits the recorded transactions (a repeated commit is harmless; the
  markers confirm it), so every row is visible once;
* a decided transaction the broker aborted meanwhile (``transaction.timeout.ms`` passed before
  the driver came back): step 4 reads its ABORT marker and fails the query loudly, naming it.

Not covered: a replay narrower than an undecided attempt that was wider than every decided
batch of the query (a query's first batches, or a repartitioning wider than ever before, cut
short by a crash) leaves the extra indexes' transactions open until a later batch has that many
tasks (the crkafka source, and Spark's file and rate sources, plan a replayed batch as before);
speculative task attempts (``spark.speculation``) fence each other and fail the batch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from coordinator.kafka.raw_requests import TransactionEndError
from coordinator.kafka.transactions import RESOLVE_DEADLINE_S, commit_or_raise, end_prepared, fence
from coordinator.protocol.region.transactions import Resolve, Transactions
from coordinator.protocol.wire.errors import Invalid
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.kafka.kafka_python.producer import TransactionalProducer, producer_config
from cr_consumer.kafka.property_rules import int_property
from cr_consumer.runtime import fault_points
from cr_consumer.runtime.pipeline.kafka_sink import (
    CLOSE_TIMEOUT_S,
    FLUSH_TIMEOUT_S,
    PRODUCER_DEFAULTS,
    REQUEST_TIMEOUT_MS,
)
from cr_consumer.spark.sink.decisions import DecisionLog
from cr_consumer.spark.sink.options import InputColumns, SinkOptions, input_columns
from cr_consumer.spark.sink.reports import MAX_TASKS, Decision, SinkCommitMessage, TaskOutcome, TaskReport

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

#: Prefix of the sink's transactional ids.
TRANSACTIONAL_ID_PREFIX = "crkafka-sink"
#: The fault points' member name of the tasks and the driver's commit (``fault_points``).
FAULT_MEMBER = "spark-sink"
#: Bound of one read or write of the decision log: a broker that stops answering fails the
#: task or the commit instead of holding the batch.
DECISION_DEADLINE_S = 30.0
#: The tasks' producer defaults: the pipelines' Kafka sink's (``transaction.timeout.ms``: a
#: decided transaction must outlive a driver's restart; ``max.block.ms``), and larger record
#: batches sent less often: a task's rows are sent as fast as kafka-python takes them and
#: flushed at the end (the flush sends at once, so the linger adds nothing to a batch's time),
#: and fewer, larger produce requests leave the task's thread more of the GIL (about 1.2-1.4 x
#: the rows/s of kafka-python's 16 KiB / 0 ms, measured at load 12 on 2 cores). Half of
#: kafka-python's ``max.request.size``, so a full batch always fits a request.
TASK_PRODUCER_DEFAULTS = {**PRODUCER_DEFAULTS, "batch.size": 512 * 1024, "linger.ms": 20}
#: Spark's local properties a streaming task carries.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def transactional_id(query: str, task: int) -> str:
    return f"{TRANSACTIONAL_ID_PREFIX}-{query}-{task}"


def _bytes(value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"crkafka sink: a key or value of type {type(value).__name__}")


class CrKafkaStreamWriter(DataSourceStreamArrowWriter):
    """The module docstring's protocol; pickled to the executors with the checked options."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        self.options = options
        self.columns: InputColumns = input_columns(schema, options)  # fails the query's start
        props = options.properties()
        self.settings = admin_settings(
            options.bootstrap_servers,
            props,
            request_timeout_ms=int_property(props, "request.timeout.ms", REQUEST_TIMEOUT_MS),
            client_id="crkafka-sink",
        )

    def _log(self, query: str) -> DecisionLog:
        return DecisionLog(self.settings, self.options.decision_prefix, query)

    # -- executor -----------------------------------------------------------------------------
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """Steps 1-4 of a task."""
        from pyspark import TaskContext

        context = TaskContext.get()
        query = context.getLocalProperty(QUERY_ID_PROPERTY) if context is not None else None
        batch = context.getLocalProperty(BATCH_ID_PROPERTY) if context is not None else None
        if context is None or not query or batch is None:
            raise RuntimeError("the crkafka sink writes micro-batch streaming queries only (no batch id in the task)")
        task, attempt, batch_id = context.partitionId(), context.attemptNumber(), int(batch)
        if task >= MAX_TASKS:
            raise RuntimeError(f"crkafka sink: task {task} of batch {batch_id}: at most {MAX_TASKS} tasks per batch")
        decided = self._log(query).last(DECISION_DEADLINE_S)
        if decided is not None and decided.batch >= batch_id:
            if decided.batch > batch_id:
                raise RuntimeError(
                    f"crkafka sink: batch {batch_id} runs after batch {decided.batch} was decided "
                    f"(decision log {self._log(query).topic}): is the checkpoint location older than the log?"
                )
            log.info(
                "crkafka sink: batch %s of query %s is decided already; task %s writes nothing", batch_id, query, task
            )
            return SinkCommitMessage(TaskReport(query, batch_id, task, attempt, TaskOutcome.DECIDED).encode())
        report = self._write_rows(query, batch_id, task, attempt, iterator)
        return SinkCommitMessage(report.encode())

    def _write_rows(
        self, query: str, batch: int, task: int, attempt: int, iterator: Iterator[pa.RecordBatch]
    ) -> TaskReport:
        """Steps 3-4."""
        config = producer_config(
            self.options.bootstrap_servers,
            self.options.properties(),
            transactional_id(query, task),
            TASK_PRODUCER_DEFAULTS,
        )
        producer = TransactionalProducer(config)
        try:
            producer.begin()
            cols, fixed = self.columns, self.options.topic
            send = producer.send
            for rows in iterator:
                n = rows.num_rows
                values = rows.column(cols.value).to_pylist()
                keys = rows.column(cols.key).to_pylist() if cols.key is not None else [None] * n
                topics = [fixed] * n if fixed is not None else rows.column(cols.topic).to_pylist()
                parts = rows.column(cols.partition).to_pylist() if cols.partition is not None else [None] * n
                heads = rows.column(cols.headers).to_pylist() if cols.headers is not None else [None] * n
                for value, key, topic, part, head in zip(values, keys, topics, parts, heads, strict=True):
                    if not topic:
                        raise ValueError(f"crkafka sink: a row of batch {batch} has no topic (set the option topic)")
                    headers = [(h["key"], h["value"]) for h in head] if head else []
                    send(topic, _bytes(key), _bytes(value), headers, part)
                producer.bound(FLUSH_TIMEOUT_S)
            producer.flush(FLUSH_TIMEOUT_S)
            outcome = producer.outcome()
            if outcome.error is not None or outcome.unanswered:
                raise RuntimeError(
                    f"crkafka sink: task {task} of batch {batch}: {outcome.unanswered} of {outcome.sent} sends "
                    f"unanswered after the flush, error {outcome.error!r}"
                )
            if not outcome.sent:
                return TaskReport(query, batch, task, attempt, TaskOutcome.EMPTY)
            txn = producer.prepared(outcome.partitions)
            fault_points.hit(fault_points.Point.SPARK_TASK_PREPARED, FAULT_MEMBER)
            return TaskReport(query, batch, task, attempt, TaskOutcome.PREPARED, txn)
        finally:
            producer.close(CLOSE_TIMEOUT_S)  # the transaction stays open (prepared, or fenced later)

    # -- driver -------------------------------------------------------------------------------
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Steps 1-4 of the driver."""
        reports = _decode(messages, batchId, allow_missing=False)
        if not reports:
            return  # a batch without tasks
        query = reports[0].query
        decisions = self._log(query)
        last = decisions.last(DECISION_DEADLINE_S)
        prepared = tuple(r.txn for r in reports if r.txn is not None)
        if last is not None and last.batch > batchId:
            raise RuntimeError(f"crkafka sink: commit of batch {batchId} after batch {last.batch} was decided")
        if last is not None and last.batch == batchId:
            decided = last.txns
            for txn in prepared:
                if txn not in decided:
                    end_prepared(self.settings, txn, commit=False, deadline_s=RESOLVE_DEADLINE_S)
            log.info(
                "crkafka sink: batch %s of query %s was decided before; committing its %d transactions",
                batchId,
                query,
                len(decided),
            )
        else:
            width = last.width if last is not None else 0
            self._fence(query, range(len(messages), width))
            decided = prepared
            if decided:
                decisions.record(Decision(query, batchId, decided, max(width, len(messages))), DECISION_DEADLINE_S)
        fault_points.hit(fault_points.Point.BEFORE_PUBLISH, FAULT_MEMBER)
        entry = Resolve(f"spark query {query}", batchId, Transactions(decided, ()))
        for done, txn in enumerate(decided):
            if done:
                fault_points.hit(fault_points.Point.MID_PUBLISH, FAULT_MEMBER)
            commit_or_raise(self.settings, entry, txn)
        fault_points.hit(fault_points.Point.AFTER_PUBLISH, FAULT_MEMBER)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """``abort`` of the module docstring."""
        reports = _decode(messages, batchId, allow_missing=True)
        if not reports:
            log.error(
                "crkafka sink: batch %s failed and no task reported: the transactional ids of its %d tasks "
                "are fenced by the next attempt's tasks",
                batchId,
                len(messages),
            )
            return
        query = reports[0].query
        last = self._log(query).last(DECISION_DEADLINE_S)
        if last is not None and last.batch == batchId:
            log.info(
                "crkafka sink: batch %s failed after it was decided: its transactions wait for the replay", batchId
            )
            return
        self._fence(query, range(max(len(messages), last.width if last is not None else 0)))

    def _fence(self, query: str, tasks: range) -> None:
        """Fence the ids of ``tasks`` (each tried; the first failure raised after)."""
        errors: list[TransactionEndError] = []
        for task in tasks:
            try:
                fence(self.settings, transactional_id(query, task), deadline_s=RESOLVE_DEADLINE_S)
            except TransactionEndError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]


def _decode(messages: list[WriterCommitMessage | None], batch: int, *, allow_missing: bool) -> list[TaskReport]:
    """Driver step 1."""
    if len(messages) > MAX_TASKS:
        raise RuntimeError(f"crkafka sink: batch {batch} has {len(messages)} tasks, at most {MAX_TASKS}")
    reports: list[TaskReport] = []
    for i, message in enumerate(messages):
        if message is None:
            if allow_missing:
                continue
            raise RuntimeError(f"crkafka sink: task {i} of batch {batch} sent no commit message")
        if not isinstance(message, SinkCommitMessage):
            raise RuntimeError(f"crkafka sink: task {i} of batch {batch} sent a {type(message).__name__}")
        try:
            report = TaskReport.decode(message.report)
        except Invalid as exc:
            raise RuntimeError(f"crkafka sink: task {i} of batch {batch}: {exc}") from None
        if report.batch != batch or report.task != i or (reports and report.query != reports[0].query):
            raise RuntimeError(
                f"crkafka sink: task {i} of batch {batch} reported query {report.query}, batch {report.batch}, task {report.task}"
            )
        reports.append(report)
    return reports


__all__ = ["CrKafkaStreamWriter", "transactional_id"]
