"""Offset ranges of a micro-batch: the rate limit and the split into Spark tasks.

Pure functions (no Kafka, no Spark), run in the driver-side source runner:

* :func:`capped_ends` applies ``maxOffsetsPerTrigger`` as Spark's Kafka source
  does: the limit is shared among the partitions in proportion to their
  backlog; a share below one record is rounded up (every partition with a
  backlog advances), a larger one down. So a trigger can exceed the limit
  by at most one record per partition.
* :func:`split_ranges` turns the per-partition ranges into Spark input
  partitions: one per Kafka partition, or, when ``minPartitions`` asks for
  more, each range cut into pieces in proportion to its size (Spark's
  ``KafkaOffsetRangeCalculator``). Deterministic in its inputs, so a batch
  replayed from the offset log is cut the same way.
* :func:`batch_ranges`: the Spark input partitions of a batch ``(start, end]``
  (each partition from where the batch starts it to its end, split as above),
  so a batch planned by one run and replayed by the next reads the same ranges.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs

from cr_consumer.spark.offsets import SourceOffset, TopicPartitionKey


@attrs.frozen
class OffsetRange:
    """Records ``[start, until)`` of one Kafka partition: one Spark task's input."""

    topic: str
    partition: int
    start: int = attrs.field(validator=attrs.validators.ge(0))
    until: int = attrs.field()

    @until.validator
    def _check_until(self, _attribute: attrs.Attribute[int], value: int) -> None:
        if value < self.start:
            raise ValueError(f"offset range of {self.topic}:{self.partition} goes backwards: {self.start} > {value}")

    @property
    def size(self) -> int:
        return self.until - self.start


def capped_ends(
    begins: Mapping[TopicPartitionKey, int], latest: Mapping[TopicPartitionKey, int], limit: int | None
) -> dict[TopicPartitionKey, int]:
    """End offset per partition: ``latest``, or with at most ~``limit`` records in all."""
    ends = {tp: max(latest[tp], begin) for tp, begin in begins.items()}
    backlog = {tp: ends[tp] - begins[tp] for tp in begins}
    total = sum(backlog.values())
    if limit is None or total <= limit:
        return ends
    out = {}
    for tp, begin in begins.items():
        share = limit * backlog[tp] / total
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(ends[tp], begin + step)
    return out


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Spark input partitions for ``ranges`` (empty ranges dropped)."""
    ranges = [r for r in ranges if r.size > 0]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out = []
    for r in ranges:
        parts = max(round(r.size / total * min_partitions), 1)
        remaining, start = r.size, r.start
        for part in range(parts):
            piece = remaining // (parts - part)  # the last piece takes the rounding
            remaining -= piece
            until = min(start + piece, r.until)
            if until > start:
                out.append(OffsetRange(r.topic, r.partition, start, until))
            start = until
    return out


def batch_ranges(
    start: SourceOffset, end: SourceOffset, min_partitions: int | None, *, skip_backwards: bool = False
) -> list[OffsetRange]:
    """The Spark input partitions of the batch ``(start, end]`` (pure, deterministic).
    A partition whose end is below its start was skipped for data loss when the
    batch was planned with ``failOnDataLoss=false`` (``skip_backwards``): it has no
    range; otherwise such a pair of offsets is refused (ValueError). A batch whose
    end is its start is empty: ``latestOffset`` returns its start unchanged when
    nothing is new (Spark then runs no batch), and that start's ``from`` entries
    belong to the batch that ended there, already read."""
    if end == start:
        return []
    ranges = []
    for (topic, partition), until in sorted(end.positions.items()):
        begin = end.start_of((topic, partition), start)
        if until >= begin or not skip_backwards:
            ranges.append(OffsetRange(topic, partition, begin, until))
    return split_ranges(ranges, min_partitions)


__all__ = ["OffsetRange", "batch_ranges", "capped_ends", "split_ranges"]
