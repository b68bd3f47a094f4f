"""The decision log of one query of the ``crkafka`` sink: a Kafka topic where the driver records
each batch's decision before it commits the batch's transactions.

Why Kafka: the log must survive a kill -9 of the driver and be read by the next attempt of the
batch, on the driver (its ``commit``) and on the executors (a task checks it before it fences
anything, ``writer.py``). Kafka is the one system every part of a ``crkafka`` query reaches (the
executors do not reach the coordinator, and a query reading another source has none), and it is
where the decided transactions live anyway.

The log is the topic ``<decisionTopicPrefix>-<Spark query id>``, one partition, created by the
driver on the first decision (replication and ``min.insync.replicas`` are the broker's
defaults; the records must be as durable as the output's). It is read at one place only: its last
record. That is enough because Spark decides batch ``n + 1`` only after batch ``n`` is in its
commit log, and a restarted query replays only the last batch of its offset log: the only
decision a replay can find for its batch is the log's last record.

1. :meth:`DecisionLog.last`: the log's last record (``coordinator.kafka.end_log.last_record``:
   an unknown topic is a log without decisions); its JSON is checked whole
   (``reports.Decision``) and must name this query.
2. :meth:`DecisionLog.record`: ``end_log.append`` of the decision (the topic created when
   missing; durable when it returns). Every request is bounded by the request timeout and the
   whole by the caller's deadline.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coordinator.kafka.end_log import append, last_record
from coordinator.kafka.raw_batches import RawReadError
from cr_consumer.spark.sink.reports import Decision

#: The decision producer's request size: a decision of ``MAX_TASKS`` transactions fits.
DECISION_MAX_REQUEST_BYTES = 16 << 20


def decision_topic(prefix: str, query: str) -> str:
    return f"{prefix}-{query}"


class DecisionLog:
    """Steps 1-2 for one query (``settings``: ``admin.admin_settings``, whose request timeout
    bounds each request)."""

    def __init__(self, settings: Mapping[str, Any], prefix: str, query: str) -> None:
        self._settings = dict(settings)
        self.query = query
        self.topic = decision_topic(prefix, query)

    def last(self, deadline_s: float) -> Decision | None:
        """Step 1: the last decision recorded, or None."""
        record = last_record(self._settings, self.topic, deadline_s)
        if record is None:
            return None
        decision = Decision.decode(record.value, f"decision log {self.topic} at {record.offset}")
        if decision.query != self.query:
            raise RawReadError(f"decision log {self.topic} at {record.offset} names query {decision.query!r}")
        return decision

    def record(self, decision: Decision, deadline_s: float) -> int:
        """Step 2: the decision's offset once it is durable."""
        return append(
            self._settings,
            self.topic,
            self.query.encode(),
            decision.encode(),
            deadline_s,
            max_request_bytes=DECISION_MAX_REQUEST_BYTES,
        )


__all__ = ["DecisionLog", "decision_topic"]
