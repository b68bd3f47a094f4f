"""Which query of a consumer group reads which offsets: the rules that keep the
union of several queries' outputs exactly once (pure: no Kafka, no Spark).

Several Spark queries (own checkpoint locations, own outputs) may share one
Kafka consumer group. The group's committed offset of a partition is the
boundary between them. The invariant:

    **Everything below a partition's committed offset is in the committed
    output of some query; nothing at or above it is in any query's committed
    output, and only the query that holds the partition in the group reads
    there.**

The steps that keep it:

1. **Commit only what the sink committed.** A query commits an end to the
   group only once Spark has shown that the sink committed the batch that
   ends there: ``latestOffset(start)`` is called after the batch ending at
   ``start`` is in Spark's commit log (and ``commit(end)`` later still). A
   batch in flight is never committed, so a query that stops for good (or is
   killed) leaves its in-flight ranges below no commit: the next owner reads
   them (:func:`commit_positions`).
2. **Never move a commit backwards.** A query commits a partition only while
   it holds it (or hands it over), and never below the offset it knows the
   group has committed (its floor: a handed-over partition's commit by the
   previous owner may be ahead of this query's own position).
3. **Start a newly held partition at the group's commit when that is ahead.**
   A partition that comes to a query (a rebalance, a restart) begins at the
   group's committed offset when another owner has read past the query's own
   position (:func:`begin_after_adoption`). The query's own position is where
   its output of the partition ends: the end of its last batch, or the start
   of a replayed range it gave up (step 4), which is behind that end.
4. **A replayed batch reads only what is still its own.** A batch in Spark's
   offset log but not in its commit log is replayed on restart with the same
   offsets; by then another query may have taken the partition and read the
   range. The replaying query first joins the group, then reads, per
   partition, only while it holds the partition, and only from the group's
   committed offset when that is ahead of the batch's start
   (:func:`replay_ranges`). A range is so read by exactly one query, whether
   or not a stopped query ever restarts. A partition given up so is resumed,
   if it comes back, from the start of the range given up (step 3), not from
   the end in Spark's offset log (:func:`given_up`).
5. **Hand over after the commit.** A revoked partition is released (the
   rebalance completes) only once every range planned for it is committed
   (:func:`handed_over`), so its next owner starts after them. A partition
   revoked while a batch is being planned is left out of that batch: the
   planner hands a batch to Spark and the member checks the handover under
   one lock, so either the check sees the batch or the batch skips the
   partition.

What this cannot close: the moment between the sink's own commit of a batch
and the query's commit to the group (Spark's commit-log write and the next
``latestOffset``: microseconds with the default trigger, up to the trigger
interval with ``processingTime``). A query killed in that moment *and never
restarted* leaves a batch whose records are in its output but below no
commit; the next owner reads them again. ``docs/spark.md`` states it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cr_consumer.spark.offsets import TopicPartitionKey
from cr_consumer.spark.ranges import OffsetRange


def commit_positions(
    positions: Mapping[TopicPartitionKey, int],
    holding: Iterable[TopicPartitionKey],
    floors: Mapping[TopicPartitionKey, int],
) -> dict[TopicPartitionKey, int]:
    """Steps 1-2: of a sink-committed end's ``positions``, those to commit: the
    partitions held (or being handed over), never below the group's known commit."""
    held = set(holding)
    return {tp: off for tp, off in positions.items() if tp in held and off >= floors.get(tp, -1)}


def begin_after_adoption(begin: int, committed: int | None) -> int:
    """Step 3: where a newly held partition begins: the query's own position, or
    the group's commit when another owner has read past it."""
    return begin if committed is None or committed <= begin else committed


def replay_ranges(
    ranges: Iterable[OffsetRange], holding: Iterable[TopicPartitionKey], committed: Mapping[TopicPartitionKey, int]
) -> list[OffsetRange]:
    """Step 4: the part of a replayed batch's ``ranges`` that is still this query's:
    partitions it holds now, from the group's commit when that is past the start."""
    held = set(holding)
    out = []
    for rng in ranges:
        key = (rng.topic, rng.partition)
        if key not in held:
            continue
        begin = begin_after_adoption(rng.start, committed.get(key))
        if begin < rng.until:
            out.append(OffsetRange(rng.topic, rng.partition, begin, rng.until))
    return out


def given_up(ranges: Iterable[OffsetRange], holding: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
    """Step 4: the partitions of a replayed batch's ``ranges`` that the query gives
    up entirely (not held), each with where its own output of it ends."""
    held = set(holding)
    out: dict[TopicPartitionKey, int] = {}
    for rng in ranges:
        key = (rng.topic, rng.partition)
        if key not in held:
            out[key] = min(rng.start, out.get(key, rng.start))
    return out


def handed_over(
    revoked: Iterable[TopicPartitionKey],
    planned: Mapping[TopicPartitionKey, int],
    floors: Mapping[TopicPartitionKey, int],
) -> bool:
    """Step 5: every range planned for ``revoked`` is below the group's commit."""
    return all(floors.get(tp, -1) >= planned[tp] for tp in revoked if tp in planned)


__all__ = ["begin_after_adoption", "commit_positions", "given_up", "handed_over", "replay_ranges"]
