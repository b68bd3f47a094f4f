"""The source's own ``read_committed``, for brokers whose own cannot be trusted.

A ``read_committed`` consumer relies on the broker twice: each fetch lists the aborted
transactions in its range (the client drops their records), and nothing at or past the last
stable offset (LSO, the first offset of a transaction still open) is returned. The test broker
(tansu) fails both: both clients return aborted records there, and its LSO can stall for good
(``docs/clients.md`` says when). A source with the consumer property
``crkafka.filter.aborted=true`` (only together with ``isolation.level=read_committed``:
``cr_consumer/kafka/property_rules.py``) therefore polls with ``read_uncommitted`` (the
operator's config sets it for the client) and decides each polled record from the partition's
own batches and control markers, before the records are queued (the operator's event thread,
``cr_consumer/operator/record_intake.py``):

1. Per partition, a read starts at the offset of the first record the client returned: a
   ``VisibleOffsets`` (``coordinator/kafka/committed_filter.py``, steps 7-8) fed with the
   partition's batches; it keeps their offsets only (the client delivers the records).
2. Before a poll's records of the partition are handed on, the log is read on from where the
   read stopped, with raw Fetch requests (``raw_batches.PartitionReader``: ``read_uncommitted``,
   CRC checked, batch headers and markers decoded but not the data records, at most
   :data:`FETCH_MAX_BYTES` a response, the whole step bounded by :data:`DECIDE_TIMEOUT_S`),
   one whole response at a time, until the filter has decided past the last of those records
   (``decided_to``), or one response past them decided nothing more (a transaction still open:
   its marker is not written yet). At the log's end a fetch waits in the broker up to
   ``raw_batches.FETCH_MAX_WAIT_MS`` for new data, which paces the polls while a transaction
   stays open. Batches behind open transactions are held, at most ``max_held`` offsets
   (``HeldTooMany``).
3. A decided record is handed on when a visible batch (committed, or not transactional) covers
   its offset (``VisibleOffsets.select``); any other is of an aborted transaction and is dropped
   (counted in :attr:`AbortedRecordFilter.dropped`).
4. Records at or past ``decided_to`` (the LSO of what was read) are not handed on: the partition
   is seeked back to ``decided_to`` (:attr:`Filtered.rewind`, done by the operator), and the
   client returns them again at a later poll, when their marker may be read.
5. The partition's end (:attr:`Filtered.end`, ``VisibleOffsets.end_after``) is the offset the
   operator records once the records are submitted, commits at a drain and claims at a
   checkpoint: it moves past dropped aborted records and control markers (never past
   ``decided_to``), so a reset to a checkpoint never replays them. None when the poll decided
   nothing new.
6. The client can skip records: a fetch answer of a partition being written can lack a batch
   the broker has not stored yet (the test broker, ``raw_batches.py`` step 2), and the client
   goes on past it. So every offset from where the client was to the last record handed on
   that a visible batch covers must have come with a record (``VisibleOffsets.first_unreturned``);
   the first that did not is where the partition is seeked back to, and only the records before
   it are handed on (counted in :attr:`AbortedRecordFilter.skips`). Offsets the client jumps over
   with no visible record there (control markers, aborted records) are passed as before.
7. Every seek the operator makes (a reset, an assignment) comes with a new reset epoch
   (``record_intake.py``): a poll of a new epoch forgets every read, and each partition's next
   records start a new one (1), which is always right: a read may start anywhere, a transaction
   whose first records lie before it is decided by its marker all the same. Within an epoch a
   partition's read goes on from where it stopped, however far the client moved on (records
   going back past what was handed on start a new read all the same). Partitions no longer
   assigned are forgotten.

Off by default: a real cluster lists aborted transactions and keeps its LSO, so its consumers
need none of this, and this costs a second read of the log (every byte fetched twice, every
batch's header and CRC checked; figures in docs/clients.md).
The raw reads use a connection of their own (kafka-python's admin client, ``raw_requests``),
so the filter works whichever client the source polls with: kafka-python or librdkafka.

Memory: per partition, the offsets of the batches held behind an open transaction (bounded, 2)
and the ranges of visible batches read ahead of the consumer (at most one fetch response past
the poll's last record).
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Collection, Mapping
from typing import Any

import attrs

from coordinator.kafka.committed_filter import DEFAULT_MAX_HELD, VisibleOffsets
from coordinator.kafka.raw_batches import PartitionReader
from coordinator.kafka.raw_requests import RawClient
from cr_consumer.kafka.client import KafkaRecord, TopicPartition
from cr_consumer.kafka.kafka_python.admin import admin_settings

log = logging.getLogger(__name__)

#: Bytes asked per raw Fetch: decoding a response holds the event thread (pure Python, about
#: 1-2 us a record), so a 1 MB response keeps that stall as short as the consumer's own
#: (``DEFAULT_FETCH_MAX_BYTES`` of the operator's config) while a drain waits.
FETCH_MAX_BYTES = 1 << 20
#: Bound on step 2 for one poll's records of a partition (every raw request included): a broker
#: that stops answering would otherwise hold the event thread, and every drain behind it.
DECIDE_TIMEOUT_S = 10.0
#: Bound on one raw request of the filter (the admin client's request timeout): a broker that
#: stops answering fails the poll within DECIDE_TIMEOUT_S, not after a consumer's default 305 s.
REQUEST_TIMEOUT_MS = 5_000


@attrs.frozen
class Filtered:
    """One partition's records of a poll that are visible (step 3), the end past them (step 5)
    and where the client must read again (step 4)."""

    records: list[KafkaRecord]
    #: None: nothing newly decided (no batch to queue).
    end: int | None
    #: The offset to seek the partition to (its first undecided record), or None.
    rewind: int | None = None


def _offset(record: KafkaRecord) -> int:
    return record.offset


@attrs.define
class _PartitionLog:
    """Step 1's read of one partition."""

    reader: PartitionReader
    offsets: VisibleOffsets
    #: The next offset to fetch.
    read_to: int
    #: The offset the client returns next: past the last record handed on or dropped, or the
    #: offset it was seeked back to (step 4).
    client_next: int = 0


