"""kafka-python's ConsumerRecords -> the seam's KafkaRecords (column-wise
conversion in kafka_python_client.to_kafka_records), against a per-record
reference, for every column's fast path and its fallback (no broker)."""

from __future__ import annotations

from kafka.consumer.fetcher import ConsumerRecord

from cr_consumer.kafka.client import KafkaRecord, TimestampType
from cr_consumer.kafka.kafka_python_client import to_kafka_records

_TYPES = {0: TimestampType.CREATE_TIME, 1: TimestampType.LOG_APPEND_TIME}


def _consumer_record(offset: int, *, timestamp: int | None = 1700000000000, timestamp_type: int = 0,
                     key: bytes | None = None, value: bytes | None = b"v",
                     headers: list | None = None) -> ConsumerRecord:
    return ConsumerRecord("t", 3, 7, offset, timestamp, timestamp_type, key, value,
                          headers if headers is not None else [], None, -1, 1, -1)


def _reference(r: ConsumerRecord) -> KafkaRecord:
    """The field-by-field meaning of the conversion, one record at a time."""
    return KafkaRecord(r.topic, r.partition, r.offset,
                       r.timestamp if r.timestamp is not None and r.timestamp >= 0 else None,
                       _TYPES.get(r.timestamp_type, TimestampType.NOT_AVAILABLE), r.key, r.value,
                       tuple(r.headers) if r.headers else ())


def _check(batch: list[ConsumerRecord]) -> list[KafkaRecord]:
    out = to_kafka_records(batch)
    assert out == [_reference(r) for r in batch]
    assert all(type(r) is KafkaRecord for r in out)
    return out


def test_the_usual_batch_one_timestamp_type_no_headers():
    out = _check([_consumer_record(10 + i, value=b"x%d" % i, key=b"k" if i % 2 else None) for i in range(50)])
    assert [r.offset for r in out] == list(range(10, 60))
    assert {r.timestamp_type for r in out} == {TimestampType.CREATE_TIME} and {r.headers for r in out} == {()}


def test_timestamps_missing_or_negative_become_none():
    out = _check([_consumer_record(0, timestamp=-1), _consumer_record(1, timestamp=None),
                  _consumer_record(2, timestamp=5)])
    assert [r.timestamp for r in out] == [None, None, 5]


def test_mixed_and_unknown_timestamp_types():
    out = _check([_consumer_record(0, timestamp_type=0), _consumer_record(1, timestamp_type=1),
                  _consumer_record(2, timestamp_type=-1)])
    assert [r.timestamp_type for r in out] == [TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME,
                                               TimestampType.NOT_AVAILABLE]
    assert _check([_consumer_record(i, timestamp_type=1) for i in range(3)])[0].timestamp_type \
        is TimestampType.LOG_APPEND_TIME


def test_headers_kept_in_order_as_tuples_where_present():
    out = _check([_consumer_record(0), _consumer_record(1, headers=[("a", b"1"), ("b", None)]),
                  _consumer_record(2)])
    assert [r.headers for r in out] == [(), (("a", b"1"), ("b", None)), ()]


def test_null_values_and_an_empty_batch():
    assert _check([_consumer_record(0, value=None)])[0].value is None
    assert to_kafka_records([]) == []
