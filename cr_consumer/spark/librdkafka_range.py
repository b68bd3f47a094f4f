"""Range reads with librdkafka (``kafka.client=librdkafka``), built into Arrow by column.

The reading itself is :class:`~cr_consumer.kafka.librdkafka.ranges.RangeConsumer`
(a group-less confluent-kafka consumer, inside the Kafka package). Here:
:meth:`LibrdkafkaRangeReader.read` (one task, on the worker's thread):

1. Assign the partition at ``start``.
2. Consume into :class:`_Columns` until the next offset reaches ``until``,
   building Arrow batches of at most ``batch_rows`` rows
   (:func:`cr_consumer.spark.arrow.range_batch`) as they fill; an offset no
   longer on the broker goes to ``on_data_loss`` with the log start.
3. At the end (or failure) of the task the partition is unassigned, so the
   worker's consumer fetches nothing in the background between tasks.

The cyclic garbage collector is paused while a consume's messages become
columns (:func:`~coordinator.protocol.common.gc_policy.collector_paused`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import cast

import pyarrow as pa

from coordinator.protocol.common.gc_policy import collector_paused
from cr_consumer.kafka.client import Header
from cr_consumer.spark.arrow import range_batch
from cr_consumer.spark.ranges import OffsetRange


def config_error(bootstrap_servers: str, properties: Mapping[str, object]) -> str | None:
    """Why librdkafka refuses the executors' settings for ``properties``, or None
    (:func:`cr_consumer.kafka.librdkafka.ranges.config_error`)."""
    from cr_consumer.kafka.librdkafka.ranges import config_error as refusal

    return refusal(bootstrap_servers, properties)


class _Columns:
    """The columns of the records read so far and not yet handed to Spark (a
    :class:`~cr_consumer.kafka.librdkafka.ranges.ColumnSink`)."""

    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.offsets: list[int] = []
        self.stamps: list[int | None] = []
        self.types: list[int] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.headers: list[object] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def extend(
        self,
        offsets: list[int],
        timestamps: Sequence[int | None],
        timestamp_types: list[int],
        keys: list[bytes | None],
        values: list[bytes | None],
        headers: list[object] | None,
    ) -> None:
        self.offsets.extend(offsets)
        self.stamps.extend(timestamps)
        self.types.extend(timestamp_types)
        self.keys.extend(keys)
        self.values.extend(values)
        if headers is not None:
            self.headers.extend(headers)

    def take(self, rng: OffsetRange, n: int) -> pa.RecordBatch:
        """The first ``n`` rows as one Arrow batch, removed from the columns."""
        batch = range_batch(
            rng.topic,
            rng.partition,
            self.offsets[:n],
            self.stamps[:n],
            self.types[:n],
            self.keys[:n],
            self.values[:n],
            # librdkafka's headers of a consumed message: a list of (name, value) pairs or None
            cast(list[Sequence[Header] | None], self.headers[:n]),
            self.include_headers,
        )
        for column in (self.offsets, self.stamps, self.types, self.keys, self.values, self.headers):
            del column[:n]
        return batch


class LibrdkafkaRangeReader:
    """One worker's group-less librdkafka consumer (one thread uses it)."""

    def __init__(self, bootstrap_servers: str, properties: Mapping[str, object]) -> None:
        from cr_consumer.kafka.librdkafka.ranges import RangeConsumer  # ClientUnavailable without the extra

        self._consumer = RangeConsumer(bootstrap_servers, properties)

    def read(
        self,
        rng: OffsetRange,
        *,
        include_headers: bool,
        batch_rows: int,
        deadline: float,
        on_data_loss: Callable[[OffsetRange, int, int, str], int | None],
        on_timeout: Callable[[int], BaseException],
    ) -> Iterator[pa.RecordBatch]:
        """The records ``[rng.start, rng.until)`` as Arrow batches (see the module doc)."""
        consumer = self._consumer
        consumer.assign(rng.topic, rng.partition, rng.start)

        def lost(offset: int, log_start: int, reason: str) -> int | None:
            return on_data_loss(rng, offset, log_start, reason)

        try:
            columns = _Columns(include_headers)
            next_offset = rng.start
            while next_offset < rng.until:
                if time.monotonic() > deadline:
                    raise on_timeout(next_offset)
                with collector_paused():  # no yield inside: Spark's code runs with the collector on
                    next_offset = consumer.consume_into(
                        columns, rng.topic, rng.partition, next_offset, rng.until, lost, include_headers=include_headers
                    )
                while len(columns) >= batch_rows:
                    yield columns.take(rng, batch_rows)
            if len(columns):
                yield columns.take(rng, len(columns))
        finally:
            # librdkafka fetches an assigned partition in the background: between tasks
            # the worker's consumer holds nothing, so it fetches nothing
            consumer.unassign()

    def close(self) -> None:
        self._consumer.close()


__all__ = ["LibrdkafkaRangeReader", "config_error"]
