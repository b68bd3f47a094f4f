"""The Spark input partitions of a batch ``(start, end]``: pure and
deterministic, so a batch planned by one run and replayed by the next reads
the same ranges.

Each partition of ``end`` is read from where the batch starts it
(``end``'s ``from`` entry, else ``start``'s position) to its end, split by
``minPartitions`` (:func:`~cr_consumer.spark.ranges.split_ranges`).
"""

from __future__ import annotations

from cr_consumer.spark.offsets import SourceOffset
from cr_consumer.spark.ranges import OffsetRange, split_ranges


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


__all__ = ["batch_ranges"]
