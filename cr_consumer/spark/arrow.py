"""Kafka records -> ``pyarrow.RecordBatch`` in the source's Spark schema.

Spark accepts a ``pyarrow.RecordBatch`` from a Python data source only when its
Arrow schema equals ``to_arrow_schema(<source schema>, timezone="UTC")`` exactly
(field names, types and nullability): :data:`ARROW_SCHEMA` is that schema and
:data:`SPARK_SCHEMA_DDL` the matching Spark schema (a test checks they agree).

Batches are built column by column: the records are transposed once with
``zip(*records)`` (C speed, no per-row dict or per-row Arrow call), and the
headers column takes a fast path when no record has headers (the common case),
building the list array from offsets alone.

Accepted record shapes: kafka-python ``ConsumerRecord`` (13-field namedtuple)
or plain 7-tuples ``(topic, partition, offset, timestamp_ms, key, value, headers)``
as delivered by the consumer operator.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

HEADER_TYPE = pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())])

ARROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", pa.list_(pa.field("element", HEADER_TYPE, nullable=False))),
    ]
)

#: The Spark schema of the source (same fields as ARROW_SCHEMA).
SPARK_SCHEMA_DDL = (
    "topic STRING NOT NULL, partition INT NOT NULL, offset BIGINT NOT NULL, timestamp TIMESTAMP, "
    "key BINARY, value BINARY, headers ARRAY<STRUCT<key: STRING NOT NULL, value: BINARY> NOT NULL>"
)

#: Column positions in a kafka-python ConsumerRecord and in a 7-tuple record.
_CONSUMER_RECORD_COLUMNS = (0, 1, 3, 4, 6, 7, 8)
_TUPLE_COLUMNS = (0, 1, 2, 3, 4, 5, 6)


def spark_schema():
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

    header = StructType([StructField("key", StringType(), False), StructField("value", BinaryType(), True)])
    return StructType(
        [
            StructField("topic", StringType(), False),
            StructField("partition", IntegerType(), False),
            StructField("offset", LongType(), False),
            StructField("timestamp", TimestampType(), True),
            StructField("key", BinaryType(), True),
            StructField("value", BinaryType(), True),
            StructField("headers", ArrayType(header, containsNull=False), True),
        ]
    )


def empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=ARROW_SCHEMA)


def _headers_column(headers: Sequence) -> pa.Array:
    n = len(headers)
    if not any(headers):  # no record has headers: offsets only
        offsets = pa.array([0] * (n + 1), type=pa.int32())
        return pa.ListArray.from_arrays(offsets, pa.array([], type=HEADER_TYPE), type=ARROW_SCHEMA.field("headers").type)
    rows = [[{"key": k, "value": v} for k, v in h] if h else [] for h in headers]
    return pa.array(rows, type=ARROW_SCHEMA.field("headers").type)


def _timestamp_column(millis: Sequence) -> pa.Array:
    arr = pa.array(millis, type=pa.int64())
    micros = pc.multiply(arr, pa.scalar(1000, pa.int64()))
    return micros.cast(pa.timestamp("us", tz="UTC"))


def records_to_batch(records: Sequence) -> pa.RecordBatch:
    """Build one RecordBatch from a sequence of records (see the module doc)."""
    if not records:
        return empty_batch()
    first = records[0]
    if len(first) == 7:
        idx = _TUPLE_COLUMNS
    elif hasattr(first, "leader_epoch"):
        idx = _CONSUMER_RECORD_COLUMNS
    else:
        raise TypeError(f"unsupported record shape {type(first).__name__} of length {len(first)}")
    cols = list(zip(*records))
    topic, partition, offset, ts, key, value, headers = (cols[i] for i in idx)
    arrays = [
        pa.array(topic, type=pa.string()),
        pa.array(partition, type=pa.int32()),
        pa.array(offset, type=pa.int64()),
        _timestamp_column(ts),
        pa.array(key, type=pa.binary()),
        pa.array(value, type=pa.binary()),
        _headers_column(headers),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def concat_batches(batches: Sequence[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """Drop empty batches (Spark runs an empty micro-batch from an empty list)."""
    return [b for b in batches if b.num_rows]
