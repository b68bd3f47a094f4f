"""A partition's record batches as stored, control markers included, through raw Fetch requests.

Consumers (both clients) skip control batches and, on the test broker, cannot hide aborted
records (``coordinator/kafka/committed_filter.py`` says why). This reader gives the filter what
it needs:

1. :func:`read_committed` opens a ``RawClient`` (``settings`` from ``admin.admin_settings``:
   bootstrap, security, request timeout) and asks the cluster's metadata for the partition's
   leader (a missing topic or partition raises ``RawReadError``). A caller reading several
   partitions in one budget opens the client itself, lists the topic's partitions with
   :func:`partition_leaders` and calls :func:`read_committed_with` for each.
2. It sends ``Fetch`` requests (``read_uncommitted``, so the broker filters nothing) to the
   leader from ``start``, each bounded by the request timeout, and decodes every batch with
   kafka-python's ``MemoryRecords`` (CRC checked): producer id and epoch, the transactional and
   control flags, the records. Offsets below the high watermark are dense (every one is in a
   data or control batch: none of the topics read here is compacted), but the test broker moves
   its high watermark before it stores the batch of a produce in flight, and stores concurrent
   produces and markers in any order: a response can lack the batch at the fetch offset (seen:
   a fetch at 1017 with nothing stored yet below 1086) or one between two it holds (seen: 6605
   then 6608, with six transactional producers on the partition; 6606-6607 stored a moment
   later). So a response is used only up to its first hole (:func:`stored_run`): a reader that
   went on past it would never see that batch, and a marker or data batch missed there leaves
   a transaction open for ever or drops committed records as aborted. A response with nothing
   before its first hole, at an offset below the high watermark, is asked again after
   :data:`EMPTY_FETCH_RETRY_S`, until the deadline (a hole that never fills: ``RawReadError``).
3. Each batch goes through a ``CommittedFilter``; reading stops at the high watermark of the
   first response (or ``end`` if given), so a producer still writing cannot keep it going, or
   when ``deadline_s`` passes (``RawRequestError``: a read never hangs).
4. The result holds the committed records in offset order, the transactions still open below
   the stop offset, and how many records were aborted.

:class:`PartitionReader` is the reader itself: :meth:`PartitionReader.fetch` gives one response's
batches at a time, for the source's filter of aborted records (``aborted_records.py``), which
feeds its own ``CommittedFilter`` as the consumer moves on.

:func:`transaction_marker` reads the same batches for one producer's marker (the resolver's
answer to "was this prepared transaction committed?", ``transactions.py``).

Requests go through ``raw_requests.RawClient`` (bounded; kafka-python has no public call for them).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatch

from coordinator.kafka.committed_filter import (
    CommittedFilter,
    ControlKind,
    LogBatch,
    LogRecord,
    OpenTransaction,
)
from coordinator.kafka.raw_requests import RawClient, RawRequestError, error_name

#: Bytes asked per Fetch; a batch larger than this is still returned whole by the broker.
FETCH_MAX_BYTES = 8 << 20
#: How long the broker may wait for data at the high watermark (never reached: the read stops there).
FETCH_MAX_WAIT_MS = 100
#: The read's whole budget by default: bounds a read of a broker that stops answering.
DEFAULT_DEADLINE_S = 60.0
#: Pause before asking again for batches the high watermark already counts (step 2): a produce
#: in flight on the test broker stores its batch milliseconds after it moved the watermark.
EMPTY_FETCH_RETRY_S = 0.02


class RawReadError(RawRequestError):
    """The partition could not be read to its stop offset (unknown, no leader, broker error, deadline)."""


@attrs.frozen
class CommittedRead:
    """Step 4: what ``read_committed`` consumers must see in ``[start, stop)``."""

    records: tuple[LogRecord, ...]
    open_transactions: tuple[OpenTransaction, ...]
    aborted_records: int
    stop: int


def read_committed(
    settings: Mapping[str, Any],
    topic: str,
    partition: int,
    start: int = 0,
    end: int | None = None,
    *,
    deadline_s: float = DEFAULT_DEADLINE_S,
) -> CommittedRead:
    """Steps 1-4 for one partition."""
    with RawClient(settings, time.monotonic() + deadline_s) as client:
        return read_committed_with(client, topic, partition, start, end)


def transaction_marker(
    settings: Mapping[str, Any],
    topic: str,
    partition: int,
    start: int,
    producer_id: int,
    *,
    deadline_s: float = DEFAULT_DEADLINE_S,
) -> ControlKind | None:
    """The outcome of the transaction of ``producer_id`` whose records start at ``start``: the
    first control marker of that producer at or after ``start`` (a producer's transactions on a
    partition follow one another, so that marker ends this one), or None when there is none yet
    below the high watermark (still open, or its marker not written yet)."""
    with RawClient(settings, time.monotonic() + deadline_s) as client:
        for batch in PartitionReader(client, topic, partition).batches(start, None):
            if batch.control is not None and batch.producer_id == producer_id and batch.base_offset >= start:
                return batch.control
    return None


@attrs.define
class PartitionReader:
    """One partition's batches through raw Fetch requests on an open client: :meth:`fetch` gives
    one response's batches (a caller that feeds a filter as it goes, ``aborted_records.py``),
    :meth:`batches` every batch up to a stop offset (steps 2-3)."""

    client: RawClient
    topic: str
    partition: int
    #: Bytes asked per Fetch (a batch larger than this is still returned whole by the broker).
    max_bytes: int = FETCH_MAX_BYTES
    #: Decode the data records (``decode_batches``); False: offsets and markers only.
    with_records: bool = True
    stop: int | None = None  # where the last ``batches`` ended
    _leader_id: int | None = None  # the partition's leader, looked up at the first fetch

    def _request(self, request: Any, node_id: int | None = None) -> Any:
        return self.client.request(request, node_id, f"reading {self.topic}:{self.partition}")

    def _leader(self) -> int:
        if self._leader_id is None:
            leader = partition_leaders(self.client, self.topic).get(self.partition)
            if leader is None:
                raise RawReadError(f"{self.topic}:{self.partition} does not exist")
            if leader < 0:
                raise RawReadError(f"{self.topic}:{self.partition} has no leader")
            self._leader_id = leader
        return self._leader_id

    def fetch(self, offset: int) -> tuple[list[LogBatch], int]:
        """One Fetch at ``offset``: the response's complete batches from the one holding
        ``offset`` up to the first hole (:func:`stored_run`), and the partition's high watermark;
        never empty below the high watermark (step 2: asked again until the client's deadline,
        then ``RawReadError``). A refused fetch (the leader moved) asks the metadata for the
        leader again, once."""
        while True:
            try:
                part = self._fetch(self._leader(), offset)
            except _FetchRefused:
                self._leader_id = None
                part = self._fetch(self._leader(), offset, retry=False)
            batches = stored_run(decode_batches(part.records, with_records=self.with_records), offset)
            high_watermark = int(part.high_watermark)
            if batches or offset >= high_watermark:
                return batches, high_watermark
            if time.monotonic() + EMPTY_FETCH_RETRY_S > self.client.deadline:
                raise RawReadError(
                    f"{self.topic}:{self.partition}: the fetch at {offset} returned no batch below the high"
                    f" watermark {high_watermark} until the read's deadline"
                )
            time.sleep(EMPTY_FETCH_RETRY_S)

    def batches(self, start: int, end: int | None) -> Iterator[LogBatch]:
        """Steps 2-3's fetch loop: every batch from the one holding ``start`` up to the stop offset
        (``self.stop``, known from the first response on)."""
        offset = start
        self.stop = end
        while self.stop is None or offset < self.stop:
            found, high_watermark = self.fetch(offset)
            if self.stop is None:
                self.stop = high_watermark
            stop = self.stop
            if offset >= stop:
                break  # an empty partition, or a read from its high watermark: nothing to read
            before = offset
            for batch in found:
                if batch.base_offset >= stop:
                    offset = stop  # nothing is stored between offset and stop
                    break
                yield batch
                offset = batch.last_offset + 1
            if offset == before:
                raise RawReadError(
                    f"{self.topic}:{self.partition}: the fetch at {offset} returned no batch below {stop}"
                )

    def read(
        self, start: int, end: int | None, *, on_batch: Callable[[RawClient], None] | None = None
    ) -> CommittedRead:
        flt = CommittedFilter()
        records: list[LogRecord] = []
        for batch in self.batches(start, end):
            assert self.stop is not None  # set before the first batch
            records.extend(r for r in flt.feed(batch) if start <= r.offset < self.stop)
            if on_batch is not None:
                on_batch(self.client)
        stop = start if self.stop is None else self.stop
        return CommittedRead(tuple(records), tuple(flt.open_transactions()), flt.aborted_records, stop)

    def _fetch(self, leader: int, offset: int, *, retry: bool = True) -> Any:
        partition = FetchRequest.FetchTopic.FetchPartition(
            partition=self.partition, fetch_offset=offset, partition_max_bytes=self.max_bytes
        )
        request = FetchRequest(
            max_wait_ms=FETCH_MAX_WAIT_MS,
            min_bytes=1,
            max_bytes=self.max_bytes,
            isolation_level=0,
            topics=[FetchRequest.FetchTopic(topic=self.topic, partitions=[partition])],
            max_version=4,
        )
        for topic in self._request(request, leader).responses:
            for part in topic.partitions:
                if part.partition_index == self.partition:
                    if part.error_code:
                        message = f"fetch {self.topic}:{self.partition} at {offset}: {error_name(part.error_code)}"
                        raise _FetchRefused(message) if retry else RawReadError(message)
                    return part
        raise RawReadError(f"fetch {self.topic}:{self.partition}: no answer for the partition")


class _FetchRefused(RawReadError):
    """A fetch answered with an error code (the leader may have moved: asked again once)."""


def stored_run(batches: list[LogBatch], offset: int) -> list[LogBatch]:
    """Step 2's rule for one response (its batches in offset order): the batches that cover
    every offset from ``offset`` on without a hole, starting with the one holding ``offset``;
    batches wholly before ``offset`` are left out, and so is everything from the first offset
    no batch covers (empty when the response lacks the batch at ``offset`` itself)."""
    run: list[LogBatch] = []
    expected = offset
    for batch in batches:
        if batch.last_offset < expected:
            continue
        if batch.base_offset > expected:
            break  # a hole: a batch the broker has not stored yet
        run.append(batch)
        expected = batch.last_offset + 1
    return run


def decode_batches(raw: bytes | None, *, with_records: bool = True) -> list[LogBatch]:
    """Step 2's decoding: every complete batch of one fetch response (a torn tail is left out).
    ``with_records=False`` leaves the data records undecoded (the batch's header and CRC are still
    read and checked): for a caller that needs only offsets and markers."""
    out: list[LogBatch] = []
    records = MemoryRecords(bytes(raw or b""))
    while records.has_next():
        batch = records.next_batch()
        if batch is None:
            break
        if not isinstance(batch, DefaultRecordBatch):
            raise RawReadError(f"a record batch of magic {batch.magic} (before 0.11: no transactions)")
        if not batch.validate_crc():
            raise RawReadError(f"the record batch at {batch.base_offset} fails its CRC")
        control = None
        transactional = batch.is_transactional
        data: tuple[LogRecord, ...] = ()
        if batch.is_control_batch:
            kinds = [ControlKind(int(r.type)) for r in batch]
            if kinds:
                control = kinds[0]
            else:
                transactional = False  # an empty control batch decides nothing: it only takes offsets
        elif with_records:
            data = tuple(
                LogRecord(r.offset, r.key, r.value, tuple((k, v) for k, v in r.headers), r.timestamp) for r in batch
            )
        out.append(
            LogBatch(
                batch.base_offset,
                batch.last_offset,
                batch.producer_id,
                batch.producer_epoch,
                transactional,
                control,
                data,
            )
        )
    return out


def read_committed_with(
    client: RawClient,
    topic: str,
    partition: int,
    start: int = 0,
    end: int | None = None,
    *,
    on_batch: Callable[[RawClient], None] | None = None,
) -> CommittedRead:
    """Steps 1-4 for one partition on an open client (its deadline bounds the read; ``on_batch``,
    called with the client after each batch read, may move that deadline on or raise to stop)."""
    return PartitionReader(client, topic, partition).read(start, end, on_batch=on_batch)


def partition_leaders(client: RawClient, topic: str) -> dict[int, int]:
    """Step 1: the topic's partitions and the broker id leading each (-1: none); a topic the
    cluster does not know raises ``RawReadError``."""
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)])
    leaders: dict[int, int] = {}
    for found in client.request(request, None, f"reading the metadata of {topic}").topics:
        if found.error_code:
            raise RawReadError(f"topic {topic}: {error_name(found.error_code)}")
        leaders.update((int(part.partition_index), int(part.leader_id)) for part in found.partitions)
    return leaders


__all__ = [
    "CommittedRead",
    "PartitionReader",
    "RawReadError",
    "decode_batches",
    "partition_leaders",
    "read_committed",
    "read_committed_with",
    "stored_run",
    "transaction_marker",
]
