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

``fetch.queue.backoff.ms`` is set low: librdkafka's default (1 s) pauses the
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
    from cr_consumer.kafka.librdkafka_client import librdkafka_config

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
        from confluent_kafka import KafkaError
        from confluent_kafka import TopicPartition as CkTopicPartition

        topic, partition, until = rng.topic, rng.partition, rng.until
        consumer = self._consumer
        consumer.assign([CkTopicPartition(topic, partition, rng.start)])
        next_offset = rng.start
        offsets: list[int] = []
        stamps: list[int | None] = []
        types: list[int] = []
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        headers: list = []
        columns = (offsets, stamps, types, keys, values, headers)
        while next_offset < until:
            if time.monotonic() > deadline:
                raise on_timeout(next_offset)
            messages = consumer.consume(MAX_CONSUME, CONSUME_TIMEOUT_S)
            if not messages:
                # no record at the range's tail (transaction markers, compaction): the position passed it
                position = consumer.position([CkTopicPartition(topic, partition)])[0].offset
                next_offset = max(next_offset, position)
                continue
            good = [m for m in messages if m.error() is None]
            if len(good) != len(messages):
                for m in messages:
                    err = m.error()
                    if err is None:
                        continue
                    if err.code() == KafkaError._AUTO_OFFSET_RESET:
                        tp = CkTopicPartition(topic, partition)
                        low, _ = consumer.get_watermark_offsets(tp, timeout=CONSUME_TIMEOUT_S * 10)
                        resume = on_data_loss(rng, next_offset, low, err.str())  # raises with failOnDataLoss=true
                        if resume is None:  # nothing of the range is left
                            next_offset = until
                        else:
                            next_offset = resume
                            consumer.assign([CkTopicPartition(topic, partition, resume)])
                        good = []
                        break
                    if err.fatal():
                        raise RuntimeError(f"librdkafka: {topic}:{partition}: {err.name()} ({err.str()})")
                    log.warning("crkafka executor: librdkafka: %s (%s)", err.name(), err.str())
            if not good:
                continue
            # a message without an error always has its offset (the library's type says "or None")
            got: list[int] = [m.offset() for m in good]  # type: ignore[misc]
            fetched = len(got)
            lo = bisect.bisect_left(got, next_offset)  # already read (a stale prefetch): dropped
            hi = bisect.bisect_left(got, until)  # at or past the range's end: not this task's
            if lo or hi < fetched:
                good, got = good[lo:hi], got[lo:hi]
            if got:
                stamp_pairs = [m.timestamp() for m in good]
                ts_type, ts = zip(*stamp_pairs)
                offsets.extend(got)
                # librdkafka's types: 0 none, 1 CreateTime, 2 LogAppendTime -> Kafka's -1, 0, 1
                types.extend([t - 1 for t in ts_type])
                stamps.extend(ts if all(ts_type) else [s if t else None for t, s in stamp_pairs])
                keys.extend([m.key() for m in good])
                values.extend([m.value() for m in good])
                if include_headers:
                    headers.extend([m.headers() for m in good])
                next_offset = got[-1] + 1
            if hi < fetched:  # a record at or past until was fetched: the range is complete
                next_offset = until
            while len(offsets) >= batch_rows:
                yield range_batch(topic, partition, offsets[:batch_rows], stamps[:batch_rows], types[:batch_rows],
                                  keys[:batch_rows], values[:batch_rows], headers[:batch_rows], include_headers)
                for column in columns:
                    del column[:batch_rows]
        if offsets:
            yield range_batch(topic, partition, offsets, stamps, types, keys, values, headers, include_headers)

    def close(self) -> None:
        self._consumer.close()


__all__ = ["LibrdkafkaMissing", "LibrdkafkaRangeReader", "range_config", "require_librdkafka"]
