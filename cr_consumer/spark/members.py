"""The consumer operators of one ``crkafka`` stream: configs, start, commit, close.

Each member is a :class:`~cr_consumer.operator.consumer.ConsumerOperator` with its own
:class:`~cr_consumer.operator.region.RegionPermit` (so it is not standalone: nothing
drains or commits behind the source's back), submitting its batches to the
shared :class:`~cr_consumer.spark.buffer.BatchBuffer`. Member names are
``crkafka-<i>``: unique in the group and the same after a restart, so a
restarted runner re-registers under the same names.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from kafka import TopicPartition
from kafka.errors import KafkaTimeoutError
from kafka.structs import OffsetAndMetadata

from cr_consumer.operator.config import ConfigError, OperatorConfig
from cr_consumer.spark.options import InvalidOptionError, SourceOptions

log = logging.getLogger(__name__)

#: Bound on one member's synchronous offset commit, given to kafka-python
#: itself: it retries a commit for as long as the broker answers with a
#: retriable error (a rebalance in progress; a partition whose topic was
#: deleted: UNKNOWN_TOPIC_OR_PARTITION, for ever), on the member's event
#: thread, which then neither polls (the group's rebalance and heartbeats
#: wait) nor serves a reset. Past it the commit fails with
#: :class:`CommitTimedOut` and is retried at the next read or commit.
COMMIT_TIMEOUT_S = 5.0
#: Extra wait for the commit event beyond COMMIT_TIMEOUT_S: the event may
#: queue behind one poll, and the topic check may refresh the metadata once.
COMMIT_EVENT_MARGIN_S = 5.0

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


class CommitTimedOut(RuntimeError):
    """A member's offset commit did not complete within COMMIT_TIMEOUT_S."""


def live_offsets(consumer, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> tuple[dict, set]:
    """Split ``offsets`` into (partitions that exist, partitions that do not).

    Existence is the consumer's cluster metadata (kafka-python refreshes it
    every ``metadata.max.age.ms``; a topic it does not know is looked up once).
    A deleted topic's partition stays in the source's offsets (Spark's offset
    log is authoritative), but committing it would fail every commit.
    """
    known: dict[str, set[int]] = {}
    live: dict[TopicPartition, OffsetAndMetadata] = {}
    gone: set[TopicPartition] = set()
    for tp, off in offsets.items():
        if tp.topic not in known:
            known[tp.topic] = set(consumer.partitions_for_topic(tp.topic) or ())
        if tp.partition in known[tp.topic]:
            live[tp] = off
        else:
            gone.add(tp)
    return live, gone


def commit_through(member, offsets: dict[TopicPartition, OffsetAndMetadata]) -> set[TopicPartition]:
    """Synchronously commit ``offsets`` on the member's event thread (it owns the consumer).

    1. On the event thread, drop the partitions whose topic no longer exists
       (:func:`live_offsets`);
    2. commit the rest, bounded by COMMIT_TIMEOUT_S (:class:`CommitTimedOut`).

    Returns the dropped partitions.
    """
    if not offsets:
        return set()

    def commit(consumer):
        live, gone = live_offsets(consumer, offsets)
        if live:
            try:
                consumer.commit(live, timeout_ms=int(COMMIT_TIMEOUT_S * 1000))
            except KafkaTimeoutError:
                raise CommitTimedOut(
                    f"{member.name}: committing {len(live)} partitions did not complete within {COMMIT_TIMEOUT_S}s "
                    "(broker unreachable or a rebalance in progress)") from None
            member.stats.set_committed({tp: off.offset for tp, off in live.items()})
        return gone

    return member.events.call(commit, COMMIT_TIMEOUT_S + COMMIT_EVENT_MARGIN_S, "spark batch commit")
