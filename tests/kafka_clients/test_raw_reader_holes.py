"""A raw read never goes past a batch the broker has not stored yet: the test broker moves its
high watermark before it stores a produce in flight, and stores concurrent produces and markers
in any order, so a fetch of a partition being written can lack a batch between two it returns.
A reader that went on past that hole would never see the batch: a missed marker leaves its
transaction open for ever, a missed data batch drops committed records as aborted.

The rule (``raw_batches.stored_run``) against a model, and a tail of partitions that concurrent
transactional producers write (some transactions aborted) against what those producers
committed."""

from __future__ import annotations

import time

from hypothesis import given
from hypothesis import strategies as st
from kafka import KafkaProducer

from coordinator.kafka.committed_filter import CommittedFilter, LogBatch, LogRecord
from coordinator.kafka.raw_batches import PartitionReader, read_committed, stored_run
from coordinator.kafka.raw_requests import RawClient
from coordinator.protocol.common.waiting import wait_until
from cr_consumer.kafka.client import ClientKind, KafkaRecord, TopicPartition
from cr_consumer.kafka.factory import make_client
from cr_consumer.kafka.kafka_python.aborted_records import AbortedRecordFilter, for_consumer
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.testing.kafka_util import create_topic, unique_name

from support.concurrent_transactions import ConcurrentTransactions

PRODUCERS = 6
PARTITIONS = 2
#: How long the producers write while the partitions are tailed.
WRITE_S = 6.0


def _dense(sizes: list[int]) -> list[LogBatch]:
    batches, offset = [], 0
    for n in sizes:
        batches.append(LogBatch(offset, offset + n - 1, 1, 0, False))
        offset += n
    return batches


@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=20),
    stored=st.lists(st.booleans(), min_size=20, max_size=20),
    at=st.integers(0, 79),
)
def test_a_response_is_used_up_to_its_first_hole(sizes, stored, at):
    log = _dense(sizes)
    offset = min(at, log[-1].last_offset)
    response = [b for b, kept in zip(log, stored, strict=False) if kept and b.last_offset >= offset]
    expected = []
    for batch in log:
        if batch.last_offset < offset:
            continue
        if batch not in response:
            break
        expected.append(batch)
    run = stored_run(response, offset)
    assert run == expected
    covered = [o for b in run for o in range(b.base_offset, b.last_offset + 1) if o >= offset]
    assert covered == list(range(offset, offset + len(covered)))  # no hole, from the fetch offset on


def test_batches_wholly_before_the_offset_are_left_out_and_the_one_holding_it_kept():
    log = _dense([3, 2, 4])  # 0-2, 3-4, 5-8
    assert stored_run(log, 4) == log[1:]
    assert stored_run(log, 9) == []
    assert stored_run(log[2:], 3) == []  # the batch at 3 is not stored yet


