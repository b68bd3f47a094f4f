"""The Kafka output verifier on the broker, against output written here with kafka-python
producers: committed, aborted, left open, duplicated across transactions, missing, and written
without a transaction. The broker's consumers would return the aborted records; the verifier
must not."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pytest
from kafka import KafkaProducer

from coordinator.protocol.common.waiting import wait_until
from cr_consumer.drill.delivered import Delivered
from cr_consumer.drill.manifest import Manifest
from cr_consumer.drill.provenance import OFFSET_HEADER, provenance_headers, read_dead_letter, read_provenance
from cr_consumer.drill.verify import verify
from cr_consumer.drill.verify_kafka import KafkaOutputCounter, read_topic
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.testing.kafka_util import create_topic, unique_name

#: The input the manifest says was produced: topic "t", partitions 0 and 1, offsets 0-9.
INPUT = [("t", p, o) for p in (0, 1) for o in range(10)]
#: Bound on waiting for the counter to see a commit (the broker answers in milliseconds).
COUNT_TIMEOUT_S = 20.0


def _value(partition: int, offset: int) -> str:
    return f"v{partition}-{offset}"


def _manifest() -> Manifest:
    m = Manifest(group="g")
    for topic, p, o in INPUT:
        m.add(topic, p, o, _value(p, o))
    return m


@pytest.fixture
def out(bootstrap: str) -> str:
    """An output topic of two partitions."""
    return create_topic(bootstrap, unique_name("verify-out"), 2)


@pytest.fixture
def producers(bootstrap: str) -> Iterator[list[KafkaProducer]]:
    """Every producer a test opens, closed at its end (an abandoned one too: after the checks)."""
    opened: list[KafkaProducer] = []
    yield opened
    for producer in opened:
        producer.close(timeout=1)


def _transactional(bootstrap: str, producers: list[KafkaProducer]) -> KafkaProducer:
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=unique_name("tid"), max_block_ms=10_000)
    producers.append(producer)
    producer.init_transactions()
    return producer


def _plain(bootstrap: str, producers: list[KafkaProducer]) -> KafkaProducer:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    producers.append(producer)
    return producer


def _send(producer: KafkaProducer, out: str, inputs: Iterable[tuple[str, int, int]]) -> None:
    """Each input record to output partition = its input partition, as the drill's sink would."""
    for topic, p, o in inputs:
        producer.send(out, _value(p, o).encode(), partition=p, headers=list(provenance_headers(topic, p, o)))
    producer.flush()


def _committed(producer: KafkaProducer, out: str, inputs: Iterable[tuple[str, int, int]]) -> None:
    producer.begin_transaction()
    _send(producer, out, inputs)
    producer.commit_transaction()


def _settings(bootstrap: str) -> dict[str, object]:
    return admin_settings(bootstrap, {}, request_timeout_ms=10_000, client_id="test-verify-kafka")


def test_committed_output_in_two_transactions_is_exactly_once(bootstrap, out, producers):
    writer = _transactional(bootstrap, producers)
    _committed(writer, out, INPUT[:13])
    _committed(writer, out, INPUT[13:])
    read = read_topic(_settings(bootstrap), out)
    r = verify(_manifest(), read)
    assert r.ok, r
    assert (r.delivered, r.sources, r.aborted, r.open_transactions) == (20, 2, 0, 0)


def test_aborted_records_are_counted_and_not_delivered(bootstrap, out, producers):
    writer = _transactional(bootstrap, producers)
    writer.begin_transaction()
    _send(writer, out, INPUT[2:5])  # flushed: in the log before the abort
    writer.abort_transaction()
    _committed(writer, out, INPUT)
    r = verify(_manifest(), read_topic(_settings(bootstrap), out))
    assert r.ok, r
    assert (r.delivered, r.duplicates, r.aborted) == (20, 0, 3)


def test_a_transaction_left_open_fails_and_hides_the_records_behind_it(bootstrap, out, producers):
    writer = _transactional(bootstrap, producers)
    _committed(writer, out, INPUT[:5])  # output partition 0: records 0-4, the marker at 5
    abandoned = _transactional(bootstrap, producers)
    abandoned.begin_transaction()
    _send(abandoned, out, INPUT[5:8])  # flushed, never ended: its writer is gone
    ids = abandoned._transaction_manager.producer_id_and_epoch
    _send(_plain(bootstrap, producers), out, INPUT[8:10])  # after it in its partition: held back
    _committed(writer, out, INPUT[10:])  # the other partition is not held
    r = verify(_manifest(), read_topic(_settings(bootstrap), out))
    assert not r.ok
    assert r.open_transactions == 1
    assert r.examples["open_transactions"] == [[out, 0, ids.producer_id, ids.epoch, 6, 3]]
    assert (r.delivered, r.missing) == (15, 5)
    assert r.examples["missing"] == [["t", 0, o] for o in range(5, 10)]


def test_a_duplicate_across_two_committed_transactions_is_detected(bootstrap, out, producers):
    writer = _transactional(bootstrap, producers)
    _committed(writer, out, INPUT)
    _committed(writer, out, [("t", 1, 4)])
    r = verify(_manifest(), read_topic(_settings(bootstrap), out))
    assert not r.ok
    assert (r.duplicates, r.missing, r.delivered) == (1, 0, 21)
    assert r.examples["duplicates"] == [["t", 1, 4, 2]]


def test_a_record_never_written_is_missing(bootstrap, out, producers):
    _committed(_transactional(bootstrap, producers), out, [i for i in INPUT if i != ("t", 0, 7)])
    r = verify(_manifest(), read_topic(_settings(bootstrap), out))
    assert not r.ok
    assert (r.missing, r.delivered) == (1, 19)
    assert r.examples["missing"] == [["t", 0, 7]]


