"""Where an assigned partition is seeked, in order of preference:

1. its merged checkpoint offset: the map of the last reset, or of the last
   consistent checkpoint the runtime announced, kept until a later checkpoint
   retires it (:class:`SeekTargets`);
2. its control variable: its offset at the job's first start (first writer
   wins in the control plane), cached once read or written (:class:`SeekTargets`);
3. its start position (:func:`plan_start`, :func:`start_offsets`), then saved
   as its control variable.

The rebalancer (``rebalance.py``) seeks to these targets after an assignment,
the region handlers (``handlers.py``) after a reset; the handlers also keep
the merged map (set by a reset, dropped by a retire). docs/operator.md, "Start
positions", tells why a partition first seen after the job's first start
begins at its earliest offset.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

import attrs

from coordinator.protocol.common.partitions import partition_label
from cr_consumer.kafka.client import KafkaClient, TopicPartition
from cr_consumer.kafka.start_position import StartKind
from cr_consumer.operator.config import OperatorConfig
from cr_consumer.operator.control_plane import ControlPlane

log = logging.getLogger(__name__)

Offsets = dict[TopicPartition, int]

#: Bound on each offset lookup so a lost broker fails the assignment handling
#: (and thus the operator) instead of hanging the event thread.
LOOKUP_TIMEOUT_MS = 15000


class SeekTargets:
    """Steps 1 and 2 of the module docstring: the targets known in memory and in
    the control plane.

    Both maps are replaced, never mutated, so a reader on another thread
    (Kafka's IO thread in the rebalance listener) sees one whole map.
    """

    #: (checkpoint id, merged offsets) or None. Written by the handler caller's
    #: thread (reset, retire) and the runtime's thread (set_merged); read by the
    #: event thread and Kafka's IO thread. No lock: replaced as a whole.
    _merged: tuple[int, Offsets] | None
    #: Control variables read or written so far. Written on the event thread;
    #: read on Kafka's IO thread. No lock: replaced as a whole.
    _cached: Offsets

    def __init__(self, control: ControlPlane, group_id: str) -> None:
        self._control = control
        self._group_id = group_id
        self._merged = None
        self._cached = {}

    def known(self, tps: Collection[TopicPartition]) -> Offsets:
        """The targets of ``tps`` known in memory (merged offset, else a control
        variable read or written before: they never change, first writer wins):
        no round trip, so the rebalance listener may seek them."""
        merged = self.merged() or {}
        cached = self._cached
        out = {}
        for tp in tps:
            if tp in merged:
                out[tp] = merged[tp]
            elif tp in cached:
                out[tp] = cached[tp]
        return out

    # -- merged checkpoint offsets ----------------------------------------------
    def merged(self) -> Offsets | None:
        return self._merged[1] if self._merged is not None else None

    def set_merged(self, seq: int, offsets: Offsets) -> None:
        """The offsets of checkpoint ``seq`` (from a reset's merge, or the last
        consistent checkpoint): partitions assigned later start there."""
        self._merged = (seq, offsets)

    def clear_merged(self) -> None:
        self._merged = None

    def retire(self, seq: int) -> None:
        """Drop the merged map if it belongs to a checkpoint <= ``seq``."""
        merged = self._merged
        if merged is not None and merged[0] <= seq:
            self._merged = None

    # -- control variables ----------------------------------------------------
    def control_variables(self) -> Offsets:
        """Every control variable of the group (a control-plane round trip)."""
        cv = self._control.get_initial_offsets(self._group_id)
        out = {TopicPartition(t, p): int(o) for (t, p), o in cv.items()}
        self._cached = {**self._cached, **out}
        return out

    def save_control_variables(self, offsets: Offsets) -> Offsets:
        """Save first-writer-wins; return the effective values (another member's may win)."""
        eff = self._control.put_initial_offsets(
            self._group_id, {(tp.topic, tp.partition): o for tp, o in offsets.items()}
        )
        out = {TopicPartition(t, p): int(o) for (t, p), o in eff.items()}
        self._cached = {**self._cached, **out}
        return out


# -- step 3: start positions ----------------------------------------------------
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
    over); ``subscribed``: every partition of the subscription now. At the
    job's first start every subscribed partition gets the configured position;
    later, a partition without a control variable appeared since and starts at
    earliest (docs/operator.md, "Start positions", has the reasons). The
    offsets (:func:`start_offsets`) become the control variables.
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


__all__ = [
    "LOOKUP_TIMEOUT_MS",
    "NoStartOffset",
    "SeekTargets",
    "StartPlan",
    "initial_offsets",
    "plan_start",
    "start_offsets",
]
