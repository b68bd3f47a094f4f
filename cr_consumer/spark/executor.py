"""Reading one offset range in an executor Python worker (``read(partition)``).

Spark runs ``read(partition)`` in executor Python workers on an unpickled copy
of the reader; a worker process serves many tasks one after the other
(``spark.python.worker.reuse``). :func:`read_range`:

1. Takes this worker's range reader for the source's client and Kafka settings
   (:func:`worker_reader`: one group-less consumer per thread, client and
   settings, created on the first task and reused by the next ones; no group,
   no commit, no offset reset). ``kafka.client`` picks the library:
   kafka-python (:class:`KafkaPythonRangeReader`: the client seam's
   :class:`~cr_consumer.kafka.client.KafkaClient` with ``assign``) or librdkafka
   (:class:`LibrdkafkaRangeReader`:
   :class:`~cr_consumer.kafka.librdkafka.ranges.RangeConsumer`, read by column).
2. The reader assigns the partition at ``start``; each fetch appends the
   records of ``[next offset, until)`` to the task's
   :class:`~cr_consumer.spark.arrow.Columns`, with the cyclic garbage
   collector paused (:func:`~coordinator.protocol.common.gc_policy.collector_paused`),
   until the next offset reaches ``until``. Records at or past ``until`` are
   dropped, so the task returns exactly ``[start, until)`` (less any offsets
   the log does not hold: transaction markers, compacted records).
3. Yields Arrow record batches of at most ``batch_rows`` rows as they fill.
   At the end (or failure) of the task the reader releases the partition: a
   librdkafka consumer fetches an assigned partition in the background, so
   between tasks it holds none.

The same path replays a batch after a crash: Spark re-plans the ranges from
its offset log.

Failure: an offset of the range no longer on the broker (retention deleted
it, or the topic was deleted and created again) is data loss
(:func:`data_loss_handler`): with ``failOnDataLoss=true`` the task fails
(:class:`DataLoss`, naming the partition and the option); otherwise a warning
is logged and the read goes on from the log start, or ends when the range
lies past the log's end. A range not read within :data:`READ_TIMEOUT_S` fails
the task (:class:`RangeReadTimeout`). After any failure the worker's reader is
closed and dropped, so the next task starts clean.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Protocol

import pyarrow as pa

from coordinator.protocol.common.gc_policy import collector_paused
from cr_consumer.kafka.client import ClientKind, KafkaClient, OffsetOutOfRange, TopicPartition
from cr_consumer.kafka.factory import make_client
from cr_consumer.spark.arrow import Columns
from cr_consumer.spark.client_properties import groupless_properties
from cr_consumer.spark.options import SourceOptions
from cr_consumer.spark.ranges import OffsetRange

log = logging.getLogger(__name__)

#: Bound on reading one range: an unreachable broker, or a range whose end can
#: never be reached, fails the task instead of hanging it.
READ_TIMEOUT_S = 120.0
#: One poll's wait: short enough to re-check the deadline often.
POLL_TIMEOUT_MS = 500
#: Rows per Arrow batch handed to Spark.
DEFAULT_BATCH_ROWS = 50_000
#: Records per poll: large polls mean fewer Python round trips per row.
MAX_POLL_RECORDS = 10_000
#: Readers kept per worker process (one per distinct client and Kafka settings).
MAX_CACHED_READERS = 4
#: Bound on asking the broker for a partition's log start after data loss.
LOG_START_TIMEOUT_MS = 15_000
#: Bound on learning the consumer's position (known locally after the seek).
POSITION_TIMEOUT_MS = 15_000
#: Bound on closing a worker's client.
CLOSE_TIMEOUT_MS = 5_000


class DataLoss(RuntimeError):
    """Records of a range are no longer on the broker and failOnDataLoss is true."""


class RangeReadTimeout(TimeoutError):
    """An offset range could not be read in time."""


#: ``on_data_loss(range, offset, log_start, reason)``: raises DataLoss, or returns the
#: offset to go on from (None: nothing of the range is left).
DataLossHandler = Callable[[OffsetRange, int, int, str], "int | None"]


class RangeReader(Protocol):
    """A worker's group-less consumer reading one offset range per task (one thread uses it)."""

    def assign(self, rng: OffsetRange) -> None: ...

    def fetch(self, rng: OffsetRange, next_offset: int, columns: Columns, on_data_loss: DataLossHandler) -> int:
        """One fetch of ``rng``'s records from ``next_offset`` into ``columns``; the new next offset."""
        ...

    def release(self) -> None: ...

    def close(self) -> None: ...