def test_a_tail_of_partitions_written_by_concurrent_transactions_releases_exactly_the_committed_records(bootstrap):
    topic = create_topic(bootstrap, unique_name("holes"), PARTITIONS)
    settings = admin_settings(bootstrap, {}, request_timeout_ms=10_000, client_id="test-holes")

    def send(producer: KafkaProducer, label: str) -> None:
        for k in range(2 * PARTITIONS):
            producer.send(topic, f"{label}-{k}".encode(), partition=k % PARTITIONS)
        producer.flush()

    writers = ConcurrentTransactions(bootstrap, [f"{topic}-{i}" for i in range(PRODUCERS)], send).start()
    released: dict[int, list[LogRecord]] = {p: [] for p in range(PARTITIONS)}
    filters = {p: CommittedFilter() for p in range(PARTITIONS)}
    position = dict.fromkeys(range(PARTITIONS), 0)
    try:
        with RawClient(settings, time.monotonic() + 120) as client:
            readers = {p: PartitionReader(client, topic, p, with_records=True) for p in range(PARTITIONS)}

            def tail_step(p: int) -> int:
                batches, high_watermark = readers[p].fetch(position[p])
                for batch in batches:
                    assert batch.base_offset <= position[p] <= batch.last_offset, (p, position[p], batch)
                    released[p].extend(filters[p].feed(batch))
                    position[p] = batch.last_offset + 1
                return high_watermark

            end = time.monotonic() + WRITE_S
            while time.monotonic() < end:
                for p in range(PARTITIONS):
                    tail_step(p)
            labels = writers.stop()
            for p in range(PARTITIONS):
                high_watermark = tail_step(p)
                while position[p] < high_watermark:
                    tail_step(p)
    finally:
        writers.stop()  # again after a failure: no writer outlives the test
    expected = sorted(f"{label}-{k}".encode() for label in labels for k in range(2 * PARTITIONS))
    assert len(expected) > 100, "too few transactions to tell anything"
    tailed = sorted(r.value or b"" for p in range(PARTITIONS) for r in released[p])
    assert tailed == expected
    assert [filters[p].open_transactions() for p in range(PARTITIONS)] == [[]] * PARTITIONS
    whole = sorted(r.value or b"" for p in range(PARTITIONS) for r in read_committed(settings, topic, p).records)
    assert whole == expected


def test_the_source_s_filter_sends_a_client_back_to_a_committed_record_it_skipped(bootstrap):
    """The client itself can skip a record whose batch a fetch answer lacked (seen: 4 of 6,276
    records in 20 s, a kafka-python consumer at the head of a partition six transactional
    producers wrote). The source's filter of aborted records (``aborted_records.py`` step 6)
    hands on only the records before the first committed one the client did not return, and
    has the partition read again from it: within a poll, and across polls (a client that
    jumped)."""
    topic = create_topic(bootstrap, unique_name("holes-client"), 1)
    tp = TopicPartition(topic, 0)
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-w", max_block_ms=10_000)
    producer.init_transactions()
    for txn in range(2):  # offsets 0-2 and 4-6, their COMMIT markers at 3 and 7
        producer.begin_transaction()
        for k in range(3):
            producer.send(topic, b"%d-%d" % (txn, k), partition=0)
        producer.commit_transaction()
    producer.close(timeout=10)
    client = make_client(ClientKind.KAFKA_PYTHON, {"bootstrap.servers": bootstrap, "group.id": None})
    try:
        client.assign([tp])
        client.seek(tp, 0)
        records: list[KafkaRecord] = []
        wait_until(lambda: records.extend(client.poll(500, 100).get(tp, [])) or len(records) == 6, 30, "6 records")
    finally:
        client.close(5_000)
    by_offset = {r.offset: r for r in records}
    assert sorted(by_offset) == [0, 1, 2, 4, 5, 6]

    def poll(flt: AbortedRecordFilter, *offsets: int) -> tuple[list[int], int | None, int | None]:
        f = flt.filter({tp: [by_offset[o] for o in offsets]}, {tp}, 0)[tp]
        return [r.offset for r in f.records], f.end, f.rewind

    within = for_consumer(bootstrap, {}, "test-holes-filter")
    try:
        assert poll(within, 0, 1, 2, 4, 6) == ([0, 1, 2, 4], 5, 5)  # 5 skipped: read again from it
        assert poll(within, 5, 6) == ([5, 6], 8, None)
        assert within.skips == 1
    finally:
        within.close()
    across = for_consumer(bootstrap, {}, "test-holes-filter")
    try:
        assert poll(across, 0, 1) == ([0, 1], 2, None)
        assert poll(across, 2) == ([2], 4, None)  # the client passes the marker at 3: not a skip
        assert poll(across, 6) == ([], None, 4)  # it jumped over 4 and 5
        assert poll(across, 4, 5, 6) == ([4, 5, 6], 8, None)
        assert across.skips == 1
    finally:
        across.close()
