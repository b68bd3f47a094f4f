"""Range reads with librdkafka (``kafka.client=librdkafka``): a group-less confluent-kafka consumer.

The project's client seam (:mod:`cr_consumer.kafka.client`) is a *group*
consumer (subscribe, rebalance listener, commit); an executor needs the
opposite: ``assign`` one partition at an offset, no group, no commit. This
adapter is that small part of confluent-kafka, kept inside the Spark package.

:meth:`LibrdkafkaRangeReader.read` (one task, on the worker's thread):

1. ``assign([partition @ start])`` replaces the previous task's assignment
   (librdkafka drops what it had prefetched for it).
2. ``consume(MAX_CONSUME)`` returns the fetched messages in offset order; the
   columns are taken from the messages in one pass each (C-level list
   comprehensions, no per-record Python object of ours), cut at ``until`` and
   built into Arrow batches of at most ``batch_rows`` rows
   (:func:`cr_consumer.spark.arrow.range_batch`).
3. The read ends when the next offset reaches ``until`` (the last record read,
   or librdkafka's position when the log has no record at the tail of the
   range: transaction markers, compaction).
4. An offset no longer on the broker: ``auto.offset.reset=error`` turns the
   fetch's OFFSET_OUT_OF_RANGE into an error message for the partition;
   :meth:`read` hands it with the log start to ``on_data_loss``, which raises
   (``failOnDataLoss=true``) or says where to go on: the log start, or nowhere
   when the range lies past the log's end (the topic was recreated).
5. At the end (or failure) of the task the partition is unassigned, so the
   worker's consumer fetches nothing in the background between tasks.

The cyclic garbage collector is paused while a consume's messages become
columns (:func:`~coordinator.protocol.common.gc_policy.collector_paused`). ``fetch.queue.backoff.ms`` is set low: librdkafka's default (1 s) pauses the
fetcher for a second each time its local queue passes ``queued.min.messages``,
which a task that reads 100k+ records in one go hits every time (measured:
150k rows/s with the default, 800k+ without the pause).
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable, Iterator, Mapping

import pyarrow as pa

from coordinator.protocol.common.gc_policy import collector_paused
from cr_consumer.spark.arrow import range_batch
from cr_consumer.spark.ranges import OffsetRange

log = logging.getLogger(__name__)

#: Messages per ``consume`` call: one Python round trip per this many rows.
MAX_CONSUME = 10_000
#: One ``consume``'s wait: short enough to re-check the read's deadline often.
CONSUME_TIMEOUT_S = 0.5
#: librdkafka's pause after its local queue fills (see the module doc); a
#: short one keeps the fetcher busy while the task turns records into Arrow.
FETCH_QUEUE_BACKOFF_MS = 5
#: The group id librdkafka insists on: never joined (no subscribe) and never
#: committed to (auto commit and offset store are off).
UNUSED_GROUP = "crkafka-executor-no-group"
#: kafka-python consumer properties that concern a group member only: an
#: executor has no group, so they are not passed on.
GROUP_ONLY = frozenset({
    "group.id", "group.instance.id", "session.timeout.ms", "heartbeat.interval.ms", "max.poll.interval.ms",
    "partition.assignment.strategy", "exclude.internal.topics", "max.poll.records", "default.api.timeout.ms",
    "api.version", "api.version.auto.timeout.ms", "allow.auto.create.topics",
})


class LibrdkafkaMissing(ImportError):
    """``kafka.client=librdkafka`` without confluent-kafka installed."""


def require_librdkafka() -> None:
    """Raise :class:`LibrdkafkaMissing` naming the extra when confluent-kafka is not importable."""
    try:
        import confluent_kafka  # noqa: F401
    except ImportError as exc:
        raise LibrdkafkaMissing("kafka.client=librdkafka needs confluent-kafka in the driver and on every executor: "
                                "pip install 'cr-consumer[librdkafka]'") from exc


def range_config(bootstrap_servers: str, properties: Mapping[str, object]) -> dict[str, object]:
    """librdkafka settings of an executor's consumer: the pass-through properties under
    librdkafka's names, less the group-only ones, with no group use and reset=error."""
    from cr_consumer.kafka.librdkafka.client import librdkafka_config

    config = librdkafka_config({k: v for k, v in properties.items() if k not in GROUP_ONLY})
    config.setdefault("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS)
    config.update({
        "bootstrap.servers": bootstrap_servers,
        "group.id": UNUSED_GROUP,
        "auto.offset.reset": "error",
        "client.id": "crkafka-executor",
        "logger": log,  # librdkafka's log lines through Python logging, not raw stderr
    })
    return config


def config_error(bootstrap_servers: str, properties: Mapping[str, object]) -> str | None:
    """Why librdkafka refuses the executors' settings for ``properties`` (a property it
    does not know, a bad value), or None: the settings are checked by building a
    consumer and closing it at once (no group is joined, nothing is fetched)."""
    from confluent_kafka import Consumer, KafkaException

    from cr_consumer.kafka.client import ClientConfigError

    try:
        Consumer(range_config(bootstrap_servers, properties)).close()
    except (KafkaException, ClientConfigError, ValueError, TypeError) as exc:
        return str(exc)
    return None


class _Columns:
    """The columns of the records read so far and not yet handed to Spark."""

    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.offsets: list[int] = []
        self.stamps: list[int | None] = []
        self.types: list[int] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.headers: list = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, messages: list, offsets: list[int]) -> None:
        """Append ``messages`` (librdkafka messages of one partition, in offset order) by column."""
        stamp_pairs = [m.timestamp() for m in messages]
        ts_type, ts = zip(*stamp_pairs)
        self.offsets.extend(offsets)
        # librdkafka's types: 0 none, 1 CreateTime, 2 LogAppendTime -> Kafka's -1, 0, 1
        self.types.extend([t - 1 for t in ts_type])
        self.stamps.extend(ts if all(ts_type) else [s if t else None for t, s in stamp_pairs])
        self.keys.extend([m.key() for m in messages])
        self.values.extend([m.value() for m in messages])
        if self.include_headers:
            self.headers.extend([m.headers() for m in messages])

    def take(self, rng: OffsetRange, n: int) -> pa.RecordBatch:
        """The first ``n`` rows as one Arrow batch, removed from the columns."""
        batch = range_batch(rng.topic, rng.partition, self.offsets[:n], self.stamps[:n], self.types[:n],
                            self.keys[:n], self.values[:n], self.headers[:n], self.include_headers)
        for column in (self.offsets, self.stamps, self.types, self.keys, self.values, self.headers):
            del column[:n]
        return batch


