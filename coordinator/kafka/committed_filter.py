"""What a ``read_committed`` consumer must see, decided from the log itself.

A broker hides aborted records from ``isolation.level=read_committed`` consumers by sending,
with each fetch, the list of aborted transactions in the range. The test broker (tansu) sends an
empty list, so kafka-python and librdkafka alike return aborted records there. Anything that
must trust "committed" (a verifier of transactional output, a replay of a log written in
transactions, a source on that broker) therefore decides from the record batches and the
control markers in the partition, which every broker writes:

1. Records are fed batch by batch in offset order (``feed``), as a fetch returns them.
2. A non-transactional record is decided at once (visible).
3. A transactional data batch opens, or continues, its producer's transaction: its records are
   held. A producer has at most one open transaction per partition.
4. A control batch (COMMIT or ABORT) of that producer decides the held records: COMMIT makes
   them visible, ABORT drops them. A marker of a producer with nothing open (a repeated marker,
   or a transaction that wrote nothing here) decides nothing.
4a. Producer epochs: a transaction is committed only by a COMMIT of its own epoch ``e`` or of
   ``e + 1`` (Kafka 4's transactions bump the epoch at the marker, KIP-890). The broker fences an
   epoch when it hands out a newer one and aborts the fenced epoch's open transaction, so:
   a COMMIT of a later epoch, or a data batch of a later epoch, ends the open transaction as
   aborted (its own marker is missing); a data batch of an earlier epoch than the open
   transaction's is a fenced producer's write, dropped at once; a marker of an earlier epoch
   decides nothing. A real broker never writes such a log (the fence writes the ABORT first and
   refuses the fenced epoch's writes); the filter does not rely on that, so a broker that loses a
   marker, or stores a write that raced the fence, cannot make a fenced interval's records look
   committed by the producer's next transaction.
5. Visible records are released in offset order up to the first record still undecided: the
   last stable offset (LSO) of a real broker. An open transaction therefore holds back every
   later record of the partition, committed ones of other producers included, exactly as a
   ``read_committed`` consumer of a real cluster is held.
6. At most ``max_held`` offsets of data batches wait behind an open transaction (the batches'
   offset ranges are counted, so a caller that feeds batches stripped of their records is
   bounded too); one more raises ``HeldTooMany`` naming the producer and offset, rather than
   growing without bound.

The filter works batch by batch (a batch belongs to one producer and at most one transaction,
so its records share one fate): :meth:`CommittedFilter.feed_batches` releases whole visible
batches and :attr:`CommittedFilter.decided_to` says how far the log is decided (every offset
below it that no released batch covers is dropped: an aborted record or a control marker);
:meth:`CommittedFilter.feed` releases their records (the committed reader,
``raw_batches.py``).

A consumer that gets its records from a client rather than from the batches (the source's filter
of aborted records, ``kafka_python/aborted_records.py``) asks :class:`VisibleOffsets`, fed with
the partition's batches, which it strips of their records (it keeps offsets only):

7. :meth:`VisibleOffsets.select` keeps the records (in offset order, all below ``decided_to``)
   that a released visible batch covers; every other one is of an aborted transaction.
7a. :meth:`VisibleOffsets.first_unreturned` finds an offset a visible batch covers that the
   client returned no record for: a client reading a partition being written can skip a batch
   the broker had not stored yet when it answered (the test broker, ``raw_batches.py`` step 2).
8. :meth:`VisibleOffsets.end_after` is where a consumer that has taken every record up to
   ``last`` goes on from: past ``last``, and on over every offset without a visible record, up
   to the next visible batch or ``decided_to``. It never goes back (a record at an offset it
   passed is aborted, and the consumer drops it when the client returns it).

Pure: no I/O; ``coordinator.kafka.raw_batches`` fetches the batches.
"""

from __future__ import annotations

import bisect
import enum
from collections import deque
from collections.abc import Callable
from typing import TypeVar

import attrs

#: Records held behind one open transaction before ``feed`` refuses more (bounds memory when a
#: transaction is abandoned: the test broker never aborts one by its timeout).
DEFAULT_MAX_HELD = 1_000_000


class ControlKind(enum.Enum):
    """The two control markers a transaction coordinator writes into a data partition."""

    ABORT = 0
    COMMIT = 1


