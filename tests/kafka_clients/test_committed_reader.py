"""What read_committed consumers must see, decided from the log's own markers: the pure filter
against a model (hypothesis), and the raw reader against the broker, whose consumers return
aborted records (it sends no aborted-transactions list)."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import KafkaProducer
from kafka.record.memory_records import MemoryRecordsBuilder

from coordinator.kafka.committed_filter import (
    CommittedFilter,
    ControlKind,
    HeldTooMany,
    LogBatch,
    LogRecord,
    VisibleOffsets,
)
from coordinator.kafka.raw_batches import PartitionReader, RawReadError, decode_batches, read_committed
from coordinator.kafka.raw_requests import RawClient, RawRequestError
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.testing.kafka_util import create_topic, produce, unique_name

PRODUCERS = (1, 2, 3)
#: One step of a partition's log: (producer, action, records) with action "txn" (a
#: transactional data batch), "plain" (an idempotent, non-transactional batch), "commit", "abort".
step = st.tuples(st.sampled_from(PRODUCERS), st.sampled_from(["txn", "plain", "commit", "abort"]), st.integers(1, 3))
#: The same with producer epochs: "fence" (a new epoch is handed out; the open transaction's
#: ABORT is never written), "zombie" (a data batch of an epoch fenced twice over), "commit2" (a
#: Kafka 4 commit: its marker carries the next epoch).
epoch_step = st.tuples(
    st.sampled_from(PRODUCERS),
    st.sampled_from(["txn", "plain", "commit", "abort", "fence", "zombie", "commit2"]),
    st.integers(1, 3),
)


def _log(steps: list[tuple[int, str, int]]) -> tuple[list[LogBatch], list[int], set[int]]:
    """The batches of ``steps`` and, by a direct model, the offsets a read_committed consumer
    returns and the producers left with an open transaction."""
    batches: list[LogBatch] = []
    offset = 0
    epoch: dict[int, int] = {}
    open_txn: dict[int, tuple[int, list[int]]] = {}  # producer -> (epoch, offsets)
    decided: dict[int, bool] = {}  # offset -> visible

    def end(pid: int, visible: bool) -> None:
        for o in open_txn.pop(pid, (0, []))[1]:
            decided[o] = visible

    for pid, action, n in steps:
        cur = epoch.get(pid, 0)
        if action == "fence":
            epoch[pid] = cur + 1
            continue
        if action in ("commit", "abort", "commit2"):
            kind = ControlKind.ABORT if action == "abort" else ControlKind.COMMIT
            marker = cur + 1 if action == "commit2" else cur
            epoch[pid] = marker
            batches.append(LogBatch(offset, offset, pid, marker, True, kind))
            if pid in open_txn:
                end(pid, kind is ControlKind.COMMIT and open_txn[pid][0] >= marker - 1)
            offset += 1
            continue
        at = cur - 2 if action == "zombie" else cur
        if at < 0:
            continue
        records = tuple(LogRecord(offset + i, None, f"{pid}-{offset + i}".encode()) for i in range(n))
        batches.append(LogBatch(offset, offset + n - 1, pid, at, action != "plain", None, records))
        offset += n
        if action == "plain":
            decided.update((r.offset, True) for r in records)
            continue
        if pid in open_txn and open_txn[pid][0] < at:
            end(pid, False)
        if pid in open_txn and open_txn[pid][0] > at:
            decided.update((r.offset, False) for r in records)
            continue
        open_txn.setdefault(pid, (at, []))[1].extend(r.offset for r in records)
    lso = min((offs[0] for _, offs in open_txn.values()), default=offset)
    visible = [o for o in sorted(decided) if decided[o] and o < lso]
    return batches, visible, set(open_txn)


@settings(max_examples=500, deadline=None)
@given(st.lists(epoch_step, max_size=40))
def test_the_filter_releases_exactly_the_committed_records_below_the_first_open_transaction(steps):
    batches, visible, still_open = _log(steps)
    flt = CommittedFilter()
    released = [r.offset for batch in batches for r in flt.feed(batch)]
    assert released == visible
    assert {t.producer_id for t in flt.open_transactions()} == still_open


@settings(max_examples=300, deadline=None)
@given(st.lists(step, max_size=40), st.lists(st.integers(1, 4), min_size=1, max_size=10))
def test_a_client_s_records_are_selected_by_the_markers_and_its_end_passes_only_what_is_dropped(steps, polls):
    """The source's use (aborted_records.py): a client returns every data record below the last
    stable offset, aborted ones included, in polls of a few records; the batches are fed only
    as far as each poll needs."""
    batches, visible, _still_open = _log(steps)
    open_from: dict[int, int] = {}
    for b in batches:
        if b.control is not None:
            open_from.pop(b.producer_id, None)
        elif b.transactional:
            open_from.setdefault(b.producer_id, b.base_offset)
    stable = min(open_from.values(), default=batches[-1].last_offset + 1 if batches else 0)
    returned = [r for b in batches for r in b.records if r.offset < stable]
    offsets = VisibleOffsets()
    fed = iter(batches)
    kept: list[int] = []
    end = 0
    i = 0
    while i < len(returned):
        poll = returned[i : i + polls[i % len(polls)]]
        i += len(poll)
        last = poll[-1].offset
        while offsets.decided_to <= last:
            offsets.feed(next(fed))
        got = offsets.select(poll, lambda r: r.offset)
        kept.extend(r.offset for r in got)
        new_end = offsets.end_after(last)
        assert new_end >= max(end, last + 1)
        assert not [o for o in visible if last < o < new_end], "a visible record was passed"
        end = new_end
    assert kept == visible
    for batch in fed:
        offsets.feed(batch)
    after = [o for o in visible if o >= end]
    assert offsets.end_after(end - 1) == max(end, min(after[0] if after else stable, stable))


@given(st.lists(step, max_size=40), st.data())
def test_a_visible_record_the_client_skipped_is_found(steps, data):
    """Step 7a: of every record below the decided offset, the client returns some (it skipped
    the others); the first skipped visible one at or after ``start`` is found, and nothing when
    only aborted records or markers were skipped."""
    batches, visible, _still_open = _log(steps)
    offsets = VisibleOffsets()
    for b in batches:
        offsets.feed(b)
    below = [r for b in batches for r in b.records if r.offset < offsets.decided_to]
    if not below:
        return
    returned = data.draw(st.lists(st.sampled_from(below), min_size=1, unique=True)) if len(below) > 1 else below
    returned.sort(key=lambda r: r.offset)
    start = data.draw(st.integers(0, returned[0].offset))
    got = {r.offset for r in returned}
    skipped = [o for o in visible if start <= o <= returned[-1].offset and o not in got]
    assert offsets.first_unreturned(returned, lambda r: r.offset, start) == (skipped[0] if skipped else None)


def test_records_held_behind_an_abandoned_transaction_are_bounded():
    flt = CommittedFilter(max_held=5)
    flt.feed(LogBatch(0, 0, 7, 3, True, None, (LogRecord(0, None, b"x"),)))
    flt.feed(LogBatch(1, 3, 8, 0, False, None, tuple(LogRecord(o, None, b"y") for o in range(1, 4))))
    with pytest.raises(HeldTooMany, match="producer 7 \\(epoch 3\\) from offset 0"):
        flt.feed(LogBatch(4, 5, 8, 0, False, None, (LogRecord(4, None, b"z"), LogRecord(5, None, b"z"))))


def test_offsets_held_for_a_client_are_bounded_though_their_records_are_not_kept():
    offsets = VisibleOffsets(max_held=5)
    offsets.feed(LogBatch(0, 0, 7, 3, True, None, (LogRecord(0, None, b"x"),)))
    offsets.feed(LogBatch(1, 3, 8, 0, False, None, tuple(LogRecord(o, None, b"y") for o in range(1, 4))))
    assert offsets.decided_to == 0
    with pytest.raises(HeldTooMany, match="producer 7 \\(epoch 3\\) from offset 0"):
        offsets.feed(LogBatch(4, 5, 8, 0, False, None, (LogRecord(4, None, b"z"), LogRecord(5, None, b"z"))))


def test_a_fenced_interval_without_its_abort_is_not_taken_into_the_next_commit():
    """The drill's case: a producer's transaction at epoch 1 is fenced twice (its ABORT missing)
    and a new incarnation at epoch 3 writes and commits; a write of epoch 1 after that is a
    zombie's; an ABORT of an older epoch does not end the newer transaction."""
    flt = CommittedFilter()
    rec = lambda o: (LogRecord(o, None, b"%d" % o),)  # noqa: E731
    assert flt.feed(LogBatch(0, 0, 5, 1, True, None, rec(0))) == []
    assert flt.feed(LogBatch(1, 1, 5, 3, True, None, rec(1))) == []  # ends epoch 1's as aborted
    assert flt.feed(LogBatch(2, 2, 5, 1, True, None, rec(2))) == []  # a zombie's: dropped
    assert flt.feed(LogBatch(3, 3, 5, 1, True, ControlKind.ABORT)) == []  # not epoch 3's marker
    assert [r.offset for r in flt.feed(LogBatch(4, 4, 5, 3, True, ControlKind.COMMIT))] == [1]
    assert flt.aborted_records == 2
    assert flt.feed(LogBatch(5, 5, 6, 0, True, None, rec(5))) == []
    assert flt.feed(LogBatch(6, 6, 6, 2, True, ControlKind.COMMIT)) == []  # a later epoch's commit
    assert flt.aborted_records == 3
    assert flt.decided_to == 7