def data_loss_handler(options: SourceOptions) -> DataLossHandler:
    """What a reader does when ``offset`` of a range is no longer on the broker (see the module doc)."""

    def on_data_loss(rng: OffsetRange, offset: int, log_start: int, reason: str) -> int | None:
        where = f"{rng.topic}:{rng.partition}"
        if options.fail_on_data_loss:
            raise DataLoss(
                f"{where} [{rng.start}, {rng.until}): offset {offset} is no longer on the broker (log "
                f"start {log_start}: {reason}); some data may have been lost. Set the source option "
                f"failOnDataLoss=false to skip it and go on"
            )
        if offset < log_start:
            resume = min(log_start, rng.until)
            log.warning(
                "crkafka: %s: offsets [%d, %d) are no longer on the broker; skipped, reading from %d "
                "(failOnDataLoss=false)",
                where,
                offset,
                resume,
                resume,
            )
            return resume if resume < rng.until else None
        log.warning(
            "crkafka: %s: offsets [%d, %d) are past the end of the log (the topic was recreated?); "
            "skipped (failOnDataLoss=false)",
            where,
            offset,
            rng.until,
        )
        return None

    return on_data_loss


def executor_properties(options: SourceOptions) -> dict[str, object]:
    """The Kafka properties of an executor's kafka-python client."""
    props = groupless_properties(options, "crkafka-executor")
    props.setdefault("max.poll.records", MAX_POLL_RECORDS)
    return props


class KafkaPythonRangeReader:
    """A group-less kafka-python client of the seam (``kafka.client=kafka-python``)."""

    def __init__(self, options: SourceOptions) -> None:
        props = executor_properties(options)
        max_records = props["max.poll.records"]
        self._max_records = max_records if isinstance(max_records, int) else MAX_POLL_RECORDS
        self._consumer: KafkaClient = make_client(ClientKind.KAFKA_PYTHON, props)

    def assign(self, rng: OffsetRange) -> None:
        tp = TopicPartition(rng.topic, rng.partition)
        self._consumer.assign([tp])
        self._consumer.seek(tp, rng.start)

    def fetch(self, rng: OffsetRange, next_offset: int, columns: Columns, on_data_loss: DataLossHandler) -> int:
        consumer = self._consumer
        tp = TopicPartition(rng.topic, rng.partition)
        try:
            fetched = consumer.poll(POLL_TIMEOUT_MS, self._max_records)
        except OffsetOutOfRange as exc:
            offset = consumer.position(tp, POSITION_TIMEOUT_MS)
            log_start = consumer.beginning_offsets([tp], LOG_START_TIMEOUT_MS)[tp]
            resume = on_data_loss(rng, offset, log_start, str(exc))
            if resume is None:
                return rng.until
            consumer.seek(tp, resume)
            return resume
        records = fetched.get(tp, [])
        if records and records[-1].offset >= rng.until:
            records = [r for r in records if r.offset < rng.until]
        if records:
            columns.extend_records(records)
        return consumer.position(tp, POSITION_TIMEOUT_MS)

    def release(self) -> None:
        """Nothing to release: kafka-python fetches only inside ``poll``."""

    def close(self) -> None:
        self._consumer.close(CLOSE_TIMEOUT_MS)


class LibrdkafkaRangeReader:
    """A group-less librdkafka consumer (``kafka.client=librdkafka``)."""

    def __init__(self, options: SourceOptions) -> None:
        from cr_consumer.kafka.librdkafka.ranges import RangeConsumer  # ClientUnavailable without the extra

        self._consumer = RangeConsumer(options.bootstrap_servers, options.consumer_properties)

    def assign(self, rng: OffsetRange) -> None:
        self._consumer.assign(rng.topic, rng.partition, rng.start)

    def fetch(self, rng: OffsetRange, next_offset: int, columns: Columns, on_data_loss: DataLossHandler) -> int:
        def lost(offset: int, log_start: int, reason: str) -> int | None:
            return on_data_loss(rng, offset, log_start, reason)

        next_offset, run = self._consumer.consume(
            rng.topic, rng.partition, next_offset, rng.until, lost, include_headers=columns.include_headers
        )
        if run is not None:
            columns.extend(*run)
        return next_offset

    def release(self) -> None:
        self._consumer.unassign()

    def close(self) -> None:
        self._consumer.close()


def make_reader(options: SourceOptions) -> RangeReader:
    if options.client is ClientKind.LIBRDKAFKA:
        return LibrdkafkaRangeReader(options)
    return KafkaPythonRangeReader(options)


#: The reading thread, the client, the bootstrap servers and the Kafka properties.
_CacheKey = tuple[int, ClientKind, str, tuple[tuple[str, object], ...]]
_cache_lock = threading.Lock()
_readers: dict[_CacheKey, RangeReader] = {}


