"""A partition whose log end went below the offset a batch starts at: step 5
of the planner's ``latestOffset`` (``planner.py``), as in Spark's Kafka source.

Such a partition lost data (its topic was deleted and created again, or
``startingOffsets`` named an offset past the end). :func:`skip_lost` decides
what follows, by the ``failOnDataLoss`` option:

- true: the query fails (:class:`DataLossInPlan`, naming the partition and
  the option that lets it go on);
- false: a warning is logged and the partition goes on from its log end (the
  offsets in between are skipped: an empty range ends there).
"""

from __future__ import annotations

import logging

from cr_consumer.spark.offsets import TopicPartitionKey
from cr_consumer.spark.planning_failed import PlanningFailed

log = logging.getLogger(__name__)


class DataLossInPlan(PlanningFailed):
    """A partition's end went below its start and failOnDataLoss is true."""


def skip_lost(
    begins: dict[TopicPartitionKey, int], latest: dict[TopicPartitionKey, int], fail_on_data_loss: bool
) -> int:
    """Partitions whose end is below their start: fail, or move their start to
    the end (``begins`` is changed in place); returns how many were skipped."""
    skipped = 0
    for key, begin in sorted(begins.items()):
        end = latest.get(key)
        if end is None or end >= begin:
            continue
        topic, partition = key
        if fail_on_data_loss:
            raise DataLossInPlan(
                f"crkafka: {topic}:{partition}'s offset went from {begin} back to {end} (the end of its log): "
                f"some data may have been lost (the topic was deleted and created again, or startingOffsets "
                f"names an offset past the end). Set the source option failOnDataLoss=false to go on from {end}"
            )
        skipped += 1
        log.warning(
            "crkafka: %s:%d's offset went from %d back to %d (the end of its log): some data may have "
            "been lost; going on from %d (failOnDataLoss=false)",
            topic,
            partition,
            begin,
            end,
            end,
        )
        begins[key] = end
    return skipped


__all__ = ["DataLossInPlan", "skip_lost"]
