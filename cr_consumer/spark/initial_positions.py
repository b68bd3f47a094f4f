"""Where a partition absent from a batch's start begins: step 4 of the
planner's ``latestOffset`` (``planner.py``).

Each such partition begins at its control variable in the coordinator (the
query's coordinator group), put once, first writer wins, so every runner of
the query (and a restart of this one) agrees:

1. The control variables already put are read; a partition that has one
   begins there.
2. A partition without one gets it computed and put: the configured start
   position (``startingOffsets`` ..., :func:`~cr_consumer.spark.positions.start_offsets`)
   while the query has no control variable and ``start`` no position (its
   first start); otherwise its earliest offset (a partition that appeared
   later: a new topic on a pattern), as in Spark.
3. Where another runner put first, its value is the one used.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from cr_consumer.kafka.client import TopicPartition
from cr_consumer.kafka.start_position import StartKind
from cr_consumer.spark.offsets import SourceOffset, TopicPartitionKey, partition_key
from cr_consumer.spark.options import SourceOptions
from cr_consumer.spark.positions import CommittedLookup, start_offsets
from cr_consumer.spark.watermarks import WatermarkProbe

if TYPE_CHECKING:
    from coordinator.client import CoordinatorClient

log = logging.getLogger(__name__)


def initial_positions(
    client: CoordinatorClient,
    coordinator_group: str,
    options: SourceOptions,
    probe: WatermarkProbe,
    committed: CommittedLookup,
    start: SourceOffset,
    tps: list[TopicPartition],
) -> dict[TopicPartitionKey, int]:
    """The begin of each of ``tps`` (partitions absent from ``start``; the module's steps).
    ``committed`` reads the group's committed offsets (``startingOffsets=group``)."""
    if not tps:
        return {}
    known = client.get_initial_offsets(coordinator_group)
    missing = [tp for tp in tps if partition_key(tp) not in known]
    if missing:
        first_start = not known and not start.positions
        computed = (
            start_offsets(options.starting_or(StartKind.LATEST), missing, probe, committed)
            if first_start
            else probe.beginning(missing)
        )
        if not first_start:
            log.info(
                "crkafka: partitions first seen after the query's first start begin at earliest: %s",
                sorted(map(str, missing)),
            )
        known.update(
            client.put_initial_offsets(coordinator_group, {partition_key(tp): off for tp, off in computed.items()})
        )
    return {partition_key(tp): known[partition_key(tp)] for tp in tps}


__all__ = ["initial_positions"]
