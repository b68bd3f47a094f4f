"""The Spark source runner's ``/metrics``: the planner's ``crkafka_spark_*`` counters
and each group member's ``crkafka_consumer_*`` offsets.

The driver's group members read no records (the executors do), so the
record-path metrics of a region member (drains, resets, records submitted,
queue pauses) do not exist here. What a member has, and what the dashboard's
per-partition panels show, is served under the same names and labels as a
region member's (``operator`` = the member's name, ``topic``, ``partition``):

1. ``crkafka_consumer_assigned_partitions`` and ``crkafka_consumer_consumed_topics``:
   the member's assignment now;
2. per held partition ``crkafka_consumer_position`` (the end of the last range
   planned: the next offset to plan), ``crkafka_consumer_end_offset`` (the high
   watermark probed at the last trigger), ``crkafka_consumer_lag``
   (``end_offset - position``: records not yet planned) and
   ``crkafka_consumer_committed_offset`` (the last offset this member committed).

The collector runs on the endpoint's HTTP thread; it reads
:class:`MemberOffsets` snapshots that the planner builds from maps it replaces
as a whole (never mutates), so one scrape sees consistent values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import attrs
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric

from cr_consumer.operator.metrics import PARTITION_GAUGES, PREFIX, StatsCollector
from cr_consumer.spark.offsets import TopicPartitionKey

#: The planner's counters (``QueryPlanner.stats`` keys) as ``crkafka_spark_<key>_total``.
PLANNER_COUNTERS = {
    "batches": "Micro-batches planned with new offset ranges",
    "planned_rows": "Records in the planned offset ranges (read by the executors)",
    "commit_failures": "Offset commits to Kafka that failed (retried at the next trigger)",
    "commits": "Offset commits to Kafka",
    "data_loss_skips": "Partitions whose end went below their start, skipped to the end (failOnDataLoss=false)",
    "replayed_batches": "Batches replayed from Spark's offset log after a restart",
    "replay_rows_given_up": "Records of replayed batches left to the partitions' current owners",
}
SPARK_PREFIX = "crkafka_spark_"


@attrs.frozen
class MemberOffsets:
    """One group member's assignment and offsets, as the planner knows them at a scrape."""

    name: str
    assigned: frozenset[TopicPartitionKey]
    #: per held partition: the end of the last planned range
    position: Mapping[TopicPartitionKey, int]
    #: per held partition: the high watermark probed at the last trigger
    end_offset: Mapping[TopicPartitionKey, int]
    #: per held partition: the last offset this member committed
    committed_offset: Mapping[TopicPartitionKey, int]

    def row(self, tp: TopicPartitionKey) -> dict[str, int]:
        """The per-partition gauges known for ``tp`` (names of PARTITION_GAUGES)."""
        out: dict[str, int] = {}
        if tp in self.position:
            out["position"] = self.position[tp]
        if tp in self.end_offset:
            out["end_offset"] = self.end_offset[tp]
            if tp in self.position:
                out["lag"] = max(0, self.end_offset[tp] - self.position[tp])
        if tp in self.committed_offset:
            out["committed_offset"] = self.committed_offset[tp]
        return out


class MembersCollector:
    """``crkafka_consumer_*`` of the planner's group members (read at every scrape)."""

    def __init__(self, members: Callable[[], list[MemberOffsets]]) -> None:
        self._members = members

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        members = self._members()
        assigned = GaugeMetricFamily(
            PREFIX + "assigned_partitions", "Partitions currently assigned", labels=["operator"]
        )
        topics = GaugeMetricFamily(PREFIX + "consumed_topics", "Topics of the assigned partitions", labels=["operator"])
        for member in members:
            assigned.add_metric([member.name], len(member.assigned))
            topics.add_metric([member.name], len({topic for topic, _ in member.assigned}))
        yield assigned
        yield topics
        rows = [(member.name, tp, member.row(tp)) for member in members for tp in sorted(member.assigned)]
        for metric, doc in PARTITION_GAUGES:
            gauge = GaugeMetricFamily(PREFIX + metric, doc, labels=["operator", "topic", "partition"])
            for name, (topic, partition), row in rows:
                if metric in row:
                    gauge.add_metric([name, topic, str(partition)], row[metric])
            yield gauge


def runner_registry(
    stats: Callable[[], Mapping[str, int]], members: Callable[[], list[MemberOffsets]]
) -> CollectorRegistry:
    """The registry the runner's endpoint serves: planner counters and member offsets."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(StatsCollector(SPARK_PREFIX, stats, PLANNER_COUNTERS))
    registry.register(MembersCollector(members))
    return registry


__all__ = ["PLANNER_COUNTERS", "MemberOffsets", "MembersCollector", "runner_registry"]
