"""The consumer operators of one ``crkafka`` stream: configs, start, commit, close.

Each member is a :class:`~cr_consumer.operator.ConsumerOperator` with its own
:class:`~cr_consumer.region.RegionPermit` (so it is not standalone: nothing
drains or commits behind the source's back), submitting its batches to the
shared :class:`~cr_consumer.spark.buffer.BatchBuffer`. Member names are
``crkafka-<i>``: unique in the group and the same after a restart, so a
restarted runner re-registers under the same names.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from kafka import TopicPartition
from kafka.structs import OffsetAndMetadata

from cr_consumer.config import ConfigError, OperatorConfig
from cr_consumer.spark.options import InvalidOptionError, SourceOptions

log = logging.getLogger(__name__)

#: Bound on one member's synchronous offset commit on its event thread (one
#: short poll plus a broker round trip); a dead broker fails the commit
#: instead of hanging Spark's commit call.
COMMIT_TIMEOUT_S = 15.0

#: Records per poll when the user sets none: large polls mean fewer batches
#: through the member's queue and fewer Arrow chunks.
DEFAULT_MAX_POLL_RECORDS = 2000


def member_name(i: int) -> str:
    return f"crkafka-{i}"


def member_configs(options: SourceOptions) -> list[OperatorConfig]:
    """One OperatorConfig per member; a contradiction raises InvalidOptionError."""
    props = dict(options.consumer_properties)
    max_poll = int(props.pop("max.poll.records", DEFAULT_MAX_POLL_RECORDS))
    instance = props.pop("group.instance.id", None)  # static membership: one id per member

    def member_props(i: int) -> dict:
        return {**props, "group.instance.id": f"{instance}-{i}"} if instance else props

    try:
        return [
            OperatorConfig(
                bootstrap_servers=options.bootstrap_servers,
                group_id=options.group_id,
                operator_name=member_name(i),
                coordinator=options.coordinator,
                topics=options.topics,
                pattern=options.pattern,
                region_index=options.region_index,
                start_position=options.start_position,
                start_time=options.start_time_ms,
                max_poll_records=max_poll,
                consumer_properties=member_props(i),
            )
            for i in range(options.members)
        ]
    except ConfigError as exc:
        raise InvalidOptionError("kafka.*", f"the member configuration is invalid: {exc}") from exc


def commit_plan(
    positions: Mapping[tuple[str, int], int], assignments: list[list[TopicPartition]]
) -> list[dict[TopicPartition, OffsetAndMetadata]]:
    """Split ``positions`` by current owner; partitions nobody owns go to member 0."""
    plan: list[dict[TopicPartition, OffsetAndMetadata]] = [{} for _ in assignments]
    owner = {tp: i for i, tps in enumerate(assignments) for tp in tps}
    for (topic, partition), off in positions.items():
        tp = TopicPartition(topic, partition)
        plan[owner.get(tp, 0)][tp] = OffsetAndMetadata(off, "", -1)
    return plan


def commit_through(member, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
    """Synchronously commit ``offsets`` on the member's event thread (it owns the consumer)."""
    if not offsets:
        return

    def commit(consumer):
        consumer.commit(offsets)

    member.events.call(commit, COMMIT_TIMEOUT_S, "spark batch commit")
