"""Ending another process's transactions on the broker, and the resolver of a reset's entries
(``coordinator/kafka/transactions.py``): commit, repeated commit, commit after a
fence (the markers decide), an aborted transaction (a loud error), a fence (aborts the open one).
Outcomes are read from the log's markers (``raw_batches.read_committed``): the test broker's
consumers cannot hide aborted records."""

from __future__ import annotations

import time

import pytest

from coordinator.kafka.raw_batches import read_committed
from coordinator.kafka.raw_requests import TransactionEndError
from coordinator.kafka.transactions import UnresolvedTransaction, end_prepared, fence, resolve
from coordinator.protocol.region.transactions import PreparedTxn, Resolve, Transactions, TxnPartition
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.kafka.kafka_python.producer import TransactionalProducer, producer_config
from cr_consumer.testing.kafka_util import create_topic, unique_name


def _settings(bootstrap: str) -> dict[str, object]:
    return admin_settings(bootstrap, {}, request_timeout_ms=5_000, client_id="test-resolver")


def _open(bootstrap: str, tid: str) -> TransactionalProducer:
    return TransactionalProducer(producer_config(bootstrap, {}, tid, {"max.block.ms": 10_000}))


def _prepared(
    bootstrap: str, topic: str, values: list[bytes], partitions: int = 1
) -> tuple[TransactionalProducer, PreparedTxn]:
    """A writer that flushed ``values`` (round robin over ``partitions``) in an open transaction
    and then was never heard of again."""
    writer = _open(bootstrap, unique_name("tid"))
    writer.begin()
    for i, value in enumerate(values):
        writer.send(topic, None, value, [], i % partitions)
    writer.flush(10)
    outcome = writer.outcome()
    assert (outcome.sent, outcome.unanswered, outcome.error) == (len(values), 0, None)
    assert [p.partition for p in outcome.partitions] == list(range(min(partitions, len(values))))
    return writer, writer.prepared(outcome.partitions)


def _entry(txn: PreparedTxn, fence_ids: tuple[str, ...] = ()) -> Resolve:
    return Resolve("member-0", 7, Transactions((txn,), fence_ids))


def test_another_process_commits_a_prepared_transaction_once(bootstrap):
    topic = create_topic(bootstrap, unique_name("prepared"), 1)
    _writer, txn = _prepared(bootstrap, topic, [b"p0", b"p1"])
    assert read_committed(_settings(bootstrap), topic, 0).open_transactions[0].producer_id == txn.producer_id
    end_prepared(_settings(bootstrap), txn, commit=True)
    end_prepared(_settings(bootstrap), txn, commit=True)  # a repeated commit changes nothing
    read = read_committed(_settings(bootstrap), topic, 0)
    assert [r.value for r in read.records] == [b"p0", b"p1"]
    assert read.open_transactions == ()


def test_another_process_aborts_an_abandoned_transaction(bootstrap):
    topic = create_topic(bootstrap, unique_name("prepared"), 1)
    _writer, txn = _prepared(bootstrap, topic, [b"x0", b"x1", b"x2"])
    end_prepared(_settings(bootstrap), txn, commit=False)
    read = read_committed(_settings(bootstrap), topic, 0)
    assert (read.records, read.open_transactions, read.aborted_records) == ((), (), 3)


def test_a_commit_of_a_fenced_transaction_fails_within_its_bound(bootstrap):
    topic = create_topic(bootstrap, unique_name("prepared"), 1)
    _writer, txn = _prepared(bootstrap, topic, [b"f0"])
    successor = _open(bootstrap, txn.transactional_id)  # fences the epoch, aborts the transaction
    started = time.monotonic()
    with pytest.raises(TransactionEndError, match=txn.transactional_id):
        end_prepared(_settings(bootstrap), txn, commit=True, deadline_s=20)
    assert time.monotonic() - started < 20
    read = read_committed(_settings(bootstrap), topic, 0)
    assert (read.records, read.open_transactions) == ((), ())
    successor.close(5)


