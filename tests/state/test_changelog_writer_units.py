"""The changelog writer's flush (``cr_consumer/state/changelog.py``, steps 3-4) on a fake
producer whose sends the test answers, fails or leaves unanswered."""

from __future__ import annotations

import threading
import time

import pytest
from kafka.errors import NotEnoughReplicasError
from kafka.future import Future
from kafka.producer.future import RecordMetadata
from kafka.structs import TopicPartition

from cr_consumer.kafka.kafka_python.changelog import ChangelogWriteError, ChangelogWriter
from cr_consumer.state.changelog import decode_record


class FakeProducer:
    """Keeps every send and its future; the test decides what becomes of them."""

    def __init__(self, **config: object) -> None:
        self.config = config
        self.sent: list[tuple[int, bytes, bytes | None, list[tuple[str, bytes]], Future]] = []
        self.offsets: dict[int, int] = {}

    def send(
        self, topic: str, *, key: bytes, value: bytes | None, headers: list[tuple[str, bytes]], partition: int
    ) -> Future:
        future = Future()
        self.sent.append((partition, key, value, headers, future))
        return future

    def ack(self, index: int) -> None:
        partition, *_, future = self.sent[index]
        offset = self.offsets.get(partition, 0)
        self.offsets[partition] = offset + 1
        future.success(RecordMetadata("t", partition, TopicPartition("t", partition), offset, -1, None, 0, 0, 0))


@pytest.fixture
def fake() -> tuple[ChangelogWriter, FakeProducer]:
    made: list[FakeProducer] = []

    def factory(**config: object) -> FakeProducer:
        made.append(FakeProducer(**config))
        return made[-1]

    writer = ChangelogWriter("b:9092", "t", {"linger_ms": 1}, producer_factory=factory)
    return writer, made[0]


def test_the_producer_is_idempotent_and_bounded(fake: tuple[ChangelogWriter, FakeProducer]) -> None:
    _, producer = fake
    assert producer.config["enable_idempotence"] is True
    assert producer.config["acks"] == "all"
    assert producer.config["bootstrap_servers"] == "b:9092"
    assert producer.config["linger_ms"] == 1
    assert isinstance(producer.config["max_block_ms"], int)


def test_flush_returns_each_partitions_end_offset(fake: tuple[ChangelogWriter, FakeProducer]) -> None:
    writer, producer = fake
    producer.offsets = {0: 40, 2: 7}
    writer.write(5, 0, {"a": 1, ("k", 2): None}, {"a": 10, ("k", 2): 11})
    writer.write(5, 2, {"b": [1]}, {"b": 3})
    for i in range(len(producer.sent)):
        producer.ack(i)
    assert writer.flush(1.0) == {0: 42, 2: 8}
    assert writer.flush(1.0) == {}
    partition, key, value, headers, _ = producer.sent[1]
    assert (partition, key, value) == (0, b'["k",2]', None)
    record = decode_record(partition, 41, key, value, headers)
    assert (record.key, record.value, record.seq, record.src) == (("k", 2), None, 5, 11)


def test_flush_waits_for_answers_coming_later(fake: tuple[ChangelogWriter, FakeProducer]) -> None:
    writer, producer = fake
    writer.write(1, 0, {"a": 1, "b": 2}, {"a": 0, "b": 1})
    timer = threading.Timer(0.1, lambda: [producer.ack(i) for i in range(2)])
    timer.start()
    try:
        assert writer.flush(5.0) == {0: 2}
    finally:
        timer.join()


def test_unanswered_sends_fail_the_flush_within_its_timeout(fake: tuple[ChangelogWriter, FakeProducer]) -> None:
    writer, producer = fake
    writer.write(1, 0, {f"k{i}": i for i in range(200)}, {f"k{i}": i for i in range(200)})
    producer.ack(0)
    started = time.monotonic()
    with pytest.raises(ChangelogWriteError, match=r"changelog t: 0 of 200 sends failed and 199 unanswered within 0.2s"):
        writer.flush(0.2)
    assert time.monotonic() - started < 1.0  # one deadline for all sends, not one per send
    assert writer.pending == 0  # forgotten: the seq is never completed


def test_a_failed_send_fails_the_flush_naming_it(fake: tuple[ChangelogWriter, FakeProducer]) -> None:
    writer, producer = fake
    writer.write(1, 1, {"a": 1, "b": 2, "c": 3}, {"a": 0, "b": 1, "c": 2})
    producer.ack(0)
    producer.sent[1][4].failure(NotEnoughReplicasError("2 of 3 in sync"))
    producer.ack(2)
    with pytest.raises(ChangelogWriteError, match=r"1 of 3 sends failed and 0 unanswered .*NotEnoughReplicasError"):
        writer.flush(1.0)


def test_a_write_is_checked_whole_before_anything_is_sent(fake: tuple[ChangelogWriter, FakeProducer]) -> None:
    writer, producer = fake
    with pytest.raises(ValueError, match="key 'b' changed without a source offset"):
        writer.write(1, 0, {"a": 1, "b": 2}, {"a": 0})
    with pytest.raises(ValueError, match=r"change of key 'b' is not JSON: .* keys must be strings"):
        writer.write(1, 0, {"a": 1, "b": {2: 3}}, {"a": 0, "b": 0})
    with pytest.raises(ValueError, match="seq must be an int"):
        writer.write(-1, 0, {"a": 1}, {"a": 0})
    with pytest.raises(ValueError, match="partition -1 must be an int >= 0"):
        writer.write(1, -1, {"a": 1}, {"a": 0})
    assert producer.sent == []
    assert writer.pending == 0
