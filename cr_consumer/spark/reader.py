"""The ``crkafka`` stream reader (a partitioned ``DataSourceStreamReader``).

Where each method runs:

* ``initialOffset``, ``prepareForTriggerAvailableNow``, ``latestOffset(start, limit)``,
  ``partitions(start, end)``, ``commit(end)``, ``stop``: the long-lived source
  runner process (the driver side), main thread. The planner is created at the
  first call that needs it (never in ``__init__``: the reader is also built and
  pickled by a short-lived planner process); ``latestOffset`` returns the end
  offset of the next batch, and ``prepareForTriggerAvailableNow`` (Spark's
  ``SupportsTriggerAvailableNow``) fixes where a ``trigger(availableNow=True)``
  run ends (:mod:`cr_consumer.spark.planner`). No record passes through this
  process.
* ``read(partition)``: executor Python workers, one task per offset range; it
  reads exactly that range from Kafka (:mod:`cr_consumer.spark.executor`) and
  returns Arrow record batches. A batch replayed after a restart takes the
  same path, its ranges taken from Spark's offset log (only the part still
  this query's: :mod:`cr_consumer.spark.ownership`).

The planner and its members are never pickled (``__getstate__`` keeps the
options only). Offsets are :class:`~cr_consumer.spark.offsets.SourceOffset` JSON.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from cr_consumer.kafka.start_position import StartKind
from cr_consumer.spark import runner
from cr_consumer.spark.executor import commit_range_end, read_range
from cr_consumer.spark.offsets import OffsetJson, SourceOffset
from cr_consumer.spark.options import SourceOptions
from cr_consumer.spark.ranges import OffsetRange

if TYPE_CHECKING:
    import pyarrow as pa

    from cr_consumer.kafka.client import TopicPartition
    from cr_consumer.spark.planner import QueryPlanner

log = logging.getLogger(__name__)

#: An offset Spark hands back: decoded JSON, checked by SourceOffset.from_json.
SparkOffset = dict[str, Any]

#: Bound on each partition's committed-offset lookup (startingOffsets=committed of a batch read).
COMMITTED_TIMEOUT_MS = 15_000


class RangePartition(InputPartition):
    """One Spark task: one Kafka partition's offset range (picklable)."""

    def __init__(self, rng: OffsetRange) -> None:
        super().__init__(rng)
        self.range = rng


def range_of(partition: InputPartition) -> OffsetRange:
    """The offset range of a task's partition (``partitions()`` only hands out RangePartitions)."""
    if not isinstance(partition, RangePartition):
        raise TypeError(f"crkafka reads RangePartition tasks, got {type(partition).__name__}")
    return partition.range


def max_rows(limit: ReadLimit | None) -> int | None:
    """The row cap of Spark's read limit (None: read all available)."""
    if isinstance(limit, ReadMaxRows):
        return limit.max_rows
    if limit is None or isinstance(limit, ReadAllAvailable):
        return None
    raise ValueError(f"crkafka supports the read limits ReadAllAvailable and ReadMaxRows, not {limit!r}")


class CrKafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._planner: QueryPlanner | None = None

    def __getstate__(self) -> dict[str, SourceOptions]:
        return {"options": self.options}

    def __setstate__(self, state: dict[str, SourceOptions]) -> None:
        self.options = state["options"]
        self._planner = None

    def planner(self) -> QueryPlanner:
        """The query's planner, started at the first call (in the source runner process)."""
        if self._planner is None:
            from cr_consumer.spark.planner import QueryPlanner

            configure_logging()
            planner = self._planner = QueryPlanner(self.options)
            runner.install(planner.close)
        return self._planner

    def initialOffset(self) -> OffsetJson:
        return SourceOffset.initial().to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        cap = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if cap is None else ReadMaxRows(cap)

    def prepareForTriggerAvailableNow(self) -> None:
        self.planner().prepare_available_now()

    def latestOffset(self, start: SparkOffset, limit: ReadLimit) -> OffsetJson:
        return self.planner().latest_offset(SourceOffset.from_json(start), max_rows(limit)).to_json()

    def partitions(self, start: SparkOffset, end: SparkOffset) -> list[RangePartition]:
        ranges = self.planner().ranges(SourceOffset.from_json(start), SourceOffset.from_json(end))
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        configure_logging()
        return read_range(self.options, range_of(partition))

    def commit(self, end: SparkOffset) -> None:
        self.planner().commit(SourceOffset.from_json(end))

    def stop(self) -> None:
        if self._planner is not None:
            # through the runner's hooks, so that Spark's SIGTERM cannot abort this close
            runner.close_group("the query stops")
            runner.uninstall()
            self._planner = None