def _cache_key(options: SourceOptions) -> _CacheKey:
    # per thread: a consumer is not thread-safe (a pyspark worker runs its tasks on one thread)
    return (threading.get_ident(), options.client, options.bootstrap_servers, options.kafka_properties)


def worker_reader(options: SourceOptions) -> RangeReader:
    """This worker's reader for ``options``' client and Kafka settings (created once, reused)."""
    key = _cache_key(options)
    with _cache_lock:
        reader = _readers.get(key)
        if reader is None:
            if len(_readers) >= MAX_CACHED_READERS:
                _, oldest = _readers.popitem()
                oldest.close()
            reader = make_reader(options)
            if not _readers:
                atexit.register(close_worker_readers)  # idempotent: unregistered when the cache empties
            _readers[key] = reader
            log.info(
                "crkafka: executor worker %d: a new %s consumer (reused by this worker's next tasks)",
                os.getpid(),
                options.client.value,
            )
        return reader


def _close(reader: RangeReader) -> None:
    try:
        reader.close()
    except Exception:  # a failed consumer, or the process exiting: logged, the next task makes a new one
        log.exception("crkafka: closing an executor consumer failed")


def drop_worker_reader(options: SourceOptions) -> None:
    with _cache_lock:
        reader = _readers.pop(_cache_key(options), None)
    if reader is not None:
        _close(reader)


def close_worker_readers() -> None:
    """Close every cached reader of this process (at exit; tests between brokers)."""
    with _cache_lock:
        readers = list(_readers.values())
        _readers.clear()
        atexit.unregister(close_worker_readers)
    for reader in readers:
        _close(reader)


#: Bound on a batch read's commit of one partition's end (commitOnBatchRead).
BATCH_COMMIT_TIMEOUT_MS = 15_000


class BatchCommitFailed(RuntimeError):
    """A batch read could not commit a partition's end to its group."""


def commit_range_end(options: SourceOptions, rng: OffsetRange) -> None:
    """Commit ``rng.until`` for its partition to ``kafka.group.id`` (a batch read with
    commitOnBatchRead). The committing consumer does not join the group: the broker
    takes the commit while the group has no active member, and refuses it (the task
    fails, naming the group) while another consumer of the group, a streaming query,
    holds partitions."""
    props = executor_properties(options)
    props["group.id"] = options.group_id
    consumer = make_client(ClientKind.KAFKA_PYTHON, props)
    tp = TopicPartition(rng.topic, rng.partition)
    try:
        consumer.commit({tp: rng.until}, BATCH_COMMIT_TIMEOUT_MS)
    except Exception as exc:
        raise BatchCommitFailed(
            f"crkafka batch read: committing {rng.topic}:{rng.partition} at {rng.until} to group "
            f"{options.group_id!r} failed ({exc!r}); the group may have active members "
            f"(commitOnBatchRead)"
        ) from exc
    finally:
        consumer.close(CLOSE_TIMEOUT_MS)
    log.info(
        "crkafka: batch read committed %s:%d at %d to group %s", rng.topic, rng.partition, rng.until, options.group_id
    )


def read_range(
    options: SourceOptions,
    rng: OffsetRange,
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    timeout_s: float = READ_TIMEOUT_S,
) -> Iterator[pa.RecordBatch]:
    """Yield the records ``[rng.start, rng.until)`` of one partition as Arrow batches."""
    if rng.size <= 0:
        return
    reader = worker_reader(options)
    t0 = time.monotonic()
    rows = 0
    on_data_loss = data_loss_handler(options)
    columns = Columns(rng.topic, rng.partition, options.include_headers)
    next_offset = rng.start
    try:
        reader.assign(rng)
        try:
            while next_offset < rng.until:
                if time.monotonic() > t0 + timeout_s:
                    raise RangeReadTimeout(
                        f"{rng.topic}:{rng.partition} [{rng.start}, {rng.until}) not read within {timeout_s}s "
                        f"(position {next_offset})"
                    )
                with collector_paused():  # no yield inside: Spark's code runs with the collector on
                    next_offset = reader.fetch(rng, next_offset, columns, on_data_loss)
                while len(columns) >= batch_rows:
                    rows += batch_rows
                    yield columns.take(batch_rows)
            if len(columns):
                rows += len(columns)
                yield columns.take(len(columns))
        finally:
            reader.release()
    except BaseException:
        drop_worker_reader(options)
        raise
    log.debug(
        "crkafka: read %s:%d [%d, %d): %d rows in %.2fs",
        rng.topic,
        rng.partition,
        rng.start,
        rng.until,
        rows,
        time.monotonic() - t0,
    )


__all__ = [
    "BatchCommitFailed",
    "DataLoss",
    "RangeReadTimeout",
    "RangeReader",
    "close_worker_readers",
    "commit_range_end",
    "read_range",
    "worker_reader",
]