def test_the_resolver_commits_a_prepared_transaction_on_every_partition_and_again_harmlessly(bootstrap):
    topic = create_topic(bootstrap, unique_name("resolve"), 2)
    _writer, txn = _prepared(bootstrap, topic, [b"a0", b"b0", b"a1", b"b1"], partitions=2)
    assert [p.partition for p in txn.partitions] == [0, 1]
    resolve(_settings(bootstrap), (_entry(txn),))
    resolve(_settings(bootstrap), (_entry(txn),))  # a repeated resolve: the markers say committed
    for partition, values in ((0, [b"a0", b"a1"]), (1, [b"b0", b"b1"])):
        read = read_committed(_settings(bootstrap), topic, partition)
        assert ([r.value for r in read.records], read.open_transactions) == (values, ())


def test_a_committed_transaction_whose_id_was_fenced_since_is_resolved_by_its_markers(bootstrap):
    topic = create_topic(bootstrap, unique_name("resolve"), 1)
    _writer, txn = _prepared(bootstrap, topic, [b"c0"])
    end_prepared(_settings(bootstrap), txn, commit=True)
    fence(_settings(bootstrap), txn.transactional_id)  # the recorded epoch is stale now: EndTxn is refused
    with pytest.raises(TransactionEndError):
        end_prepared(_settings(bootstrap), txn, commit=True, deadline_s=20)
    resolve(_settings(bootstrap), (_entry(txn),))
    assert [r.value for r in read_committed(_settings(bootstrap), topic, 0).records] == [b"c0"]


def test_an_aborted_transaction_of_a_completed_checkpoint_fails_the_resolve_naming_it(bootstrap):
    topic = create_topic(bootstrap, unique_name("resolve"), 1)
    _writer, txn = _prepared(bootstrap, topic, [b"lost0", b"lost1"])
    fence(_settings(bootstrap), txn.transactional_id)  # aborts it: the output is gone
    first = txn.partitions[0].first_offset
    with pytest.raises(UnresolvedTransaction) as failure:
        resolve(_settings(bootstrap), (_entry(txn),))
    text = str(failure.value)
    assert txn.transactional_id in text
    assert f"{topic}[0] from {first}" in text
    assert "member-0's checkpoint 7" in text
    assert f"{topic}[0]: ABORT" in text


def test_the_resolver_fences_every_id_and_so_aborts_what_was_open(bootstrap):
    topic = create_topic(bootstrap, unique_name("resolve"), 1)
    committed_writer, done = _prepared(bootstrap, topic, [b"kept"])
    open_writer, still_open = _prepared(bootstrap, topic, [b"dropped0", b"dropped1"])
    entry = Resolve("member-1", 3, Transactions((done,), (done.transactional_id, still_open.transactional_id)))
    resolve(_settings(bootstrap), (entry,))
    read = read_committed(_settings(bootstrap), topic, 0)
    assert [r.value for r in read.records] == [b"kept"]
    assert (read.open_transactions, read.aborted_records) == ((), 2)
    for writer in (committed_writer, open_writer):
        writer.close(1)


def test_the_producer_keeps_few_sends_waiting_and_reads_folded_ones_alike(bootstrap):
    """``bound`` waits once more than twice the window is sent and folds the answered front:
    the outcome (count, each partition's first offset) is that of every send."""
    topic = create_topic(bootstrap, unique_name("bound"), 3)
    writer = TransactionalProducer(producer_config(bootstrap, {}, unique_name("tid"), {}), max_unanswered=10)
    try:
        writer.begin()
        for i in range(95):
            writer.send(topic, None, b"r%d" % i, [], i % 3)
            writer.bound(10)
            assert writer.kept <= 20  # the kept futures stay bounded
        writer.flush(10)
        outcome = writer.outcome()
        assert (outcome.sent, outcome.unanswered, outcome.error) == (95, 0, None)
        writer.commit(10, "the bounded transaction")
    finally:
        writer.close(5)
    reads = [read_committed(_settings(bootstrap), topic, p) for p in range(3)]
    assert [len(r.records) for r in reads] == [32, 32, 31]
    assert outcome.partitions == tuple(TxnPartition(topic, p, reads[p].records[0].offset) for p in range(3))