@attrs.frozen
class LogRecord:
    """One data record as stored: offset, key, value, headers and timestamp (ms)."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int = -1


@attrs.frozen
class LogBatch:
    """One record batch: producer identity, transactional and control flags, its records.

    ``control`` is set on a control batch (and ``records`` is then empty);
    ``last_offset`` covers the batch's whole offset range, control records included.
    """

    base_offset: int
    last_offset: int
    producer_id: int
    producer_epoch: int
    transactional: bool
    control: ControlKind | None = None
    records: tuple[LogRecord, ...] = ()


class HeldTooMany(RuntimeError):
    """More records than allowed wait behind one open transaction."""


@attrs.frozen
class OpenTransaction:
    """A transaction with records in the partition and no marker yet."""

    producer_id: int
    producer_epoch: int
    first_offset: int
    records: int


@attrs.define
class _Txn:
    epoch: int
    first_offset: int
    records: int = 0
    committed: bool = False


@attrs.define
class _Held:
    batch: LogBatch
    txn: _Txn | None


def _span(batch: LogBatch) -> int:
    """Offsets a data batch takes (its records, or what they were before a caller stripped them)."""
    return batch.last_offset - batch.base_offset + 1


@attrs.define
class CommittedFilter:
    """Feeds on one partition's batches; releases what ``read_committed`` must return."""

    max_held: int = DEFAULT_MAX_HELD
    _open: dict[int, _Txn] = attrs.field(factory=dict, init=False)
    _held: deque[_Held] = attrs.field(factory=deque, init=False)
    _held_offsets: int = attrs.field(default=0, init=False)
    aborted_records: int = attrs.field(default=0, init=False)
    next_offset: int = attrs.field(default=0, init=False)

    def feed(self, batch: LogBatch) -> list[LogRecord]:
        """Steps 2-5 for one batch; returns the records this batch made visible, in order."""
        return [record for released in self.feed_batches(batch) for record in released.records]

    def feed_batches(self, batch: LogBatch) -> list[LogBatch]:
        """Steps 2-5 for one batch; returns the data batches this batch made visible, in order."""
        if batch.last_offset < batch.base_offset:
            raise ValueError(f"batch at {batch.base_offset} ends before it starts ({batch.last_offset})")
        if batch.control is not None:
            self._decide(batch.producer_id, batch.control, batch.producer_epoch)
        elif batch.transactional:
            txn = self._open.get(batch.producer_id)
            if txn is not None and batch.producer_epoch > txn.epoch:  # step 4a: txn was fenced
                self._decide(batch.producer_id, ControlKind.ABORT, batch.producer_epoch)
                txn = None
            if txn is not None and batch.producer_epoch < txn.epoch:  # step 4a: a fenced producer's write
                self.aborted_records += len(batch.records)
            else:
                if txn is None:
                    txn = self._open[batch.producer_id] = _Txn(batch.producer_epoch, batch.base_offset)
                txn.records += len(batch.records)
                self._hold(batch, txn)
        else:
            self._hold(batch, None)
        self.next_offset = max(self.next_offset, batch.last_offset + 1)
        return self._release()

    def open_transactions(self) -> list[OpenTransaction]:
        """Transactions with records read and no marker yet, oldest first."""
        return sorted(
            (OpenTransaction(pid, txn.epoch, txn.first_offset, txn.records) for pid, txn in self._open.items()),
            key=lambda t: t.first_offset,
        )

    @property
    def held(self) -> int:
        """Offsets of data batches read but not released (undecided, or behind an undecided one)."""
        return self._held_offsets

    @property
    def decided_to(self) -> int:
        """The first offset not decided yet (the last stable offset of what was fed): below it,
        every offset is in a released batch or dropped."""
        return self._held[0].batch.base_offset if self._held else self.next_offset

    def _hold(self, batch: LogBatch, txn: _Txn | None) -> None:
        span = _span(batch)
        if self._held_offsets + span > self.max_held and self._open:
            first = min(self._open.items(), key=lambda item: item[1].first_offset)
            raise HeldTooMany(
                f"more than {self.max_held} records wait behind the open transaction of producer"
                f" {first[0]} (epoch {first[1].epoch}) from offset {first[1].first_offset}"
            )
        self._held.append(_Held(batch, txn))
        self._held_offsets += span

    def _decide(self, producer_id: int, kind: ControlKind, epoch: int) -> None:
        txn = self._open.get(producer_id)
        if txn is None or epoch < txn.epoch:  # step 4a: an earlier epoch's marker is not this one's
            return
        del self._open[producer_id]
        if kind is ControlKind.COMMIT and epoch <= txn.epoch + 1:
            txn.committed = True
            return
        kept = deque(held for held in self._held if held.txn is not txn)
        self.aborted_records += txn.records
        self._held_offsets = sum(_span(held.batch) for held in kept)
        self._held = kept

    def _release(self) -> list[LogBatch]:
        out: list[LogBatch] = []
        while self._held:
            txn = self._held[0].txn
            if txn is not None and not txn.committed:
                break
            batch = self._held.popleft().batch
            self._held_offsets -= _span(batch)
            out.append(batch)
        return out


