"""Start offsets of partitions from ``startingOffsets`` / ``startingTimestamp`` / ``...ByTimestamp``.

Used by the streaming planner (a partition's control variable at the query's
first start) and by the batch reader (the start of each range). Lookups go
through the :class:`~cr_consumer.spark.watermarks.WatermarkProbe` (end
offsets from a fetch's high watermark; tansu's ListOffsets "latest" is short
by the rest of the last batch) and, for ``committed``, the group's committed
offsets.

* earliest / latest: the log start / the high watermark;
* committed (crkafka's addition): the group's committed offset, else earliest;
* JSON per partition: the offset given, -2 earliest, -1 latest; a partition
  not listed starts at latest;
* a timestamp: the first offset whose timestamp is at or after it; a
  partition with no record that late (or not listed) starts at latest.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from cr_consumer.kafka.client import TopicPartition
from cr_consumer.kafka.start_position import EARLIEST_OFFSET, LATEST_OFFSET, StartKind, StartPosition
from cr_consumer.spark.options import SourceOptions
from cr_consumer.spark.watermarks import WatermarkProbe


class UnknownTopic(LookupError):
    """A topic listed in ``subscribe`` does not exist (batch read)."""


CommittedLookup = Callable[[list[TopicPartition]], dict[TopicPartition, int]]


def subscribed_partitions(
    options: SourceOptions, probe: WatermarkProbe, *, topics_must_exist: bool = True
) -> list[TopicPartition]:
    """The partitions the subscription covers now: ``assign``'s, or those of the
    listed topics or of the topics the pattern matches (internal topics aside).
    A listed topic that does not exist fails a batch read (:class:`UnknownTopic`);
    with ``topics_must_exist=False`` it is left out (it has nothing to read yet)."""
    if options.assign:
        return [TopicPartition(t, p) for t, p in options.assign]
    listed = probe.partitions()
    if options.pattern is not None:
        pattern = re.compile(options.pattern)
        topics = [t for t in listed if pattern.match(t) and not t.startswith("__")]
    else:
        missing = [t for t in options.topics if not listed.get(t)]
        if missing and topics_must_exist:
            raise UnknownTopic(f"the topics {missing} do not exist (or have no partitions)")
        topics = [t for t in options.topics if t not in missing]
    return sorted(TopicPartition(t, p) for t in topics for p in listed[t])


def end_offsets(options: SourceOptions, tps: list[TopicPartition], probe: WatermarkProbe) -> dict[TopicPartition, int]:
    """``endingOffsets`` of a batch read: the given offset, or the high watermark (latest, -1, not listed)."""
    given = dict(options.ending)
    out = {tp: given[(tp.topic, tp.partition)] for tp in tps if given.get((tp.topic, tp.partition), -1) >= 0}
    out.update(probe.ends([tp for tp in tps if tp not in out]))
    return out


def start_offsets(
    starting: StartPosition, tps: list[TopicPartition], probe: WatermarkProbe, committed: CommittedLookup
) -> dict[TopicPartition, int]:
    """{partition: start offset} for every partition of ``tps``."""
    if not tps:
        return {}
    if starting.kind is StartKind.EARLIEST:
        return probe.beginning(tps)
    if starting.kind is StartKind.LATEST:
        return probe.ends(tps)
    if starting.kind is StartKind.COMMITTED:
        out = committed(tps)
        out.update(probe.beginning([tp for tp in tps if tp not in out]))
        return out
    out = {}
    earliest: list[TopicPartition] = []
    latest: list[TopicPartition] = []
    if starting.kind is StartKind.TIMESTAMP:
        stamps = {tp: stamp for tp in tps if (stamp := starting.value_of(tp.topic, tp.partition)) is not None}
        for stamp in sorted(set(stamps.values())):
            group = [tp for tp, at in stamps.items() if at == stamp]
            found = probe.offsets_for_time(group, stamp)
            out.update({tp: off for tp, off in found.items() if off is not None})
        latest = [tp for tp in tps if tp not in out]
    else:  # SPECIFIC
        for tp in tps:
            value = starting.value_of(tp.topic, tp.partition)
            if value == EARLIEST_OFFSET:
                earliest.append(tp)
            elif value is None or value == LATEST_OFFSET:
                latest.append(tp)
            else:
                out[tp] = value
    out.update(probe.beginning(earliest))
    out.update(probe.ends(latest))
    return out


__all__ = ["UnknownTopic", "end_offsets", "start_offsets", "subscribed_partitions"]
