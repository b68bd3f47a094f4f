"""Where an assigned partition is seeked, as known in memory and in the control plane.

In order of preference (see rebalance.py for who seeks when):

1. the merged checkpoint offset: the map of the last reset, or of the last
   consistent checkpoint the runtime announced (:meth:`SeekTargets.set_merged`),
   kept until a later checkpoint retires it;
2. the partition's control variable: its offset at the job's first start
   (first writer wins in the control plane), cached here once read or written;
3. its start position (rebalance.py, :func:`plan_start`), then saved as its control variable.

Thread state: both maps are replaced, never mutated, so a reader on another
thread (Kafka's IO thread in the rebalance listener) sees one whole map.
"""

from __future__ import annotations

from cr_consumer.kafka.client import TopicPartition
from cr_consumer.operator.control_plane import ControlPlane

Offsets = dict[TopicPartition, int]


class SeekTargets:
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

    def cached_control_variables(self) -> Offsets:
        """Control variables read or written before (they never change: first writer wins)."""
        return self._cached


__all__ = ["SeekTargets"]
