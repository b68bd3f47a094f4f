"""The source's own filter of aborted records (``crkafka.filter.aborted``) on the test broker,
whose fetch answers carry no aborted-transactions list (its consumers return aborted records):
with both clients, the operator delivers exactly the committed and non-transactional records, in
offset order, and the offsets it commits and checkpoints move past the aborted records and the
control markers, so a reset replays none of them."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaProducer

from coordinator.kafka.raw_batches import read_committed
from coordinator.protocol.common.waiting import wait_until
from cr_consumer import StartKind
from cr_consumer.kafka.client import TopicPartition
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.operator.checkpoint import OperatorCheckpoint
from cr_consumer.operator.region import RegionPermit
from cr_consumer.testing.kafka_util import create_topic

from support.concurrent_transactions import ConcurrentTransactions
from support.operator import Members, Region, Sink, committed, make

pytestmark = pytest.mark.usefixtures("kafka_client")

PARTITIONS = (0, 1)
FILTERED = {"isolation.level": "read_committed", "crkafka.filter.aborted": True}


class Writers:
    """Two transactional producers (``a``, ``b``) and a plain one, each record written to both
    partitions as ``<label>-p<partition>``."""

    def __init__(self, bootstrap: str, topic: str, names) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.tid_a = names.group("tid-a")
        self.a = self.transactional(self.tid_a)
        self.b = self.transactional(names.group("tid-b"))
        self.plain = KafkaProducer(bootstrap_servers=bootstrap)
        self.fenced: list[KafkaProducer] = []

    def transactional(self, tid: str) -> KafkaProducer:
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, transactional_id=tid, max_block_ms=10_000)
        producer.init_transactions()
        return producer

    def send(self, producer: KafkaProducer, *labels: str) -> None:
        for label in labels:
            for p in PARTITIONS:
                producer.send(self.topic, f"{label}-p{p}".encode(), partition=p)
        producer.flush()  # in the log now, before whatever the test writes next

    def txn(self, producer: KafkaProducer, *labels: str) -> None:
        producer.begin_transaction()
        self.send(producer, *labels)

    def fence_a(self) -> None:
        """A successor of ``a`` (same transactional id) fences it: its open transaction is aborted."""
        self.fenced.append(self.a)
        self.a = self.transactional(self.tid_a)

    def close(self) -> None:
        for producer in (self.a, self.b, self.plain):
            producer.close(timeout=5)
        for producer in self.fenced:
            producer.close(timeout=1)  # its calls are refused by a dropped connection: bounded


def interleaved_log(w: Writers) -> list[str]:
    """Committed, aborted (explicitly and by fencing) and plain records of two producers,
    interleaved, ending with an aborted transaction; the labels a read_committed consumer must
    see, in offset order."""
    w.txn(w.a, "a0", "a1")
    w.a.commit_transaction()
    w.txn(w.b, "b0")  # open while the next records are written: they wait behind it
    w.send(w.plain, "plain1")
    w.txn(w.a, "ax")
    w.a.abort_transaction()
    w.b.commit_transaction()  # its marker comes after a's aborted records
    w.txn(w.a, "az")
    w.fence_a()  # az is aborted by the fencing
    w.txn(w.a, "c")
    w.a.commit_transaction()
    w.send(w.plain, "plain2")
    w.txn(w.b, "bx")
    w.b.abort_transaction()  # the log ends with aborted records and their marker
    return ["a0", "a1", "b0", "plain1", "c", "plain2"]


def log_end(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's high watermark, and a check that the raw reader agrees with the source."""
    settings = admin_settings(bootstrap, {}, request_timeout_ms=10_000, client_id="test-aborted-filter")
    return {p: read_committed(settings, topic, p).stop for p in PARTITIONS}


def delivered(sink: Sink) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {p: [] for p in PARTITIONS}
    offsets: dict[int, list[int]] = {p: [] for p in PARTITIONS}
    for r in sink.records:
        out[r.partition].append(r.value.decode())
        offsets[r.partition].append(r.offset)
    assert all(o == sorted(set(o)) for o in offsets.values()), offsets
    return out


def expected(labels: list[str]) -> dict[int, list[str]]:
    return {p: [f"{label}-p{p}" for label in labels] for p in PARTITIONS}


def start_committing(bootstrap: str, group: str, topic: str, sink: Sink, **options):
    """A standalone filtering source from the earliest offsets that commits every 0.3 s."""
    return make(
        bootstrap,
        group,
        "m0",
        sink,
        topics=[topic],
        start_position=StartKind.EARLIEST,
        commit_period_s=0.3,
        consumer_properties=FILTERED,
        **options,
    ).start()


def test_the_source_delivers_committed_and_plain_records_and_commits_to_the_log_end(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=len(PARTITIONS))
    group = names.group()
    w = Writers(bootstrap, topic, names)
    try:
        labels = interleaved_log(w)
    finally:
        w.close()
    end = log_end(bootstrap, topic)
    sink = Sink()
    op = start_committing(bootstrap, group, topic, sink, max_poll_records=3)  # some polls of aborted records only
    try:
        wait_until(lambda: committed(bootstrap, group, topic) == end, 30, f"offsets {end} committed")
        assert delivered(sink) == expected(labels)
        assert op.metrics()["nDroppedAborted"] == 3 * len(PARTITIONS)  # ax, az, bx
    finally:
        op.close()


