"""The librdkafka adapter's view of its partitions: assignment, positions, pauses, deferred seeks.

Pure bookkeeping (no librdkafka call, no confluent-kafka import): each method
changes the state and returns what the adapter must then ask librdkafka to do
(:mod:`cr_consumer.kafka.librdkafka.client`, whose module docstring has the
protocol). Every method runs on the polling thread, except :attr:`PartitionStates.assigned`,
which is replaced (never mutated), so a reader on any thread sees a whole set.

1. While an assignment callback runs (:meth:`PartitionStates.begin_assign` ..
   :meth:`PartitionStates.end_assign`), seeks and pauses of the partitions
   being assigned are collected; the assignment applies them (the seek as the
   start offset, the pause right after it).
2. A partition is paused by the operator (``pause``: :attr:`PartitionStates.paused`,
   what ``KafkaClient.paused`` reports); only what is paused is resumed.
3. A seek of a paused partition is kept and applied right after its
   resume: librdkafka resumes a partition from the position it saved when it
   was paused, not from a seek made meanwhile.
4. A position is the next offset the caller sees: the start offset, a seek,
   or the last record handed out + 1; a record of a paused partition
   that librdkafka still returns is not handed out, and the partition's
   position goes back to it (fetched again after the resume: the deferred seek
   of step 3).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cr_consumer.kafka.client import TopicPartition


class PartitionStates:
    """The adapter's partitions (see the module docstring); polling thread only,
    except :attr:`assigned`."""

    #: The assignment: replaced, never mutated (read on any thread).
    assigned: frozenset[TopicPartition]
    #: Next offset per partition as the caller sees it (step 4).
    positions: dict[TopicPartition, int]
    #: Paused by the operator (step 2).
    paused: set[TopicPartition]
    #: Seeks of paused partitions, applied right after their resume (step 3).
    seek_on_resume: dict[TopicPartition, int]

    def __init__(self) -> None:
        self.assigned = frozenset()
        self.positions = {}
        self.paused = set()
        self.seek_on_resume = {}
        self._assigning: frozenset[TopicPartition] | None = None
        self._pending_seeks: dict[TopicPartition, int] = {}
        self._pending_pauses: set[TopicPartition] = set()

    # -- step 1: an assignment ------------------------------------------------
    @property
    def assigning(self) -> bool:
        """An assignment callback is running."""
        return self._assigning is not None

    def begin_assign(self, partitions: frozenset[TopicPartition]) -> None:
        """The callback for ``partitions`` starts: collect their seeks and pauses."""
        self._pending_seeks, self._pending_pauses = {}, set()
        self._assigning = partitions

    def end_assign(self) -> tuple[dict[TopicPartition, int], set[TopicPartition]]:
        """The listener is done (or failed): the seeks and pauses it made of the partitions being assigned."""
        seeks, pauses = self._pending_seeks, self._pending_pauses
        self._assigning = None
        self._pending_seeks, self._pending_pauses = {}, set()
        return seeks, pauses

    def assigned_at(
        self,
        partitions: frozenset[TopicPartition],
        starts: Mapping[TopicPartition, int],
        pauses: set[TopicPartition],
        *,
        incremental: bool,
    ) -> None:
        """librdkafka assigned ``partitions`` at ``starts`` (added to the assignment
        when ``incremental``, else replacing it) and paused ``pauses``."""
        self.positions.update(starts)
        self.assigned = self.assigned | partitions if incremental else frozenset(partitions)
        self.paused |= pauses

    def gave_up(self, partitions: frozenset[TopicPartition], *, incremental: bool) -> None:
        """librdkafka unassigned ``partitions`` (all of them unless ``incremental``)."""
        self.assigned = self.assigned - partitions if incremental else frozenset()
        self.paused -= partitions
        for tp in partitions:
            self.positions.pop(tp, None)
            self.seek_on_resume.pop(tp, None)

    # -- step 2: pauses ---------------------------------------------------------
    def pause(self, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
        """The operator pauses ``partitions``: those librdkafka must pause now."""
        tps = set(partitions)
        if self._assigning is not None:
            self._pending_pauses |= tps & self._assigning
            tps -= self._assigning
        self.paused |= tps
        return tps

    def resume(self, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
        """The operator resumes ``partitions``: those librdkafka must resume now
        (only what the operator paused; then :meth:`take_seeks`)."""
        tps = set(partitions)
        if self._assigning is not None:
            self._pending_pauses -= tps
        tps &= self.paused
        self.paused -= tps
        return tps

    def withheld(self, partition: TopicPartition) -> bool:
        """Records of ``partition`` are not handed out now (paused)."""
        return partition in self.paused

    # -- steps 3 and 4: seeks and positions ------------------------------------
    def seek(self, partition: TopicPartition, offset: int) -> bool:
        """The operator seeks: True when librdkafka must seek now (then
        :meth:`sought`); otherwise it is collected for the assignment or kept until
        the partition's resume."""
        if self._assigning is not None and partition in self._assigning:
            self._pending_seeks[partition] = offset
            return False
        if self.withheld(partition):
            self.seek_on_resume[partition] = offset
            self.positions[partition] = offset
            return False
        self.seek_on_resume.pop(partition, None)
        return True

    def sought(self, partition: TopicPartition, offset: int) -> None:
        """librdkafka seeked ``partition`` to ``offset``."""
        self.positions[partition] = offset

    def take_seeks(self, resumed: set[TopicPartition]) -> dict[TopicPartition, int]:
        """The kept seeks of the ``resumed`` partitions, which librdkafka must apply now."""
        return {tp: self.seek_on_resume.pop(tp) for tp in sorted(resumed & self.seek_on_resume.keys())}

    def handed_out(self, partition: TopicPartition, next_offset: int) -> None:
        """Records of ``partition`` up to ``next_offset`` - 1 were handed out."""
        self.positions[partition] = next_offset

    def withheld_from(self, partition: TopicPartition, offset: int) -> None:
        """librdkafka returned records of the paused ``partition`` from
        ``offset``: they are fetched again after its resume (an earlier seek or
        refetch is the lower position: it stays)."""
        self.positions[partition] = self.seek_on_resume.setdefault(partition, offset)


__all__ = ["PartitionStates"]