def test_a_marker_of_a_producer_with_nothing_open_decides_nothing():
    flt = CommittedFilter()
    assert flt.feed(LogBatch(0, 0, 1, 0, True, ControlKind.COMMIT)) == []
    out = flt.feed(LogBatch(1, 1, 2, 0, False, None, (LogRecord(1, None, b"a"),)))
    assert [r.value for r in out] == [b"a"]


def test_the_reader_of_an_empty_partition_or_from_its_end_returns_nothing(bootstrap):
    topic = create_topic(bootstrap, unique_name("committed"), 1)
    settings_ = admin_settings(bootstrap, {}, request_timeout_ms=10_000, client_id="test-committed")
    empty = read_committed(settings_, topic, 0)
    assert (empty.records, empty.open_transactions, empty.aborted_records, empty.stop) == ((), (), 0, 0)
    plain = KafkaProducer(bootstrap_servers=bootstrap)
    plain.send(topic, b"x", partition=0)
    plain.flush()
    plain.close(timeout=5)
    at_end = read_committed(settings_, topic, 0, start=1)
    assert (at_end.records, at_end.open_transactions, at_end.aborted_records, at_end.stop) == ((), (), 0, 1)


def _transactional(bootstrap: str, tid: str) -> KafkaProducer:
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid, max_block_ms=10_000)
    producer.init_transactions()
    return producer