class CrKafkaBatchReader(DataSourceReader):
    """``spark.read.format("crkafka")``: the records from ``startingOffsets`` (default
    earliest) to ``endingOffsets`` (default latest) of every partition of the
    subscription now, read by the executors like a streaming batch. No group
    membership; by default no commit: a batch read leaves the group's offsets alone.

    ``commitOnBatchRead=true`` (with ``kafka.group.id``): each Kafka partition is
    one task, and that task commits the partition's end offset to the group once
    it has handed Spark the last record of its range
    (:func:`~cr_consumer.spark.executor.commit_range_end`): a later read with
    ``startingOffsets=committed`` starts there. A task that fails or is not read
    to its end commits nothing; the commit is per partition, not atomic for the
    read (a job that fails half way leaves the partitions it finished committed).

    ``partitions()`` runs once in the driver (a planner process) and reads no record
    beyond one fetch per partition for its high watermark.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[RangePartition]:
        from cr_consumer.spark.positions import end_offsets, start_offsets, subscribed_partitions
        from cr_consumer.spark.ranges import split_ranges
        from cr_consumer.spark.watermarks import WatermarkProbe

        configure_logging()
        probe = WatermarkProbe(self.options)
        try:
            tps = subscribed_partitions(self.options, probe)
            starts = start_offsets(self.options.starting_or(StartKind.EARLIEST), tps, probe, self._committed)
            ends = end_offsets(self.options, tps, probe)
        finally:
            probe.close()
        ranges = []
        for tp in tps:
            if ends[tp] < starts[tp]:
                raise ValueError(
                    f"crkafka batch read: {tp.topic}:{tp.partition} starts at {starts[tp]}, "
                    f"after its end {ends[tp]} (startingOffsets / endingOffsets)"
                )
            ranges.append(OffsetRange(tp.topic, tp.partition, starts[tp], ends[tp]))
        if self.options.commit_on_batch_read:
            if self.options.min_partitions is not None:
                raise ValueError(
                    "crkafka batch read: commitOnBatchRead commits each partition's end from the one "
                    "task that reads the partition; give no minPartitions with it"
                )
            return [RangePartition(r) for r in ranges]  # one task per partition, empty ones included: they commit
        return [RangePartition(r) for r in split_ranges(ranges, self.options.min_partitions)]

    def _committed(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """startingOffsets=committed: the committed offsets of kafka.group.id (none without it)."""
        if self.options.group_id is None:
            return {}
        from cr_consumer.kafka.client import ClientKind
        from cr_consumer.kafka.factory import make_client

        consumer = make_client(
            ClientKind.KAFKA_PYTHON,
            {
                "bootstrap.servers": self.options.bootstrap_servers.split(","),
                "group.id": self.options.group_id,
                "enable.auto.commit": False,
            },
        )
        try:
            found = consumer.committed(tps, COMMITTED_TIMEOUT_MS * max(1, len(tps)))
        finally:
            consumer.close(COMMITTED_TIMEOUT_MS)
        return {tp: off for tp, off in found.items() if off is not None}

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        configure_logging()
        rng = range_of(partition)
        yield from read_range(self.options, rng)
        if self.options.commit_on_batch_read:  # the whole range was handed to Spark
            commit_range_end(self.options, rng)


def configure_logging() -> None:
    """Spark's Python processes have no logging config: send ours to stderr (Spark's log) at INFO."""
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
