"""Initial offsets of partitions the job sees for the first time.

Runs on the event thread (it calls blocking KafkaClient lookups). The result
is saved as the partition's control variable (first writer wins), so the start
position applies only once per partition and job.

Which partitions get the configured start position (:func:`plan_start`):

1. The job's first start is the moment the group has no control variable at
   all. The member that seeks first then computes the configured start
   position for EVERY partition of its subscription that exists now (not
   only its own assignment) and saves them all in one request, so a partition
   that existed at the first start but is assigned later (to another member,
   or after a restart) still starts at the configured position.
2. After that, a partition without a control variable did not exist (or did
   not match the subscription) at the first start: a topic created later
   that a pattern now matches, or a partition added to a topic. It starts at
   its log start offset (earliest), as Spark's Kafka source does, so records
   written into it before the group was assigned it are read. The configured
   position (LATEST by default through ``auto.offset.reset=latest``) would
   skip them.

The control variables are the record of the first start, so the decision is
the same after any restart of any member. A topic created in the instant
between the first start's metadata snapshot and its save is treated as new
(read from earliest): more records, never fewer.

The configured start positions (:class:`~cr_consumer.kafka.start_position.StartPosition`,
the Spark source's type too; ``OperatorConfig`` accepts these kinds):

* COMMITTED: the group's committed offset, else ``auto.offset.reset``;
* EARLIEST: the log start offset;
* LATEST: the log end offset;
* TIMESTAMP: the first offset whose timestamp is >= the position's
  ``timestamp_ms`` (``offsets_for_times``), else ``auto.offset.reset``.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

import attrs

from coordinator.protocol.common.partitions import partition_label
from cr_consumer.kafka.client import KafkaClient, TopicPartition
from cr_consumer.kafka.start_position import StartKind
from cr_consumer.operator.config import OperatorConfig

log = logging.getLogger(__name__)

#: Bound on each offset lookup so a lost broker fails the assignment handling
#: (and thus the operator) instead of hanging the event thread.
LOOKUP_TIMEOUT_MS = 15000


class NoStartOffset(RuntimeError):
    """auto.offset.reset=none and a partition has no committed offset."""


def _fallback(consumer: KafkaClient, config: OperatorConfig, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    if not tps:
        return {}
    policy = config.auto_offset_reset
    if policy == "earliest":
        return consumer.beginning_offsets(tps, LOOKUP_TIMEOUT_MS)
    if policy == "latest":
        return consumer.end_offsets(tps, LOOKUP_TIMEOUT_MS)
    raise NoStartOffset(
        f"no committed offset for {sorted(tps)} and auto.offset.reset is 'none': "
        "set auto.offset.reset to earliest/latest or choose another start position"
    )


def initial_offsets(
    consumer: KafkaClient, config: OperatorConfig, partitions: Collection[TopicPartition]
) -> dict[TopicPartition, int]:
    """{TopicPartition: offset} for every partition in ``partitions``."""
    tps = sorted(partitions)
    if not tps:
        return {}
    pos = config.start_position
    if pos.kind is StartKind.EARLIEST:
        return consumer.beginning_offsets(tps, LOOKUP_TIMEOUT_MS)
    if pos.kind is StartKind.LATEST:
        return consumer.end_offsets(tps, LOOKUP_TIMEOUT_MS)
    out: dict[TopicPartition, int] = {}
    if pos.kind is StartKind.TIMESTAMP:
        stamp = pos.timestamp_ms
        assert stamp is not None  # OperatorConfig._check_start
        found = consumer.offsets_for_times({tp: stamp for tp in tps}, LOOKUP_TIMEOUT_MS)
        out.update({tp: off for tp, off in found.items() if off is not None})
        out.update(_fallback(consumer, config, [tp for tp in tps if tp not in out]))
        return out
    for tp, committed in consumer.committed(tps, LOOKUP_TIMEOUT_MS).items():
        if committed is not None:
            out[tp] = committed
    out.update(_fallback(consumer, config, [tp for tp in tps if tp not in out]))
    return out


@attrs.frozen
class StartPlan:
    """Which partitions start at the configured position, which at earliest."""

    configured: frozenset[TopicPartition]
    earliest: frozenset[TopicPartition]


def plan_start(
    missing: Collection[TopicPartition], *, group_started: bool, subscribed: Collection[TopicPartition]
) -> StartPlan:
    """Plan the start of ``missing`` (partitions without a control variable).

    ``group_started``: the group has control variables (its first start is
    over); ``subscribed``: every partition of the subscription now.
    """
    if group_started:
        return StartPlan(configured=frozenset(), earliest=frozenset(missing))
    return StartPlan(configured=frozenset(missing) | frozenset(subscribed), earliest=frozenset())


def start_offsets(consumer: KafkaClient, config: OperatorConfig, plan: StartPlan) -> dict[TopicPartition, int]:
    """{TopicPartition: offset} for every partition of ``plan``."""
    out = initial_offsets(consumer, config, plan.configured)
    if plan.earliest:
        earliest = sorted(plan.earliest)
        log.info(
            "%s: partitions first seen after the job's first start begin at their earliest offset: %s",
            config.operator_name,
            [partition_label(tp.topic, tp.partition) for tp in earliest],
        )
        out.update(consumer.beginning_offsets(earliest, LOOKUP_TIMEOUT_MS))
    return out


__all__ = ["NoStartOffset", "StartPlan", "initial_offsets", "plan_start", "start_offsets"]