def test_the_reader_keeps_committed_records_and_drops_aborted_and_fenced_ones(bootstrap):
    topic = create_topic(bootstrap, unique_name("committed"), 1)
    tid = unique_name("tid")
    writer = _transactional(bootstrap, tid)
    writer.begin_transaction()
    for i in range(3):
        writer.send(topic, f"c{i}".encode(), partition=0)
    writer.commit_transaction()
    writer.begin_transaction()
    for i in range(2):
        writer.send(topic, f"a{i}".encode(), partition=0)
    writer.flush()  # the records reach the log before the abort
    writer.abort_transaction()
    plain = KafkaProducer(bootstrap_servers=bootstrap)
    plain.send(topic, b"plain", partition=0)
    plain.flush()
    writer.begin_transaction()
    writer.send(topic, b"zombie", partition=0)
    writer.flush()
    # A successor with the same transactional id fences the writer: its open transaction is aborted.
    successor = _transactional(bootstrap, tid)
    successor.begin_transaction()
    successor.send(topic, b"s0", partition=0)
    successor.commit_transaction()
    settings_ = admin_settings(bootstrap, {}, request_timeout_ms=10_000, client_id="test-committed")
    read = read_committed(settings_, topic, 0)
    assert [r.value for r in read.records] == [b"c0", b"c1", b"c2", b"plain", b"s0"]
    assert read.aborted_records == 3
    assert read.open_transactions == ()
    # An open transaction holds back every later record, as the last stable offset does.
    successor.begin_transaction()
    successor.send(topic, b"open", partition=0)
    successor.flush()
    plain.send(topic, b"after", partition=0)
    plain.flush()
    read = read_committed(settings_, topic, 0, start=read.stop)
    assert read.records == ()
    assert [(t.records, t.first_offset) for t in read.open_transactions] == [(1, read.stop - 2)]
    successor.commit_transaction()
    later = read_committed(settings_, topic, 0, start=read.stop - 2)
    assert [r.value for r in later.records] == [b"open", b"after"]
    for producer in (plain, successor):
        producer.close(timeout=5)
    writer.close(timeout=1)