class AbortedRecordFilter:
    """Steps 1-7 of the module docstring for every partition one consumer polls. Used by one
    thread (the operator's event thread, which polls); :meth:`close` on that thread too."""

    def __init__(self, settings: Mapping[str, Any], *, max_held: int = DEFAULT_MAX_HELD) -> None:
        """``settings`` from ``admin.admin_settings`` (bootstrap, security, request timeout):
        :func:`for_consumer` makes them from a consumer's properties."""
        self._settings = dict(settings)
        self._max_held = max_held
        self._client: RawClient | None = None
        self._logs: dict[TopicPartition, _PartitionLog] = {}
        #: Records dropped as aborted (step 3), since the filter was made.
        self.dropped = 0
        #: Polls whose records of a partition were held back behind an open transaction (step 4).
        self.holds = 0
        #: Polls after which a partition was seeked back to a record the client skipped (step 6).
        self.skips = 0
        #: The reset epoch of the last poll (step 7).
        self._epoch: int | None = None

    def filter(
        self, records: Mapping[TopicPartition, list[KafkaRecord]], assigned: Collection[TopicPartition], epoch: int
    ) -> dict[TopicPartition, Filtered]:
        """Steps 2-7 for one poll's records (each partition's in offset order, as ``poll`` returns
        them); ``assigned``: the consumer's partitions now, ``epoch``: the operator's reset epoch
        the records were polled in (step 7 forgets the reads of other partitions and epochs)."""
        if epoch != self._epoch:
            self._logs.clear()
            self._epoch = epoch
        for gone in [tp for tp in self._logs if tp not in assigned]:
            del self._logs[gone]
        out: dict[TopicPartition, Filtered] = {}
        for tp, recs in records.items():
            if recs:
                out[tp] = self._partition(tp, recs)
        return out

    def close(self) -> None:
        """Close the raw connection and forget every read (on the polling thread, after the consumer)."""
        client, self._client = self._client, None
        self._logs.clear()
        if client is not None:
            client.close()

    def _partition(self, tp: TopicPartition, recs: list[KafkaRecord]) -> Filtered:
        first, last = recs[0].offset, recs[-1].offset
        part = self._logs.get(tp)
        if part is None or first < part.client_next:
            part = self._logs[tp] = self._new_log(tp, first)
        self._decide_past(part, last)
        # a batch that began before the read's first record may hold it: never seek back past it
        decided = max(part.offsets.decided_to, first)
        rewind = None
        if last >= decided:  # step 4
            recs = recs[: bisect.bisect_left(recs, decided, key=_offset)]
            rewind = decided
            self.holds += 1
        skipped = part.offsets.first_unreturned(recs, _offset, part.client_next)
        if skipped is not None:  # step 6
            log.warning("%s: the client skipped the record at %d: read again from there", tp, skipped)
            recs = recs[: bisect.bisect_left(recs, skipped, key=_offset)]
            rewind = skipped
            self.skips += 1
        if not recs:  # each was cut off above (step 4 or 6), which set the rewind
            assert rewind is not None
            part.client_next = rewind
            return Filtered([], None, rewind)
        taken = recs[-1].offset
        kept = part.offsets.select(recs, _offset)
        self.dropped += len(recs) - len(kept)
        end = part.offsets.end_after(taken)
        part.client_next = rewind if rewind is not None else taken + 1
        return Filtered(kept, end, rewind)

    def _new_log(self, tp: TopicPartition, start: int) -> _PartitionLog:
        if self._client is None:
            self._client = RawClient(self._settings, time.monotonic() + DECIDE_TIMEOUT_S)
        reader = PartitionReader(self._client, tp.topic, tp.partition, max_bytes=FETCH_MAX_BYTES, with_records=False)
        return _PartitionLog(reader, VisibleOffsets(self._max_held), start, client_next=start)

    def _decide_past(self, log: _PartitionLog, last: int) -> None:
        """Step 2."""
        log.reader.client.deadline = time.monotonic() + DECIDE_TIMEOUT_S
        while log.offsets.decided_to <= last:
            past = log.read_to > last
            batches, _high_watermark = log.reader.fetch(log.read_to)  # none only at the high watermark
            for batch in batches:
                log.offsets.feed(batch)
            if batches:
                log.read_to = max(log.read_to, log.offsets.next_offset)
            if past or not batches:
                return  # an open transaction: its marker is not in the log yet (step 4)


def for_consumer(bootstrap_servers: str, properties: Mapping[str, object], client_id: str) -> AbortedRecordFilter:
    """A filter reading the cluster of a consumer with ``properties`` (its connection and
    security settings), each raw request bounded by :data:`REQUEST_TIMEOUT_MS`."""
    settings = admin_settings(bootstrap_servers, properties, request_timeout_ms=REQUEST_TIMEOUT_MS, client_id=client_id)
    return AbortedRecordFilter(settings)


__all__ = [
    "DECIDE_TIMEOUT_S",
    "FETCH_MAX_BYTES",
    "REQUEST_TIMEOUT_MS",
    "AbortedRecordFilter",
    "Filtered",
    "for_consumer",
]
