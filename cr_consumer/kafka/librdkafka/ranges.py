"""Offset-range reads with librdkafka: a group-less confluent-kafka consumer, read by column.

The seam's :class:`~cr_consumer.kafka.client.KafkaClient` is a group consumer
handing out one record object each; a Spark executor reading a range of one
partition at librdkafka's speed needs the opposite: ``assign`` one partition
at an offset, no group, no commit, and the records' fields by column.
:class:`RangeConsumer` is that small part of confluent-kafka (the Spark
source's range reader, ``cr_consumer/spark/executor.py``, drives it):

1. :meth:`RangeConsumer.assign` replaces the previous range's assignment
   (librdkafka drops what it had prefetched for it).
2. :meth:`RangeConsumer.consume` takes up to :data:`MAX_CONSUME` fetched
   messages in offset order, cuts them to ``[next_offset, until)`` and returns
   their columns (:data:`RecordColumns`), each built in one pass (C-level list
   comprehensions, no per-record Python object of ours), with the new next
   offset: the last record's + 1, ``until`` once a record at or past it was
   fetched, or librdkafka's position when the log has no record at the tail
   of the range (transaction markers, compaction).
3. An offset no longer on the broker: ``auto.offset.reset=error`` turns the
   fetch's OFFSET_OUT_OF_RANGE into an error message; ``consume`` hands
   it with the log start to ``on_data_loss``, which raises or says where to go
   on (the consumer is assigned there), or nowhere (``until`` is returned).
4. :meth:`RangeConsumer.unassign` after each range: the consumer fetches
   nothing in the background between two.

``fetch.queue.backoff.ms`` is set low: librdkafka's default (1 s) pauses the
fetcher for a second each time its local queue passes ``queued.min.messages``,
which a read of 100k+ records in one go hits every time (measured: 150k rows/s
with the default, 800k+ without the pause).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Mapping, Sequence

from cr_consumer.kafka.client import ClientConfigError, ClientUnavailable

try:
    from confluent_kafka import Consumer, KafkaError, KafkaException, Message
    from confluent_kafka import TopicPartition as CkTopicPartition
except ImportError as exc:  # the optional extra
    raise ClientUnavailable(
        "kafka.client=librdkafka needs confluent-kafka in the driver and on every executor: "
        "pip install 'cr-consumer[librdkafka]'"
    ) from exc

from cr_consumer.kafka.librdkafka.properties import librdkafka_config

log = logging.getLogger(__name__)

#: Messages per ``consume`` call: one Python round trip per this many rows.
MAX_CONSUME = 10_000
#: One ``consume``'s wait: short enough for the caller to re-check its deadline often.
CONSUME_TIMEOUT_S = 0.5
#: librdkafka's pause after its local queue fills (see the module doc); a
#: short one keeps the fetcher busy while the caller turns records into columns.
FETCH_QUEUE_BACKOFF_MS = 5
#: The group id librdkafka insists on: never joined (no subscribe) and never
#: committed to (auto commit and offset store are off).
UNUSED_GROUP = "crkafka-executor-no-group"
#: Consumer properties that concern a group member only: a range reader has no
#: group, so they are not passed on.
GROUP_ONLY = frozenset(
    {
        "group.id",
        "group.instance.id",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "max.poll.interval.ms",
        "partition.assignment.strategy",
        "exclude.internal.topics",
        "max.poll.records",
        "default.api.timeout.ms",
        "api.version",
        "api.version.auto.timeout.ms",
        "allow.auto.create.topics",
    }
)

#: ``on_data_loss(offset, log_start, reason)``: raises, or returns the offset to go on
#: from (None: nothing of the range is left).
DataLossHandler = Callable[[int, int, str], "int | None"]


#: One run of records of a range, by column: offsets, timestamps (epoch ms, None when the
#: record has none), timestamp types (Kafka's -1 none, 0 CreateTime, 1 LogAppendTime), keys,
#: values, and librdkafka's headers of each record (a list of (name, value) pairs or None;
#: None for the whole column when not wanted).
RecordColumns = tuple[
    list[int], Sequence[int | None], list[int], list[bytes | None], list[bytes | None], list[object] | None
]


def range_config(
    bootstrap_servers: str, properties: Mapping[str, object], client_id: str = "crkafka-executor"
) -> dict[str, object]:
    """librdkafka settings of a range reader: ``properties`` under librdkafka's
    names, less the group-only ones, with no group use and reset=error."""
    config = librdkafka_config({k: v for k, v in properties.items() if k not in GROUP_ONLY})
    config.setdefault("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS)
    config.update(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": UNUSED_GROUP,
            "auto.offset.reset": "error",
            "client.id": client_id,
            "logger": log,  # librdkafka's log lines through Python logging, not raw stderr
        }
    )
    return config


def config_error(bootstrap_servers: str, properties: Mapping[str, object]) -> str | None:
    """Why librdkafka refuses a range reader's settings for ``properties`` (a property it
    does not know, a bad value), or None: the settings are checked by building a
    consumer and closing it at once (no group is joined, nothing is fetched)."""
    try:
        Consumer(range_config(bootstrap_servers, properties)).close()
    except (KafkaException, ClientConfigError, ValueError, TypeError) as exc:
        return str(exc)
    return None


class RangeConsumer:
    """One group-less librdkafka consumer reading one range at a time (one thread uses it)."""

    def __init__(self, bootstrap_servers: str, properties: Mapping[str, object]) -> None:
        self._consumer = Consumer(range_config(bootstrap_servers, properties))

    def assign(self, topic: str, partition: int, offset: int) -> None:
        """Step 1."""
        self._consumer.assign([CkTopicPartition(topic, partition, offset)])

    def unassign(self) -> None:
        """Step 4."""
        self._consumer.unassign()

    def consume(
        self,
        topic: str,
        partition: int,
        next_offset: int,
        until: int,
        on_data_loss: DataLossHandler,
        *,
        include_headers: bool,
    ) -> tuple[int, RecordColumns | None]:
        """Steps 2-3: one consume; the new next offset and the columns of its records of
        ``[next_offset, until)`` (None: no record)."""
        consumer = self._consumer
        messages = consumer.consume(MAX_CONSUME, CONSUME_TIMEOUT_S)
        if not messages:
            # no record at the range's tail (transaction markers, compaction): the position passed it
            position = consumer.position([CkTopicPartition(topic, partition)])[0].offset
            return max(next_offset, position), None
        good = [m for m in messages if m.error() is None]
        if len(good) != len(messages):
            for m in messages:
                err = m.error()
                if err is None:
                    continue
                if err.code() == KafkaError._AUTO_OFFSET_RESET:
                    low, _ = consumer.get_watermark_offsets(
                        CkTopicPartition(topic, partition), timeout=CONSUME_TIMEOUT_S * 10
                    )
                    resume = on_data_loss(next_offset, low, err.str())  # raises with failOnDataLoss=true
                    if resume is None:  # nothing of the range is left
                        return until, None
                    self.assign(topic, partition, resume)
                    return resume, None
                if err.fatal():
                    raise RuntimeError(f"librdkafka: {topic}:{partition}: {err.name()} ({err.str()})")
                log.warning("crkafka executor: librdkafka: %s (%s)", err.name(), err.str())
        if not good:
            return next_offset, None
        # a message without an error always has its offset (the library's type says "or None")
        got: list[int] = [m.offset() for m in good]  # type: ignore[misc]
        fetched = len(got)
        lo = bisect.bisect_left(got, next_offset)  # already read (a stale prefetch): dropped
        hi = bisect.bisect_left(got, until)  # at or past the range's end: not this read's
        if lo or hi < fetched:
            good, got = good[lo:hi], got[lo:hi]
        # a record at or past the range's end fetched: the range is complete
        if not got:
            return (until if hi < fetched else next_offset), None
        return (until if hi < fetched else got[-1] + 1), _columns(good, got, include_headers)

    def close(self) -> None:
        self._consumer.close()


def _columns(messages: list[Message], offsets: list[int], include_headers: bool) -> RecordColumns:
    """``messages`` (of one partition, in offset order) by column."""
    stamp_pairs = [m.timestamp() for m in messages]
    ts_type, ts = zip(*stamp_pairs)
    # librdkafka's types: 0 none, 1 CreateTime, 2 LogAppendTime -> Kafka's -1, 0, 1
    return (
        offsets,
        ts if all(ts_type) else [s if t else None for t, s in stamp_pairs],
        [t - 1 for t in ts_type],
        [m.key() for m in messages],
        [m.value() for m in messages],
        [m.headers() for m in messages] if include_headers else None,
    )


__all__ = [
    "CONSUME_TIMEOUT_S",
    "FETCH_QUEUE_BACKOFF_MS",
    "GROUP_ONLY",
    "MAX_CONSUME",
    "UNUSED_GROUP",
    "DataLossHandler",
    "RangeConsumer",
    "RecordColumns",
    "config_error",
    "range_config",
]