def test_a_reset_replays_the_committed_records_only_and_checkpoints_past_the_aborted_ones(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=len(PARTITIONS))
    w = Writers(bootstrap, topic, names)
    sink = Sink()
    members = Members()
    try:
        labels = interleaved_log(w)
        op = make(
            bootstrap,
            names.group(),
            "m0",
            sink,
            topics=[topic],
            start_position=StartKind.EARLIEST,
            permit=RegionPermit(),
            region=Region(),
            consumer_properties=FILTERED,
        )
        members.add(op.start())
        sink.wait_count(len(labels) * len(PARTITIONS), 30)
        end = log_end(bootstrap, topic)
        first = members.drain_checkpoint(1)
        assert OperatorCheckpoint.decode(first["m0"]).offsets == {TopicPartition(topic, p): end[p] for p in PARTITIONS}
        assert delivered(sink) == expected(labels)

        w.txn(w.b, "by")
        w.b.abort_transaction()
        w.send(w.plain, "plain3")
        sink.wait_count((len(labels) + 1) * len(PARTITIONS), 30)
        sink.clear()
        members.reset(1, first)  # back to the end of the first log: plain3 again, never by
        sink.wait_count(len(PARTITIONS), 30)
        end = log_end(bootstrap, topic)
        second = members.drain_checkpoint(2)
        assert OperatorCheckpoint.decode(second["m0"]).offsets == {TopicPartition(topic, p): end[p] for p in PARTITIONS}
        assert delivered(sink) == expected(["plain3"])
    finally:
        members.close()
        w.close()


def test_records_behind_an_open_transaction_wait_for_its_marker(bootstrap, names):
    """The source keeps the last stable offset itself: a transaction open while it polls holds
    back its records and every later one (a plain record included) until its marker is in the
    log; then the committed ones are delivered, the aborted ones never, and the committed
    offsets reach the log's end."""
    topic = create_topic(bootstrap, names.topic(), partitions=len(PARTITIONS))
    group = names.group()
    w = Writers(bootstrap, topic, names)
    sink = Sink()
    op = start_committing(bootstrap, group, topic, sink)
    try:
        w.send(w.plain, "p0")
        sink.wait_count(len(PARTITIONS), 30)

        def held_back(label: str, holds: int) -> None:
            w.send(w.plain, label)
            wait_until(lambda: op.metrics()["nHeldOpen"] >= holds, 30, f"{label} held back behind an open transaction")

        w.txn(w.a, "a0")
        held_back("p1", 2 * len(PARTITIONS))  # polled at least twice per partition, delivered never
        assert delivered(sink) == expected(["p0"])
        w.a.commit_transaction()
        sink.wait_count(3 * len(PARTITIONS), 30)
        assert delivered(sink) == expected(["p0", "a0", "p1"])

        holds = op.metrics()["nHeldOpen"]
        w.txn(w.b, "bx")
        held_back("p2", holds + 2 * len(PARTITIONS))
        assert delivered(sink) == expected(["p0", "a0", "p1"])
        w.b.abort_transaction()
        sink.wait_count(4 * len(PARTITIONS), 30)
        end = log_end(bootstrap, topic)
        wait_until(lambda: committed(bootstrap, group, topic) == end, 30, f"offsets {end} committed")
        assert delivered(sink) == expected(["p0", "a0", "p1", "p2"])
        assert op.metrics()["nDroppedAborted"] == len(PARTITIONS)  # bx
    finally:
        op.close()
        w.close()


#: Concurrent transactional writers of the test below, how long they write, and each one's
#: pause between transactions: the source keeps up with the writers, so it polls at the log's
#: head, where batches not stored yet are.
CONCURRENT_WRITERS = 6
CONCURRENT_WRITE_S = 6.0
WRITE_PAUSE_S = 0.02


def test_partitions_written_by_concurrent_transactions_are_read_exactly_once(bootstrap, names):
    """The test broker stores concurrent produces and markers out of order behind a high
    watermark it already moved, so a client polling partitions being written can skip a record
    (a fetch answer that lacked its batch): the source reads such a partition again from the
    skipped record. While six transactional producers write both partitions (every third
    transaction aborted), the source delivers each committed record exactly once, in offset
    order, and no aborted one."""
    topic = create_topic(bootstrap, names.topic(), partitions=len(PARTITIONS))
    group = names.group()
    w = Writers(bootstrap, topic, names)
    tids = [names.group(f"tid-c{i}") for i in range(CONCURRENT_WRITERS)]
    writers = ConcurrentTransactions(bootstrap, tids, w.send, pause_s=WRITE_PAUSE_S)
    sink = Sink()
    op = start_committing(bootstrap, group, topic, sink)
    try:
        writers.start()
        time.sleep(CONCURRENT_WRITE_S)  # the writers' time: the load itself, not a synchronisation
        want = writers.stop()
        end = log_end(bootstrap, topic)
        wait_until(lambda: committed(bootstrap, group, topic) == end, 60, f"offsets {end} committed")
        got = delivered(sink)
        assert len(want) > 50, "too few transactions to tell anything"
        assert {p: sorted(v) for p, v in got.items()} == {p: [f"{label}-p{p}" for label in want] for p in PARTITIONS}
    finally:
        writers.stop()
        op.close()
        w.close()
