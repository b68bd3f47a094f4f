"""The kafka-python client's hot path: ConsumerRecords -> the seam's KafkaRecords
(column-wise conversion in kafka_python.records.to_kafka_records) against a
per-record reference, for every column's fast path and its fallback (no broker);
and polls of a joined member without a coordinator hand-off to the IO thread
(compat.skip_known_coordinator_hop; embedded broker)."""

from __future__ import annotations

import time

from kafka.consumer.fetcher import ConsumerRecord

from cr_consumer.kafka.client import KafkaRecord, TimestampType
from cr_consumer.kafka.kafka_python.client import KafkaPythonClient
from cr_consumer.kafka.kafka_python.records import to_kafka_records
from cr_consumer.testing.kafka_util import create_topic, produce

from support.group_timeouts import TEST_HEARTBEAT_INTERVAL_MS, TEST_SESSION_TIMEOUT_MS

_TYPES = {0: TimestampType.CREATE_TIME, 1: TimestampType.LOG_APPEND_TIME}


def _consumer_record(
    offset: int,
    *,
    timestamp: int | None = 1700000000000,
    timestamp_type: int = 0,
    key: bytes | None = None,
    value: bytes | None = b"v",
    headers: list | None = None,
) -> ConsumerRecord:
    return ConsumerRecord(
        "t",
        3,
        7,
        offset,
        timestamp,
        timestamp_type,
        key,
        value,
        headers if headers is not None else [],
        None,
        -1,
        1,
        -1,
    )


def _reference(r: ConsumerRecord) -> KafkaRecord:
    """The field-by-field meaning of the conversion, one record at a time."""
    return KafkaRecord(
        r.topic,
        r.partition,
        r.offset,
        r.timestamp if r.timestamp is not None and r.timestamp >= 0 else None,
        _TYPES.get(r.timestamp_type, TimestampType.NOT_AVAILABLE),
        r.key,
        r.value,
        tuple(r.headers) if r.headers else (),
    )


def _check(batch: list[ConsumerRecord]) -> list[KafkaRecord]:
    out = to_kafka_records(batch)
    assert out == [_reference(r) for r in batch]
    assert all(type(r) is KafkaRecord for r in out)
    return out


def test_the_usual_batch_one_timestamp_type_no_headers():
    out = _check([_consumer_record(10 + i, value=b"x%d" % i, key=b"k" if i % 2 else None) for i in range(50)])
    assert [r.offset for r in out] == list(range(10, 60))
    assert {r.timestamp_type for r in out} == {TimestampType.CREATE_TIME}
    assert {r.headers for r in out} == {()}


def test_timestamps_missing_or_negative_become_none():
    out = _check(
        [_consumer_record(0, timestamp=-1), _consumer_record(1, timestamp=None), _consumer_record(2, timestamp=5)]
    )
    assert [r.timestamp for r in out] == [None, None, 5]


def test_mixed_and_unknown_timestamp_types():
    out = _check(
        [
            _consumer_record(0, timestamp_type=0),
            _consumer_record(1, timestamp_type=1),
            _consumer_record(2, timestamp_type=-1),
        ]
    )
    assert [r.timestamp_type for r in out] == [
        TimestampType.CREATE_TIME,
        TimestampType.LOG_APPEND_TIME,
        TimestampType.NOT_AVAILABLE,
    ]
    assert (
        _check([_consumer_record(i, timestamp_type=1) for i in range(3)])[0].timestamp_type
        is TimestampType.LOG_APPEND_TIME
    )


def test_headers_kept_in_order_as_tuples_where_present():
    out = _check([_consumer_record(0), _consumer_record(1, headers=[("a", b"1"), ("b", None)]), _consumer_record(2)])
    assert [r.headers for r in out] == [(), (("a", b"1"), ("b", None)), ()]


def test_null_values_and_an_empty_batch():
    assert _check([_consumer_record(0, value=None)])[0].value is None
    assert to_kafka_records([]) == []


class _NoopListener:
    def on_assigned(self, partitions: frozenset) -> None:
        pass

    def on_revoked(self, partitions: frozenset) -> None:
        pass

    def on_lost(self, partitions: frozenset) -> None:
        pass


def test_polls_of_a_joined_member_make_no_coordinator_hand_off(bootstrap, names):
    """Once the group coordinator is known and connected, ensure_coordinator_ready is
    answered on the polling thread: no coroutine is run on kafka-python's IO thread for
    it (the hand-off skip_known_coordinator_hop removes), and the records still flow."""
    topic = create_topic(bootstrap, names.topic(), 1)
    produce(bootstrap, topic, [b"v%d" % i for i in range(2000)], partition=0)
    client = KafkaPythonClient(
        {
            "bootstrap.servers": bootstrap,
            "group.id": names.group(),
            "auto.offset.reset": "earliest",
            "session.timeout.ms": TEST_SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": TEST_HEARTBEAT_INTERVAL_MS,
        }
    )
    try:
        client.subscribe([topic], listener=_NoopListener())
        got: list[KafkaRecord] = []
        end = time.monotonic() + 60
        while not got:  # joined, fetching
            assert time.monotonic() < end, "no records within 60 s"
            got.extend(r for records in client.poll(100, 50).values() for r in records)
        consumer = client._consumer
        net = consumer._coordinator._net
        hops: list[str] = []
        original_run = net.run

        def counting_run(coro, *args):
            hops.append(getattr(coro, "__qualname__", repr(coro)))
            return original_run(coro, *args)

        net.run = counting_run
        try:
            while len(got) < 2000:
                assert time.monotonic() < end, f"got {len(got)} of 2000 records within 60 s"
                got.extend(r for records in client.poll(100, 50).values() for r in records)
        finally:
            del net.run
        assert [r.offset for r in got] == list(range(2000))
        assert not [h for h in hops if "ensure_coordinator_ready" in h], hops
    finally:
        client.close(5000)
