"""The operator's record (KafkaRecord) downstream: the sinks' JSON and the decoder
give the same result as for any other record shape (no broker)."""

from __future__ import annotations

from cr_consumer.kafka.client import KafkaRecord, TimestampType
from cr_consumer.operator.config import MalformedPolicy
from cr_consumer.operator.process_thread import Decoder
from cr_consumer.runtime.pipeline.records import Record, to_json_line, to_json_lines


def _records(values: list[bytes | None], key: bytes | None = None) -> list[KafkaRecord]:
    return [
        KafkaRecord("t", 2, 10 + i, 1700000000000 + i, TimestampType.CREATE_TIME, key, v, (("h", b"x"),))
        for i, v in enumerate(values)
    ]


def test_the_file_sinks_json_of_kafka_records_is_that_of_plain_records():
    batches = [
        _records([b"plain-%d" % i for i in range(5)]),  # the columnar fast path
        _records([b"plain-%d" % i for i in range(5)], key=b"k"),  # fast path with keys
        _records([b'needs "escaping"', b"\xff\xfe", None]),  # the general path
    ]
    for batch in batches:
        expected = "".join(
            to_json_line(Record(r.topic, r.partition, r.offset, r.timestamp, r.key, r.value, r.headers)) for r in batch
        )
        assert to_json_lines(batch) == expected
        assert to_json_lines(batch, ',"x":1') == "".join(to_json_line(r, ',"x":1') for r in batch)


def test_a_record_without_timestamp_is_written_with_null():
    record = KafkaRecord("t", 0, 5, None, TimestampType.NOT_AVAILABLE, None, b"v")
    assert to_json_lines([record]) == '{"topic":"t","partition":0,"offset":5,"timestamp":null,"key":null,"value":"v"}\n'


def test_the_decoder_keeps_the_record_type_and_every_other_field():
    decode = Decoder(None, lambda v: v.decode().upper(), MalformedPolicy.SKIP)
    [record] = _records([b"abc"])
    [out] = decode([record])
    value: object = out.value  # typed bytes as fetched; the decoder puts any object there
    assert type(out) is KafkaRecord
    assert value == "ABC"
    assert out._replace(value=b"abc") == record  # every other field as fetched
