"""A batch Spark replays from its offset log, planned by an earlier run of the
query: ownership step 4 (``ownership.py``) in the planner's ``partitions``
and its next ``latestOffset`` (``planner.py``).

1. :meth:`Replays.replay`: only the part of the batch still the query's own
   is read (the partitions held now, from the group's commit when that is
   past the start); asked again for the same batch (:meth:`Replays.cached`),
   the same ranges are handed back.
2. The partitions of the batch not held now are *given up*: where the query's
   own output of each ends is kept.
3. :meth:`Replays.resume`: at the next plan, a given-up partition held again
   begins where the query's output of it ended.
4. :meth:`Replays.give_back`: one that this plan leaves out after all (revoked
   meanwhile) keeps that end for a later plan.

Used on the planner's thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from cr_consumer.spark import ownership
from cr_consumer.spark.offsets import SourceOffset, TopicPartitionKey
from cr_consumer.spark.ranges import OffsetRange, batch_ranges, split_ranges

log = logging.getLogger(__name__)


class Replays:
    """The replayed batch's ranges and the partitions given up (the module's steps);
    counts ``replayed_batches`` and ``replay_rows_given_up`` in the planner's ``stats``."""

    def __init__(self, stats: dict[str, int]) -> None:
        self._stats = stats
        self._given_up: dict[TopicPartitionKey, int] = {}  # replayed partitions left to others: where our output ends
        self._replayed: tuple[SourceOffset, SourceOffset, list[OffsetRange]] | None = None

    def cached(self, start: SourceOffset, end: SourceOffset) -> list[OffsetRange] | None:
        """Step 1: the ranges handed back for the batch ``(start, end]`` when it was replayed last."""
        if self._replayed is not None and self._replayed[:2] == (start, end):
            return self._replayed[2]
        return None

    def replay(
        self,
        asked: tuple[SourceOffset, SourceOffset],
        end: SourceOffset,
        holding: list[TopicPartitionKey],
        floors: Mapping[TopicPartitionKey, int],
        min_partitions: int | None,
        skip_backwards: bool,
    ) -> list[OffsetRange]:
        """Steps 1-2 for the batch ``asked`` (its end as this query's: ``end``), holding
        ``holding`` above the group's commits ``floors``."""
        whole = batch_ranges(asked[0], end, None, skip_backwards=skip_backwards)
        kept = ownership.replay_ranges(whole, holding, floors)
        self._given_up.update(ownership.given_up(whole, holding))
        given_up = sum(r.size for r in whole) - sum(r.size for r in kept)
        self._stats["replayed_batches"] += 1
        self._stats["replay_rows_given_up"] += given_up
        log.info(
            "crkafka: replaying epoch %d from Spark's offset log: %d of %d records are still this query's "
            "(the rest is read by the partitions' current owners)",
            end.epoch,
            sum(r.size for r in kept),
            sum(r.size for r in whole),
        )
        out = split_ranges(kept, min_partitions)
        self._replayed = (*asked, out)
        return out

    def resume(self, begins: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
        """Step 3: the given-up partitions among ``begins``, each with where it resumes (no longer kept)."""
        return {key: self._given_up.pop(key) for key in sorted(set(begins) & set(self._given_up))}

    def give_back(self, key: TopicPartitionKey, resume: int) -> None:
        """Step 4: ``key``, resumed by a plan that leaves it out, stays given up at ``resume``."""
        self._given_up[key] = resume


__all__ = ["Replays"]
