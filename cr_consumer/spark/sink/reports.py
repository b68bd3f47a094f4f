"""What a task of the ``crkafka`` sink reports to the driver, and what the driver records as a
batch's decision: versioned JSON, validated whole on decode.

Spark carries a task's :class:`SinkCommitMessage` to the driver by pickling it (the API's only
way); its one field is the report's JSON text, so nothing but a string crosses, and the driver
decodes it with the same checks as any wire field (``coordinator/protocol/wire/fields.py``).

* :class:`TaskReport`: the query, the batch, the task's partition index and attempt, and its
  outcome (:class:`TaskOutcome`): ``prepared`` with its :class:`PreparedTxn`, ``empty`` (no
  rows: no transaction), or ``decided`` (the batch was decided by an earlier attempt: the task
  wrote nothing).
* :class:`Decision`: the query, the batch and every prepared transaction the driver decided to
  commit, at most :data:`MAX_TASKS` of them, and the query's width (the most task indexes any
  decided batch of the query had, this one included: the ids a later, narrower batch fences);
  the decision log's record (``decisions.py``).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from typing import Any

import attrs
from pyspark.sql.datasource import WriterCommitMessage

from coordinator.protocol.region.transactions import PreparedTxn
from coordinator.protocol.wire import fields
from coordinator.protocol.wire.errors import Invalid

REPORT_VERSION = 1
DECISION_VERSION = 2
#: Most tasks (so prepared transactions) one batch may have: bounds a decision record (a few
#: hundred bytes per transaction) well below the decision producer's request size.
MAX_TASKS = 4096
#: Longest report or decision text decoded: a report names one transaction of up to
#: ``MAX_TXN_PARTITIONS`` partitions; a decision is refused before it is written past this.
MAX_TEXT_BYTES = 8 << 20


class TaskOutcome(enum.Enum):
    PREPARED = "prepared"
    EMPTY = "empty"
    DECIDED = "decided"


def _document(text: Any, what: str, version: int) -> Mapping[str, Any]:
    if not isinstance(text, str | bytes) or len(text) > MAX_TEXT_BYTES:
        raise Invalid(f"{what} must be JSON text of at most {MAX_TEXT_BYTES} bytes")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise Invalid(f"{what} is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("v") != version:
        raise Invalid(f"{what} must be an object of version {version}")
    return doc


@attrs.frozen
class TaskReport:
    query: str
    batch: int
    task: int
    attempt: int
    outcome: TaskOutcome
    txn: PreparedTxn | None = None

    def encode(self) -> str:
        doc: dict[str, Any] = {
            "v": REPORT_VERSION,
            "query": self.query,
            "batch": self.batch,
            "task": self.task,
            "attempt": self.attempt,
            "outcome": self.outcome.value,
        }
        if self.txn is not None:
            doc["txn"] = self.txn.to_wire()
        return json.dumps(doc, separators=(",", ":"))

    @classmethod
    def decode(cls, text: Any) -> TaskReport:
        doc = _document(text, "a crkafka sink task report", REPORT_VERSION)
        try:
            outcome = TaskOutcome(doc.get("outcome"))
        except ValueError:
            raise Invalid(
                f"a task report's outcome {doc.get('outcome')!r:.40} is none of {[o.value for o in TaskOutcome]}"
            ) from None
        txn = None
        if outcome is TaskOutcome.PREPARED:
            txn = PreparedTxn.from_wire(doc.get("txn"), "a task report's txn")
        elif "txn" in doc:
            raise Invalid(f"a task report of outcome {outcome.value} carries a transaction")
        return cls(
            fields.check_name(doc.get("query"), "a task report's query"),
            fields.check_int(doc.get("batch"), "a task report's batch", 0, fields.MAX_INT),
            fields.check_int(doc.get("task"), "a task report's task", 0, MAX_TASKS - 1),
            fields.check_int(doc.get("attempt"), "a task report's attempt", 0, fields.MAX_INT),
            outcome,
            txn,
        )


@attrs.frozen
class SinkCommitMessage(WriterCommitMessage):
    """A task's :class:`TaskReport` as Spark carries it to the driver: JSON text only."""

    report: str


@attrs.frozen
class Decision:
    query: str
    batch: int
    txns: tuple[PreparedTxn, ...]
    width: int

    def encode(self) -> bytes:
        doc = {
            "v": DECISION_VERSION,
            "query": self.query,
            "batch": self.batch,
            "txns": [t.to_wire() for t in self.txns],
            "width": self.width,
        }
        data = json.dumps(doc, separators=(",", ":")).encode()
        if len(data) > MAX_TEXT_BYTES:
            raise ValueError(f"the decision of batch {self.batch} is {len(data)} bytes, over {MAX_TEXT_BYTES}")
        return data

    @classmethod
    def decode(cls, data: Any, what: str) -> Decision:
        doc = _document(data, what, DECISION_VERSION)
        txns = doc.get("txns")
        if not isinstance(txns, list) or len(txns) > MAX_TASKS:
            raise Invalid(f"{what}: txns must be a list of at most {MAX_TASKS}")
        return cls(
            fields.check_name(doc.get("query"), f"{what}: query"),
            fields.check_int(doc.get("batch"), f"{what}: batch", 0, fields.MAX_INT),
            tuple(PreparedTxn.from_wire(t, f"{what}: txns[{i}]") for i, t in enumerate(txns)),
            fields.check_int(doc.get("width"), f"{what}: width", 0, MAX_TASKS),
        )


__all__ = ["MAX_TASKS", "Decision", "SinkCommitMessage", "TaskOutcome", "TaskReport"]
