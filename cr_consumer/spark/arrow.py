"""Kafka records -> ``pyarrow.RecordBatch`` in the source's Spark schema.

The columns are those of Spark's Kafka source, in its order: key, value,
topic, partition, offset, timestamp, timestampType, and headers with
``includeHeaders=true``. Spark accepts a ``pyarrow.RecordBatch`` from a
Python data source only when its Arrow schema equals
``to_arrow_schema(<source schema>, timezone="UTC")`` exactly (field names,
types and nullability): :func:`arrow_schema` is that schema and
:func:`spark_schema` the matching Spark schema (a test checks they agree).

Batches are built column by column: the records are transposed once with
``zip(*records)`` (C speed, no per-row dict or per-row Arrow call), and the
headers column takes a fast path when no record has headers (the common case),
building the list array from offsets alone.

Accepted record shapes: the client seam's
:class:`~cr_consumer.kafka.client.KafkaRecord` (what the executors' kafka-python
reads return) or plain 7-tuples ``(topic, partition, offset, timestamp_ms, key, value, headers)``
as delivered by the consumer operator (timestampType 0, CreateTime).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

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


#: The schema with the headers column (``includeHeaders=true``).
ARROW_SCHEMA = arrow_schema(True)

#: The Spark schema with headers (the same fields as ARROW_SCHEMA).
SPARK_SCHEMA_DDL = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
    "timestampType INT, headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
)

#: A record as a 7-tuple: topic, partition, offset, timestamp (epoch ms or None), key,
#: value, headers; its timestampType is CreateTime.
PlainRecord = tuple[str, int, int, int | None, bytes | None, bytes | None, Sequence[Header]]

#: Kafka's timestampType numbers (Spark's column): -1 none, 0 CreateTime, 1 LogAppendTime;
#: a 7-tuple record has no timestampType (CreateTime, 0).
_TIMESTAMP_TYPE_NUMBERS = {
    TimestampType.NOT_AVAILABLE: -1,
    TimestampType.CREATE_TIME: 0,
    TimestampType.LOG_APPEND_TIME: 1,
}


def spark_schema(include_headers: bool = True) -> StructType:
    """The source schema as a pyspark StructType (imports pyspark lazily)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


def empty_batch(include_headers: bool = True) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=arrow_schema(include_headers))


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


def records_to_batch(records: Sequence[KafkaRecord | PlainRecord], include_headers: bool = True) -> pa.RecordBatch:
    """Build one RecordBatch from a sequence of records (see the module doc)."""
    if not records:
        return empty_batch(include_headers)
    first = records[0]
    cols = list(zip(*records))
    if len(first) == 7:
        topic, partition, offset, ts, key, value, headers = cols
        ts_type = pa.array([0] * len(records), type=pa.int32())
    elif isinstance(first, KafkaRecord):
        topic, partition, offset, ts, types, key, value, headers = cols
        ts_type = pa.array([_TIMESTAMP_TYPE_NUMBERS[t] for t in types], type=pa.int32())
    else:
        raise TypeError(f"unsupported record shape {type(first).__name__} of length {len(first)}")
    arrays = [
        pa.array(key, type=pa.binary()),
        pa.array(value, type=pa.binary()),
        pa.array(topic, type=pa.string()),
        pa.array(partition, type=pa.int32()),
        pa.array(offset, type=pa.int64()),
        _timestamp_column(ts),
        ts_type,
    ]
    if include_headers:
        arrays.append(_headers_column(headers))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(include_headers))


def range_batch(
    topic: str,
    partition: int,
    offsets: Sequence[int],
    timestamps: Sequence[int | None],
    timestamp_types: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[Sequence[Header] | None],
    include_headers: bool = True,
) -> pa.RecordBatch:
    """One RecordBatch from the columns of records of one partition (an executor's
    range read): ``topic`` and ``partition`` are the same for every row, the other
    columns hold one entry per record (timestamps in epoch ms, None when the record
    has none; ``timestamp_types`` Kafka's 0 CreateTime, 1 LogAppendTime)."""
    n = len(offsets)
    if not n:
        return empty_batch(include_headers)
    arrays = [
        pa.array(keys, type=pa.binary()),
        pa.array(values, type=pa.binary()),
        pa.array([topic] * n, type=pa.string()),
        pa.array([partition] * n, type=pa.int32()),
        pa.array(offsets, type=pa.int64()),
        _timestamp_column(timestamps),
        pa.array(timestamp_types, type=pa.int32()),
    ]
    if include_headers:
        arrays.append(_headers_column(headers))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(include_headers))


def concat_batches(batches: Sequence[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """Drop empty batches (Spark runs an empty micro-batch from an empty list)."""
    return [b for b in batches if b.num_rows]