R = TypeVar("R")


@attrs.define
class VisibleOffsets:
    """Steps 7-8: one partition's decided offsets, for a consumer whose client delivers the records."""

    max_held: int = DEFAULT_MAX_HELD
    _filter: CommittedFilter = attrs.field(init=False)
    #: ``[first, last]`` offsets of released visible batches not passed yet, in order, adjacent merged.
    _visible: deque[list[int]] = attrs.field(factory=deque, init=False)
    _end: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        self._filter = CommittedFilter(self.max_held)

    def feed(self, batch: LogBatch) -> None:
        """One batch of the partition, in offset order (its records are not kept)."""
        for visible in self._filter.feed_batches(attrs.evolve(batch, records=())):
            if self._visible and self._visible[-1][1] + 1 >= visible.base_offset:
                self._visible[-1][1] = max(self._visible[-1][1], visible.last_offset)
            else:
                self._visible.append([visible.base_offset, visible.last_offset])

    @property
    def next_offset(self) -> int:
        """The offset after the last batch fed."""
        return self._filter.next_offset

    @property
    def decided_to(self) -> int:
        """The first offset not decided yet (``CommittedFilter.decided_to``)."""
        return self._filter.decided_to

    def select(self, records: list[R], offset: Callable[[R], int]) -> list[R]:
        """Step 7 for ``records`` in offset order, every one below ``decided_to`` (the list itself
        when a visible batch covers them all)."""
        if not records:
            return records
        first, last = offset(records[0]), offset(records[-1])
        if last >= self.decided_to:
            raise ValueError(f"the record at {last} is not decided yet (decided to {self.decided_to})")
        spans = self._visible
        while spans and spans[0][1] < first:
            spans.popleft()
        if spans and spans[0][0] <= first and last <= spans[0][1]:
            return records
        kept: list[R] = []
        i, n = 0, len(records)
        for lo, hi in spans:
            if i == n or lo > last:
                break
            i = bisect.bisect_left(records, lo, lo=i, key=offset)
            j = bisect.bisect_right(records, hi, lo=i, key=offset)
            kept.extend(records[i:j])
            i = j
        return kept

    def first_unreturned(self, records: list[R], offset: Callable[[R], int], start: int) -> int | None:
        """Step 7a: the first offset from ``start`` up to the last of ``records`` (in offset order,
        every one below ``decided_to``) that a released visible batch covers and no record has, or
        None. Offsets of a visible data batch are dense, so such an offset is a committed record
        the client skipped (a fetch answer that lacked its batch)."""
        if not records:
            return None
        last = offset(records[-1])
        i = 0
        for lo, hi in self._visible:
            if lo > last:
                break
            a, b = max(lo, start), min(hi, last)
            if a > b:
                continue
            i = bisect.bisect_left(records, a, lo=i, key=offset)
            j = bisect.bisect_right(records, b, lo=i, key=offset)
            if j - i == b - a + 1:
                continue  # distinct offsets in order: every one of [a, b] is there
            for expected, record in zip(range(a, b + 1), records[i:j], strict=False):
                if offset(record) != expected:
                    return expected
            return a + (j - i)
        return None

    def end_after(self, last: int) -> int:
        """Step 8, once every record up to ``last`` (below ``decided_to``) was taken."""
        spans = self._visible
        while spans and spans[0][1] <= last:
            spans.popleft()
        decided = self.decided_to
        nxt = min(spans[0][0], decided) if spans else decided
        self._end = max(self._end, last + 1, nxt)
        return self._end
