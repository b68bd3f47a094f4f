"""Reading one offset range in an executor Python worker (``read(partition)``).

Spark runs ``read(partition)`` in executor Python workers on an unpickled copy
of the reader; a worker process serves many tasks one after the other
(``spark.python.worker.reuse``). :func:`read_range`:

1. Takes this worker's consumer for the source's Kafka settings
   (:func:`worker_consumer`: one group-less ``KafkaConsumer`` per thread and settings,
   created on the first task and reused by the next ones; no group, no
   commit, ``auto.offset.reset=none``).
2. ``assign([tp])`` + ``seek(start)``, then polls until the position reaches
   ``until``; records at or past ``until`` are dropped, so the task returns
   exactly ``[start, until)`` (less any offsets the log does not hold:
   transaction markers, compacted records).
3. Yields Arrow record batches of at most ``batch_rows`` rows as they fill.

The same path replays a batch after a crash: Spark re-plans the ranges from
its offset log.

Failure: a range start no longer on the broker (retention deleted it) raises
kafka-python's ``OffsetOutOfRangeError``; with ``failOnDataLoss=true`` the
task fails (:class:`DataLoss`), otherwise reading continues from the log
start with a warning. A range not read within :data:`READ_TIMEOUT_S` fails
the task (:class:`RangeReadTimeout`). After any failure the worker's consumer
is closed and dropped, so the next task starts clean.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator

import pyarrow as pa
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import OffsetOutOfRangeError

from cr_consumer.spark.arrow import records_to_batch
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
#: Consumers kept per worker process (one per distinct Kafka settings).
MAX_CACHED_CONSUMERS = 4


class DataLoss(RuntimeError):
    """Records of a range are no longer on the broker and failOnDataLoss is true."""


class RangeReadTimeout(TimeoutError):
    """An offset range could not be read in time."""


def executor_config(options: SourceOptions) -> dict:
    config = options.kafka_config
    config.pop("group_instance_id", None)  # no group here
    config.setdefault("max_poll_records", MAX_POLL_RECORDS)
    config.update(
        bootstrap_servers=options.bootstrap_servers.split(","),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
        client_id="crkafka-executor",
    )
    return config


_cache_lock = threading.Lock()
_consumers: dict[tuple, KafkaConsumer] = {}


def _cache_key(options: SourceOptions) -> tuple:
    # per thread: a KafkaConsumer is not thread-safe (a pyspark worker runs its tasks on one thread)
    return (threading.get_ident(), options.bootstrap_servers, options.kafka_properties)


def worker_consumer(options: SourceOptions) -> KafkaConsumer:
    """This worker's consumer for ``options``' Kafka settings (created once, reused)."""
    key = _cache_key(options)
    with _cache_lock:
        consumer = _consumers.get(key)
        if consumer is None:
            if len(_consumers) >= MAX_CACHED_CONSUMERS:
                _, oldest = _consumers.popitem()
                oldest.close()
            consumer = KafkaConsumer(**executor_config(options))
            _consumers[key] = consumer
            log.info("crkafka: executor worker %d: a new consumer (reused by this worker's next tasks)", os.getpid())
        return consumer


def drop_worker_consumer(options: SourceOptions) -> None:
    with _cache_lock:
        consumer = _consumers.pop(_cache_key(options), None)
    if consumer is not None:
        try:
            consumer.close()
        except Exception:  # the consumer failed already; logged, the next task makes a new one
            log.exception("crkafka: closing a failed executor consumer failed")


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
    consumer = worker_consumer(options)
    tp = TopicPartition(rng.topic, rng.partition)
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    rows = 0
    pending: list = []
    try:
        consumer.assign([tp])
        consumer.seek(tp, rng.start)
        while consumer.position(tp) < rng.until:
            if time.monotonic() > deadline:
                raise RangeReadTimeout(f"{rng.topic}:{rng.partition} [{rng.start}, {rng.until}) not read within "
                                       f"{timeout_s}s (position {consumer.position(tp)})")
            try:
                fetched = consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
            except OffsetOutOfRangeError as exc:
                if options.fail_on_data_loss:
                    raise DataLoss(f"{rng.topic}:{rng.partition} [{rng.start}, {rng.until}): the records are no "
                                   f"longer on the broker ({exc}); set failOnDataLoss=false to skip them") from None
                log.warning("crkafka: %s:%d from %d is no longer on the broker; reading from the log start "
                            "(failOnDataLoss=false)", rng.topic, rng.partition, consumer.position(tp))
                consumer.seek_to_beginning(tp)
                continue
            records = fetched.get(tp, ())
            if records and records[-1].offset >= rng.until:
                records = [r for r in records if r.offset < rng.until]
            if records:
                pending.extend(records)
                rows += len(records)
            while len(pending) >= batch_rows:
                yield records_to_batch(pending[:batch_rows], options.include_headers)
                del pending[:batch_rows]
        if pending:
            yield records_to_batch(pending, options.include_headers)
    except BaseException:
        drop_worker_consumer(options)
        raise
    log.debug("crkafka: read %s:%d [%d, %d): %d rows in %.2fs", rng.topic, rng.partition, rng.start, rng.until,
              rows, time.monotonic() - t0)


__all__ = ["DataLoss", "RangeReadTimeout", "read_range", "worker_consumer"]
