"""The rate limit and the split of offset ranges into Spark tasks (pure)."""

from __future__ import annotations

import itertools

import pytest

from cr_consumer.spark.offsets import SourceOffset
from cr_consumer.spark.ranges import OffsetRange, batch_ranges, capped_ends, split_ranges


def test_no_limit_reads_everything_and_never_goes_back():
    begins = {("a", 0): 10, ("a", 1): 5}
    assert capped_ends(begins, {("a", 0): 30, ("a", 1): 3}, None) == {("a", 0): 30, ("a", 1): 5}


def test_limit_is_shared_by_backlog_and_every_backlog_advances():
    begins = {("a", 0): 0, ("a", 1): 0, ("a", 2): 0}
    ends = capped_ends(begins, {("a", 0): 900, ("a", 1): 100, ("a", 2): 1}, 100)
    assert ends == {("a", 0): 89, ("a", 1): 9, ("a", 2): 1}  # 89.9 -> 89, 9.99 -> 9, 0.0999 -> 1
    assert sum(ends.values()) <= 100 + len(begins)


def test_split_by_min_partitions_covers_each_range_exactly():
    ranges = [OffsetRange("a", 0, 0, 1000), OffsetRange("a", 1, 50, 150), OffsetRange("a", 2, 7, 7)]
    assert split_ranges(ranges, None) == ranges[:2]  # empty ranges dropped
    assert split_ranges(ranges, 2) == ranges[:2]
    pieces = split_ranges(ranges, 11)
    for r in ranges[:2]:
        mine = [p for p in pieces if p.partition == r.partition]
        assert mine[0].start == r.start
        assert mine[-1].until == r.until
        assert all(a.until == b.start for a, b in itertools.pairwise(mine))
    assert len([p for p in pieces if p.partition == 0]) == 10
    assert len(pieces) == 11


def test_batch_ranges_use_from_for_new_partitions():
    start = SourceOffset(epoch=1, positions={("a", 0): 5})
    end = SourceOffset(epoch=2, positions={("a", 0): 12, ("b", 0): 9}, first={("b", 0): 3})
    assert batch_ranges(start, end, None) == [OffsetRange("a", 0, 5, 12), OffsetRange("b", 0, 3, 9)]
    with pytest.raises(ValueError, match="backwards"):
        batch_ranges(SourceOffset(epoch=1, positions={("a", 0): 20}), end, None)
    # nothing new: latestOffset returned its start, whose ``from`` entries were read by the batch ending there
    assert batch_ranges(end, end, None) == []
    # failOnDataLoss=false: a partition skipped for data loss when planned has no range
    skipped = batch_ranges(SourceOffset(epoch=1, positions={("a", 0): 20}), end, None, skip_backwards=True)
    assert skipped == [OffsetRange("b", 0, 3, 9)]


def test_a_task_partition_that_is_not_a_range_is_refused_by_name():
    from pyspark.sql.datasource import InputPartition

    from cr_consumer.spark.reader import RangePartition, range_of

    rng = OffsetRange("t", 0, 3, 9)
    assert range_of(RangePartition(rng)) == rng
    with pytest.raises(TypeError, match="crkafka reads RangePartition tasks, got InputPartition"):
        range_of(InputPartition(1))
