"""A raw read never goes past a batch the broker has not stored yet: the test broker moves its
high watermark before it stores a produce in flight, and stores concurrent produces and markers
in any order, so a fetch of a partition being written can lack a batch between two it returns.
A reader that went on past that hole would never see the batch: a missed marker leaves its
transaction open for ever, a missed data batch drops committed records as aborted.

The rule (``raw_batches.stored_run``) against a model, and a tail of partitions that concurrent
transactional producers write (some transactions aborted) against what those producers
committed."""

from __future__ import annotations

import threading
import time

from hypothesis import given
from hypothesis import strategies as st
from kafka import KafkaProducer

from coordinator.kafka.committed_filter import CommittedFilter, LogBatch, LogRecord
from coordinator.kafka.raw_batches import PartitionReader, read_committed, stored_run
from coordinator.kafka.raw_requests import RawClient
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.testing.kafka_util import create_topic, unique_name

PRODUCERS = 6
PARTITIONS = 2
#: How long the producers write while the partitions are tailed.
WRITE_S = 6.0
#: Every third transaction of a producer is aborted.
ABORT_EVERY = 3


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


def _write(bootstrap: str, topic: str, index: int, stop: threading.Event, committed: list[bytes]) -> None:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=f"{topic}-{index}", linger_ms=0, max_block_ms=10_000
    )
    producer.init_transactions()
    txn = 0
    while not stop.is_set():
        producer.begin_transaction()
        values = [b"%d-%d-%d" % (index, txn, k) for k in range(2 * PARTITIONS)]
        for k, value in enumerate(values):
            producer.send(topic, value, partition=k % PARTITIONS)
        producer.flush()
        if txn % ABORT_EVERY == ABORT_EVERY - 1:
            producer.abort_transaction()
        else:
            producer.commit_transaction()
            committed.extend(values)
        txn += 1
    producer.close(timeout=10)


def test_a_tail_of_partitions_written_by_concurrent_transactions_releases_exactly_the_committed_records(bootstrap):
    topic = create_topic(bootstrap, unique_name("holes"), PARTITIONS)
    settings = admin_settings(bootstrap, {}, request_timeout_ms=10_000, client_id="test-holes")
    stop = threading.Event()
    committed: list[list[bytes]] = [[] for _ in range(PRODUCERS)]
    writers = [
        threading.Thread(target=_write, args=(bootstrap, topic, i, stop, committed[i]), daemon=True)
        for i in range(PRODUCERS)
    ]
    for w in writers:
        w.start()
    released: dict[int, list[LogRecord]] = {p: [] for p in range(PARTITIONS)}
    filters = {p: CommittedFilter() for p in range(PARTITIONS)}
    position = dict.fromkeys(range(PARTITIONS), 0)
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
        stop.set()
        for w in writers:
            w.join(30)
            assert not w.is_alive(), "a producer did not end"
        for p in range(PARTITIONS):
            high_watermark = tail_step(p)
            while position[p] < high_watermark:
                tail_step(p)
    expected = sorted(v for values in committed for v in values)
    assert len(expected) > 100, "too few transactions to tell anything"
    tailed = sorted(r.value or b"" for p in range(PARTITIONS) for r in released[p])
    assert tailed == expected
    assert [filters[p].open_transactions() for p in range(PARTITIONS)] == [[]] * PARTITIONS
    whole = sorted(r.value or b"" for p in range(PARTITIONS) for r in read_committed(settings, topic, p).records)
    assert whole == expected
