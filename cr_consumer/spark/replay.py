"""Deterministic re-read of one micro-batch by offset range (``readBetweenOffsets``).

Spark calls ``readBetweenOffsets(start, end)`` only to replay a batch that was
planned but not committed before the query process died. It runs in an executor
Python worker on an unpickled copy of the reader: there are no members there,
so the batch is re-read from Kafka directly.

1. For every partition of ``end``, the range is ``[begin, stop)`` where ``stop``
   is the end position and ``begin`` the start position (or, for a partition
   that first appeared in this batch, the end's ``from`` entry); see
   :mod:`cr_consumer.spark.offsets`. Empty ranges are skipped.
2. A plain ``KafkaConsumer`` with no group (``assign`` + ``seek``, no commit,
   ``auto_offset_reset="none"``) reads each partition until its position reaches
   ``stop``; records at or past ``stop`` are dropped.
3. The records become Arrow batches of at most ``batch_rows`` rows.

Failure: if a range start is no longer on the broker (retention deleted it),
kafka-python raises ``OffsetOutOfRangeError`` and the replay fails instead of
silently skipping records. If the ranges are not read within
:data:`REPLAY_TIMEOUT_S`, :class:`ReplayTimeout` names the partitions still short.
"""

from __future__ import annotations

import logging
import time

import pyarrow as pa
from kafka import KafkaConsumer, TopicPartition

from cr_consumer.spark.arrow import records_to_batch
from cr_consumer.spark.offsets import SourceOffset
from cr_consumer.spark.options import SourceOptions

log = logging.getLogger(__name__)

#: Bound on a whole replay, so an unreachable broker or a range that can never
#: be completed (records gone) fails the Spark task instead of hanging it.
REPLAY_TIMEOUT_S = 120.0

#: One poll's wait: short enough to re-check the deadline often.
POLL_TIMEOUT_MS = 500

#: Rows per Arrow batch handed to Spark.
DEFAULT_BATCH_ROWS = 100_000


class ReplayTimeout(TimeoutError):
    """The offset range of a batch could not be read in time."""


def batch_ranges(start: SourceOffset, end: SourceOffset) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (begin, stop) for every non-empty range of the batch."""
    ranges = {}
    for tp, stop in end.positions.items():
        begin = end.start_of(tp, start)
        if begin > stop:
            raise ValueError(f"batch range for {tp[0]}:{tp[1]} goes backwards: {begin} > {stop}")
        if begin < stop:
            ranges[tp] = (begin, stop)
    return ranges


def replay_consumer(options: SourceOptions) -> KafkaConsumer:
    config = options.kafka_config
    config.pop("group_instance_id", None)  # no group here
    config.update(
        bootstrap_servers=options.bootstrap_servers.split(","),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
        client_id=f"crkafka-replay-{options.group_id}",
    )
    return KafkaConsumer(**config)


def read_range(
    options: SourceOptions,
    start: SourceOffset,
    end: SourceOffset,
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    timeout_s: float = REPLAY_TIMEOUT_S,
) -> list[pa.RecordBatch]:
    """Re-read the records of the batch ``(start, end]`` as Arrow batches."""
    ranges = batch_ranges(start, end)
    if not ranges:
        return []
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    consumer = replay_consumer(options)
    batches: list[pa.RecordBatch] = []
    pending: list = []
    rows = 0
    try:
        tps = {TopicPartition(t, p): r for (t, p), r in ranges.items()}
        consumer.assign(list(tps))
        for tp, (begin, _) in tps.items():
            consumer.seek(tp, begin)
        open_tps = set(tps)
        while open_tps:
            if time.monotonic() > deadline:
                short = {f"{tp.topic}:{tp.partition}": (consumer.position(tp), tps[tp][1]) for tp in open_tps}
                raise ReplayTimeout(f"replay of a batch did not finish in {timeout_s}s; (position, stop) still short: {short}")
            fetched = consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
            for tp, records in fetched.items():
                stop = tps[tp][1]
                if records and records[-1].offset >= stop:
                    records = [r for r in records if r.offset < stop]
                pending.extend(records)
                rows += len(records)
            for tp in list(open_tps):
                if consumer.position(tp) >= tps[tp][1]:
                    open_tps.discard(tp)
                    consumer.pause(tp)
            while len(pending) >= batch_rows:
                batches.append(records_to_batch(pending[:batch_rows]))
                del pending[:batch_rows]
        if pending:
            batches.append(records_to_batch(pending))
    finally:
        consumer.close()
    log.info("replayed %d records of %d partitions in %.2fs (epoch %d)", rows, len(ranges), time.monotonic() - t0, end.epoch)
    return batches