class LibrdkafkaRangeReader:
    """One worker's group-less librdkafka consumer (one thread uses it)."""

    def __init__(self, bootstrap_servers: str, properties: Mapping[str, object]) -> None:
        require_librdkafka()
        from confluent_kafka import Consumer

        self._consumer = Consumer(range_config(bootstrap_servers, properties))

    def read(self, rng: OffsetRange, *, include_headers: bool, batch_rows: int, deadline: float,
             on_data_loss: Callable[[OffsetRange, int, int, str], int | None],
             on_timeout: Callable[[int], BaseException]) -> Iterator[pa.RecordBatch]:
        """The records ``[rng.start, rng.until)`` as Arrow batches (see the module doc)."""
        from confluent_kafka import TopicPartition as CkTopicPartition

        self._consumer.assign([CkTopicPartition(rng.topic, rng.partition, rng.start)])
        try:
            columns = _Columns(include_headers)
            next_offset = rng.start
            while next_offset < rng.until:
                if time.monotonic() > deadline:
                    raise on_timeout(next_offset)
                with collector_paused():  # no yield inside: Spark's code runs with the collector on
                    next_offset = self._consume_into(columns, rng, next_offset, on_data_loss)
                while len(columns) >= batch_rows:
                    yield columns.take(rng, batch_rows)
            if len(columns):
                yield columns.take(rng, len(columns))
        finally:
            # librdkafka fetches an assigned partition in the background: between tasks
            # the worker's consumer holds nothing, so it fetches nothing
            self._consumer.unassign()

    def _consume_into(self, columns: _Columns, rng: OffsetRange, next_offset: int,
                      on_data_loss: Callable[[OffsetRange, int, int, str], int | None]) -> int:
        """One consume: its records of ``[next_offset, rng.until)`` added to ``columns``; the new next offset."""
        from confluent_kafka import KafkaError
        from confluent_kafka import TopicPartition as CkTopicPartition

        consumer = self._consumer
        messages = consumer.consume(MAX_CONSUME, CONSUME_TIMEOUT_S)
        if not messages:
            # no record at the range's tail (transaction markers, compaction): the position passed it
            position = consumer.position([CkTopicPartition(rng.topic, rng.partition)])[0].offset
            return max(next_offset, position)
        good = [m for m in messages if m.error() is None]
        if len(good) != len(messages):
            for m in messages:
                err = m.error()
                if err is None:
                    continue
                if err.code() == KafkaError._AUTO_OFFSET_RESET:
                    tp = CkTopicPartition(rng.topic, rng.partition)
                    low, _ = consumer.get_watermark_offsets(tp, timeout=CONSUME_TIMEOUT_S * 10)
                    resume = on_data_loss(rng, next_offset, low, err.str())  # raises with failOnDataLoss=true
                    if resume is None:  # nothing of the range is left
                        return rng.until
                    consumer.assign([CkTopicPartition(rng.topic, rng.partition, resume)])
                    return resume
                if err.fatal():
                    raise RuntimeError(f"librdkafka: {rng.topic}:{rng.partition}: {err.name()} ({err.str()})")
                log.warning("crkafka executor: librdkafka: %s (%s)", err.name(), err.str())
        if not good:
            return next_offset
        # a message without an error always has its offset (the library's type says "or None")
        got: list[int] = [m.offset() for m in good]  # type: ignore[misc]
        fetched = len(got)
        lo = bisect.bisect_left(got, next_offset)  # already read (a stale prefetch): dropped
        hi = bisect.bisect_left(got, rng.until)  # at or past the range's end: not this task's
        if lo or hi < fetched:
            good, got = good[lo:hi], got[lo:hi]
        if got:
            columns.add(good, got)
            next_offset = got[-1] + 1
        return rng.until if hi < fetched else next_offset  # a record past the range fetched: complete

    def close(self) -> None:
        self._consumer.close()


__all__ = ["LibrdkafkaMissing", "LibrdkafkaRangeReader", "config_error", "range_config", "require_librdkafka"]
