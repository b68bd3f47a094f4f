"""Kafka records -> ``pyarrow.RecordBatch`` in the source's Spark schema.

The columns are those of Spark's Kafka source, in its order: key, value,
topic, partition, offset, timestamp, timestampType, and headers with
``includeHeaders=true``. Spark accepts a ``pyarrow.RecordBatch`` from a
Python data source only when its Arrow schema equals
``to_arrow_schema(<source schema>, timezone="UTC")`` exactly (field names,
types and nullability): :func:`arrow_schema` is that schema and
:func:`spark_schema` the Spark schema read off it (a test checks the round trip).

A range read collects its records by column (:class:`Columns`: librdkafka's
columns as they come, kafka-python's records transposed once with
``zip(*records)``, C speed, no per-row dict or per-row Arrow call) and cuts
batches off the front. The headers column takes a fast path when no record
has headers (the common case), building the list array from offsets alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import pyarrow as pa
import pyarrow.compute as pc

from cr_consumer.kafka.client import Header, KafkaRecord, TimestampType

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])

#: Spark's Kafka source columns, in its order (all nullable, as Spark declares them).
_BASE_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("timestampType", pa.int32()),
]
_HEADERS_FIELD = pa.field("headers", pa.list_(pa.field("element", HEADER_TYPE)))


def arrow_schema(include_headers: bool = True) -> pa.Schema:
    return pa.schema(_BASE_FIELDS + ([_HEADERS_FIELD] if include_headers else []))


#: Kafka's timestampType numbers (Spark's column): -1 none, 0 CreateTime, 1 LogAppendTime.
_TIMESTAMP_TYPE_NUMBERS = {
    TimestampType.NOT_AVAILABLE: -1,
    TimestampType.CREATE_TIME: 0,
    TimestampType.LOG_APPEND_TIME: 1,
}


def spark_schema(include_headers: bool = True) -> StructType:
    """The source schema as a pyspark StructType, read off :func:`arrow_schema` (imports pyspark lazily)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema(include_headers))


def _headers_column(headers: Sequence[Sequence[Header] | None]) -> pa.Array:
    n = len(headers)
    if not any(headers):  # no record has headers: offsets only
        offsets = pa.array([0] * (n + 1), type=pa.int32())
        return pa.ListArray.from_arrays(offsets, pa.array([], type=HEADER_TYPE), type=_HEADERS_FIELD.type)
    rows = [[{"key": k, "value": v} for k, v in h] if h else [] for h in headers]
    return pa.array(rows, type=_HEADERS_FIELD.type)


def _timestamp_column(millis: Sequence[int | None]) -> pa.Array:
    arr = pa.array(millis, type=pa.int64())
    micros = pc.multiply(arr, pa.scalar(1000, pa.int64()))
    return micros.cast(pa.timestamp("us", tz="UTC"))


class Columns:
    """The records of one partition read so far and not yet handed to Spark, by column."""

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self.topic, self.partition, self.include_headers = topic, partition, include_headers
        self.offsets: list[int] = []
        self.stamps: list[int | None] = []  # epoch ms, None when the record has none
        self.types: list[int] = []  # Kafka's timestampType numbers
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.headers: list[object] = []  # per record: (name, value) pairs, or None

    def __len__(self) -> int:
        return len(self.offsets)

    def extend(
        self,
        offsets: Sequence[int],
        stamps: Sequence[int | None],
        types: Sequence[int],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        headers: Sequence[object] | None,
    ) -> None:
        """Append a run of records (``headers`` None when not wanted)."""
        self.offsets.extend(offsets)
        self.stamps.extend(stamps)
        self.types.extend(types)
        self.keys.extend(keys)
        self.values.extend(values)
        if self.include_headers and headers is not None:
            self.headers.extend(headers)

    def extend_records(self, records: Sequence[KafkaRecord]) -> None:
        """Append the client seam's records, transposed once."""
        _, _, offsets, stamps, types, keys, values, headers = zip(*records)
        self.extend(offsets, stamps, [_TIMESTAMP_TYPE_NUMBERS[t] for t in types], keys, values, headers)

    def take(self, n: int) -> pa.RecordBatch:
        """The first ``n`` rows as one Arrow batch, removed from the columns."""
        arrays = [
            pa.array(self.keys[:n], type=pa.binary()),
            pa.array(self.values[:n], type=pa.binary()),
            pa.array([self.topic] * n, type=pa.string()),
            pa.array([self.partition] * n, type=pa.int32()),
            pa.array(self.offsets[:n], type=pa.int64()),
            _timestamp_column(self.stamps[:n]),
            pa.array(self.types[:n], type=pa.int32()),
        ]
        if self.include_headers:
            arrays.append(_headers_column(cast(list[Sequence[Header] | None], self.headers[:n])))
        for column in (self.offsets, self.stamps, self.types, self.keys, self.values, self.headers):
            del column[:n]
        return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(self.include_headers))
