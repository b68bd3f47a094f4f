"""The ``crkafka`` stream reader (a ``SimpleDataSourceStreamReader``).

Where each method runs (see docs/spark.md for why the simple reader):

* ``initialOffset``, ``read(start)``, ``commit(end)``: the long-lived source
  runner process, main thread. ``read`` starts the members lazily on its first
  call (never in ``__init__``: the reader is also built and pickled by a
  short-lived planner process) and returns ``(iter([RecordBatch, ...]), end)``;
  Spark ships the Arrow batches to the JVM and plans the batch from them.
* ``readBetweenOffsets(start, end)``: an executor Python worker, only to replay
  an uncommitted batch after a restart; it re-reads the offset range from Kafka
  (:mod:`cr_consumer.spark.replay`).

The live members are never pickled (``__getstate__`` keeps the options only).
Offsets are :class:`~cr_consumer.spark.offsets.SourceOffset` JSON.
"""

from __future__ import annotations

import logging

from pyspark.sql.datasource import SimpleDataSourceStreamReader

from cr_consumer.spark import runner
from cr_consumer.spark.offsets import SourceOffset
from cr_consumer.spark.options import SourceOptions
from cr_consumer.spark.replay import read_range

log = logging.getLogger(__name__)


class CrKafkaStreamReader(SimpleDataSourceStreamReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._group = None

    def __getstate__(self) -> dict:
        return {"options": self.options}

    def __setstate__(self, state: dict) -> None:
        self.options = state["options"]
        self._group = None

    def _members(self):
        if self._group is None:
            from cr_consumer.spark.group import SourceGroup

            _configure_logging()
            self._group = SourceGroup(self.options)
            runner.install(self._group.close)
        return self._group

    def initialOffset(self) -> dict:
        return SourceOffset.initial().to_json()

    def read(self, start: dict):
        batches, end = self._members().next_batch(SourceOffset.from_json(start))
        return iter(batches), end.to_json()

    def readBetweenOffsets(self, start: dict, end: dict):
        _configure_logging()
        return iter(read_range(self.options, SourceOffset.from_json(start), SourceOffset.from_json(end)))

    def commit(self, end: dict) -> None:
        self._members().commit(SourceOffset.from_json(end))

    def stop(self) -> None:  # called by Spark for non-simple readers only; kept for direct use
        if self._group is not None:
            self._group.close()
            runner.uninstall()
            self._group = None


def _configure_logging() -> None:
    """The runner has no logging config: send ours to stderr (Spark's log) at INFO."""
    root = logging.getLogger("cr_consumer")
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
    coordinator_log = logging.getLogger("coordinator")
    if not coordinator_log.handlers:
        coordinator_log.addHandler(root.handlers[0])
        coordinator_log.setLevel(logging.WARNING)