def test_an_empty_partition_reads_as_nothing(bootstrap):
    topic = create_topic(bootstrap, unique_name("committed"), 1)
    settings_ = admin_settings(bootstrap, {}, request_timeout_ms=10_000, client_id="test-committed")
    read = read_committed(settings_, topic, 0)
    assert (read.records, read.open_transactions, read.stop) == ((), (), 0)


def test_the_reader_names_a_partition_that_does_not_exist(bootstrap):
    topic = create_topic(bootstrap, unique_name("committed"), 1)
    settings_ = admin_settings(bootstrap, {}, request_timeout_ms=10_000, client_id="test-committed")
    with pytest.raises(RawReadError, match=f"{topic}:3 does not exist"):
        read_committed(settings_, topic, 3)


def test_a_read_s_deadline_is_moved_on_by_each_batch_read_and_a_raise_stops_it(bootstrap):
    """What a restore builds on (``partitioned_tables.py``): the deadline bounds progress, not length."""
    topic = create_topic(bootstrap, unique_name("committed"), 1)
    produce(bootstrap, topic, (b"v%d" % i for i in range(5)), partition=0, single_record_batches=True)
    settings_ = admin_settings(bootstrap, {}, request_timeout_ms=10_000, client_id="test-committed")
    seen: list[int] = []

    def moved_on(client: RawClient) -> None:
        seen.append(len(seen))
        client.deadline = time.monotonic() + 30

    def expired(client: RawClient) -> None:
        seen.append(len(seen))
        client.deadline = time.monotonic() - 1  # as if this batch had taken the whole budget

    with RawClient(settings_, time.monotonic() + 30) as client:
        read = PartitionReader(client, topic, 0, max_bytes=1).read(0, None, on_batch=moved_on)
    assert [r.value for r in read.records] == [b"v%d" % i for i in range(5)]
    assert seen == list(range(5))  # once per batch (one record each, one batch per fetch)
    seen.clear()
    with RawClient(settings_, time.monotonic() + 30) as client, pytest.raises(RawRequestError, match="deadline"):
        PartitionReader(client, topic, 0, max_bytes=1).read(0, None, on_batch=expired)
    assert seen == [0]

    def cancel(client: RawClient) -> None:
        raise LookupError("cancelled")

    with RawClient(settings_, time.monotonic() + 30) as client, pytest.raises(LookupError):
        PartitionReader(client, topic, 0).read(0, None, on_batch=cancel)


def _raw_batch(values: list[bytes]) -> bytes:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    for i, value in enumerate(values):
        builder.append(timestamp=1000 + i, key=None, value=value)
    builder.close()
    return bytes(builder.buffer())


def test_the_decoder_refuses_a_batch_whose_bytes_were_altered():
    raw = bytearray(_raw_batch([b"v0", b"v1"]))
    assert [r.value for b in decode_batches(bytes(raw)) for r in b.records] == [b"v0", b"v1"]
    raw[-1] ^= 0xFF  # inside the CRC-covered records
    with pytest.raises(RawReadError, match="fails its CRC"):
        decode_batches(bytes(raw))


def test_the_decoder_leaves_out_a_torn_last_batch():
    whole = _raw_batch([b"a"])
    torn = _raw_batch([b"b", b"c"])
    batches = decode_batches(whole + torn[: len(torn) // 2])
    assert [r.value for b in batches for r in b.records] == [b"a"]
