"""librdkafka's consumed messages -> the seam's records, by partition (:func:`records_by_partition`).

Besides converting the messages, it keeps two rules of the seam that librdkafka
does not keep by itself (module docstring of :mod:`cr_consumer.kafka.librdkafka.client`,
steps 1 and 2): a paused partition yields nothing, and the positions of the
partitions handed out move past their last record
(:class:`~cr_consumer.kafka.librdkafka.partitions.PartitionStates`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from confluent_kafka import KafkaError, Message

from cr_consumer.kafka.client import KafkaRecord, TimestampType, TopicPartition
from cr_consumer.kafka.librdkafka.partitions import PartitionStates

log = logging.getLogger(__name__)

#: librdkafka's timestamp type (0 none, 1 create, 2 log append) -> TimestampType.
_TIMESTAMP_TYPES = (TimestampType.NOT_AVAILABLE, TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME)


def records_by_partition(
    messages: Sequence[Message], parts: PartitionStates, on_error: Callable[[KafkaError], None]
) -> dict[TopicPartition, list[KafkaRecord]]:
    """The records of one poll by partition (polling thread only); partitions
    without a record are left out.

    1. Each message becomes a :class:`~cr_consumer.kafka.client.KafkaRecord` with
       the same fields kafka-python gives (timestamp None when librdkafka has none,
       headers as a tuple of pairs, empty when there are none).
    2. A message that is an error event goes to ``on_error`` (which raises a fatal
       one) and is skipped.
    3. A partition the operator paused yields nothing, as with kafka-python:
       librdkafka may still return records of it fetched before the pause; they are
       dropped and the partition's position goes back to the first of them
       (``PartitionStates.withheld_from``), so they are fetched again after the
       resume.
    4. The positions of the partitions handed out move past their last record
       (``PartitionStates.handed_out``).

    The loop runs once per record at full speed: it builds each record with
    ``tuple.__new__`` (no Python-level ``__new__``) and looks a partition's list up
    only when the partition changes between two messages.
    """
    out: dict[TopicPartition, list[KafkaRecord]] = {}
    types = _TIMESTAMP_TYPES
    new, record = tuple.__new__, KafkaRecord  # the NamedTuple without its Python-level __new__
    last_topic: str | None = None
    last_partition = -1
    bucket: list[KafkaRecord] | None = None
    refetch: dict[TopicPartition, int] = {}
    # A message without an error always has its topic, partition and offset (the
    # library's types say "or None" for error events): hence the ignores below.
    for m in messages:
        err = m.error()
        if err is not None:
            on_error(err)
            continue
        topic: str = m.topic()  # type: ignore[assignment]
        partition: int = m.partition()  # type: ignore[assignment]
        if partition != last_partition or topic != last_topic:
            last_topic, last_partition = topic, partition
            tp = TopicPartition(topic, partition)
            # a paused partition yields nothing (what kafka-python does); its
            # records are fetched again after resume (the seek back below)
            bucket = None if parts.withheld(tp) else out.setdefault(tp, [])
        if bucket is None:
            refetch.setdefault(TopicPartition(topic, partition), m.offset())  # type: ignore[arg-type]
            continue
        ts_type, ts = m.timestamp()
        headers = m.headers()
        bucket.append(
            new(
                record,
                (
                    topic,
                    partition,
                    m.offset(),
                    ts if ts_type else None,
                    types[ts_type],
                    m.key(),
                    m.value(),
                    tuple(headers) if headers else (),
                ),
            )
        )
    for tp, records in out.items():
        parts.handed_out(tp, records[-1].offset + 1)
    for tp, offset in refetch.items():
        log.debug("records of paused %s from offset %d are fetched again after resume", tp, offset)
        parts.withheld_from(tp, offset)
    return {tp: records for tp, records in out.items() if records}


__all__ = ["records_by_partition"]
