"""kafka-python's consumed records -> the seam's :class:`~cr_consumer.kafka.client.KafkaRecord`.

:func:`to_kafka_records` converts one partition's records of one poll:

1. a timestamp kafka-python gives as -1 or None becomes None;
2. kafka-python's timestamp type (0 create time, 1 log append time, anything
   else none) becomes :class:`~cr_consumer.kafka.client.TimestampType`;
3. the headers become a tuple of (name, value) pairs, empty when there are none.

``ConsumerRecord`` is kafka-python's record type, named here for the modules
outside this package that read its fields by position.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from kafka.consumer.fetcher import ConsumerRecord

from cr_consumer.kafka.client import Header, KafkaRecord, TimestampType

_TIMESTAMP_TYPES = {0: TimestampType.CREATE_TIME, 1: TimestampType.LOG_APPEND_TIME}
#: ``KafkaRecord`` from one tuple of its fields, without the NamedTuple's Python-level ``__new__``.
_new_record = functools.partial(tuple.__new__, KafkaRecord)


def to_kafka_records(records: Sequence[Any]) -> list[KafkaRecord]:
    """kafka-python's ``ConsumerRecord``s (one partition's, from one poll) as the
    seam's :class:`KafkaRecord`s: timestamp None when the record has none (kafka-python
    gives -1 or None), the timestamp type as :class:`TimestampType`, headers as a tuple.

    Column by column in C: ``zip(*records)`` transposes the batch, the columns that
    need a change are mapped as a whole (a column of one timestamp type, of no
    headers, of valid timestamps, the usual batch, is not touched per record), and
    ``zip`` + ``map`` build the records, with no Python-level loop per record
    (~0.16 us per record against ~0.21 for a list comprehension over the records)."""
    n = len(records)
    if not n:
        return []
    # the first 9 of ConsumerRecord's 13 fields (checksum and sizes unused: not transposed)
    topics, partitions, _epochs, offsets, timestamps, types, keys, values, headers = itertools.islice(zip(*records), 9)
    if None in timestamps or min(timestamps) < 0:
        timestamps = tuple(t if t is not None and t >= 0 else None for t in timestamps)
    first_type = types[0]
    type_column: Iterable[TimestampType]
    if types.count(first_type) == n:
        type_column = itertools.repeat(_TIMESTAMP_TYPES.get(first_type, TimestampType.NOT_AVAILABLE), n)
    else:
        type_column = [_TIMESTAMP_TYPES.get(t, TimestampType.NOT_AVAILABLE) for t in types]
    header_column: Iterable[tuple[Header, ...]]
    header_column = [tuple(h) if h else () for h in headers] if any(headers) else itertools.repeat((), n)
    return list(
        map(_new_record, zip(topics, partitions, offsets, timestamps, type_column, keys, values, header_column))
    )


__all__ = ["ConsumerRecord", "to_kafka_records"]