def test_non_transactional_records_are_delivered_and_one_without_provenance_is_malformed(bootstrap, out, producers):
    plain = _plain(bootstrap, producers)
    _send(plain, out, INPUT[10:])
    _committed(_transactional(bootstrap, producers), out, INPUT[:10])
    assert verify(_manifest(), read_topic(_settings(bootstrap), out)).ok
    plain.send(out, b"v0-3", partition=0, headers=[("crkafka.topic", b"t"), ("crkafka.partition", b"0")])
    plain.flush()
    r = verify(_manifest(), read_topic(_settings(bootstrap), out))
    assert not r.ok
    assert (r.malformed_lines, r.delivered, r.duplicates) == (1, 20, 0)
    assert r.examples["malformed_lines"][0][3] == f"no header {OFFSET_HEADER!r}"


def test_a_wrong_value_is_detected(bootstrap, out, producers):
    writer = _transactional(bootstrap, producers)
    writer.begin_transaction()
    _send(writer, out, INPUT[1:])
    writer.send(out, b"\xff tampered", partition=0, headers=list(provenance_headers("t", 0, 0)))
    writer.commit_transaction()
    r = verify(_manifest(), read_topic(_settings(bootstrap), out))
    assert (r.wrong_values, r.missing, r.delivered) == (1, 0, 20)


def test_the_counter_counts_each_committed_record_once(bootstrap, out, producers):
    counter = KafkaOutputCounter(_settings(bootstrap), out, period_s=0)
    writer = _transactional(bootstrap, producers)
    _committed(writer, out, INPUT[:4])
    other = _transactional(bootstrap, producers)
    other.begin_transaction()
    _send(other, out, INPUT[4:6])
    _send(_plain(bootstrap, producers), out, INPUT[6:8])  # behind the open transaction
    assert counter.count() == 4
    assert counter.count() == 4  # read again from the open transaction: nothing counted twice
    other.commit_transaction()
    assert wait_until(lambda: counter.count() == 8, COUNT_TIMEOUT_S, "the counter to see the commit")
    writer.begin_transaction()
    _send(writer, out, INPUT[8:12])
    writer.abort_transaction()
    _committed(writer, out, INPUT[12:])
    assert wait_until(lambda: counter.count() == 16, COUNT_TIMEOUT_S, "the counter to see the last commit")
    assert counter.count() == 16


@pytest.mark.parametrize(
    ("headers", "error"),
    [
        ([], "no header 'crkafka.topic'"),
        ([("crkafka.topic", b"t"), ("crkafka.topic", b"u")], "appears twice"),
        ([("crkafka.topic", None)], "is null"),
        ([("crkafka.topic", b""), ("crkafka.partition", b"0"), ("crkafka.offset", b"1")], "is empty"),
        ([("crkafka.topic", b"\xff"), ("crkafka.partition", b"0"), ("crkafka.offset", b"1")], "not UTF-8"),
        ([("crkafka.topic", b"t"), ("crkafka.partition", b"-1"), ("crkafka.offset", b"1")], "not a decimal"),
        ([("crkafka.topic", b"t"), ("crkafka.partition", b"0"), ("crkafka.offset", b"1" * 20)], "not a decimal"),
    ],
)
def test_provenance_headers_are_checked_before_use(headers, error):
    with pytest.raises(ValueError, match=error):
        read_provenance(tuple(headers))
    assert read_provenance((("other", None), *provenance_headers("t", 3, 42))) == ("t", 3, 42)


def test_the_dead_letter_topic_is_read_by_the_dead_letter_records_provenance(bootstrap, out, producers):
    """The runtime's own dead-letter records (poison at t/0@2 and t/1@9) in a committed
    transaction, and an aborted copy: each is placed by its ``crkafka.source.*`` headers; the
    drill's own provenance headers do not count there."""
    from cr_consumer.runtime.pipeline.dead_letter import dead_letter_record
    from cr_consumer.runtime.pipeline.records import Record

    poison = {("t", 0, 2), ("t", 1, 9)}
    manifest = Manifest(group="g")
    for topic, p, o in INPUT:
        manifest.add(topic, p, o, _value(p, o), poison=(topic, p, o) in poison)
    writer = _transactional(bootstrap, producers)

    def send(inputs: Iterable[tuple[str, int, int]]) -> None:
        for topic, p, o in inputs:
            letter = dead_letter_record(
                Record(topic, p, o, None, None, b"\xff", ()), "03-map", ValueError(), (topic, p)
            )
            writer.send(out, letter.value, partition=p, headers=list(letter.headers))
        writer.flush()

    writer.begin_transaction()
    send(sorted(poison))
    writer.abort_transaction()
    writer.begin_transaction()
    send(sorted(poison))
    writer.commit_transaction()
    dead_letters = read_topic(_settings(bootstrap), out, provenance=read_dead_letter)
    r = verify(manifest, Delivered(), dead_letters=dead_letters)
    assert (r.dead_letters, r.aborted, r.dead_letter_missing, r.dead_letter_duplicates) == (2, 2, 0, 0)
    assert r.dead_letter_unexpected == 0
    _committed(writer, out, [("t", 0, 5)])  # the drill's provenance headers only: not a dead letter
    r = verify(manifest, Delivered(), dead_letters=read_topic(_settings(bootstrap), out, provenance=read_dead_letter))
    assert r.malformed_lines == 1
    assert r.dead_letters == 2
