"""Offset lookups of the librdkafka adapter: each one broker request, bounded by
its ``timeout_ms`` (:class:`~cr_consumer.kafka.client.ClientTimeout` past it).

1. ``committed``: the group's committed offsets (OffsetFetch); None for a
   partition without one.
2. ``beginning_offsets`` / ``end_offsets``: the partition's watermarks
   (ListOffsets), one request per partition, all within one ``timeout_ms``.
3. ``offsets_for_times``: the first offset at or after a timestamp; None past the end.
4. ``start_offsets``: where a partition assigned without a seek starts (the
   committed offset, else what ``auto.offset.reset`` names); see
   :meth:`OffsetLookups.start_offsets` for why the adapter resolves it itself.
5. ``reset_offset``: the offset ``auto.offset.reset`` names for one partition.

A lookup that fails raises (never an answer that looks like "no offset"):
:func:`~cr_consumer.kafka.librdkafka.errors.raise_for`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition

from cr_consumer.kafka.client import KafkaClientError, TopicPartition
from cr_consumer.kafka.librdkafka.errors import call_mapped, raise_for

#: Offsets below 0 are librdkafka's "no offset" markers (OFFSET_INVALID, _END, ...).
NO_OFFSET = 0
#: ``auto.offset.reset`` values that name the low / the high watermark.
EARLIEST = frozenset({"earliest", "smallest", "beginning"})
LATEST = frozenset({"latest", "largest", "end"})


def ck(tp: TopicPartition, offset: int | None = None) -> CkTopicPartition:
    """confluent-kafka's TopicPartition for ``tp`` (at ``offset``)."""
    if offset is None:
        return CkTopicPartition(tp.topic, tp.partition)
    return CkTopicPartition(tp.topic, tp.partition, offset)


def _offsets_of(found: list[CkTopicPartition], what: str) -> dict[TopicPartition, int | None]:
    """librdkafka's per-partition answer: an error raises (``raise_for``); an
    offset below ``NO_OFFSET`` (none stored, none found) is None."""
    out: dict[TopicPartition, int | None] = {}
    for p in found:
        if p.error is not None:
            raise_for(f"{what} of {p.topic}[{p.partition}]", p.error)
        out[TopicPartition(p.topic, p.partition)] = p.offset if p.offset >= NO_OFFSET else None
    return out


class OffsetLookups:
    """The lookups of the module docstring, on the adapter's consumer (its owner's thread)."""

    def __init__(self, consumer: Consumer, auto_offset_reset: str) -> None:
        self._consumer = consumer
        self.auto_offset_reset = auto_offset_reset

    def committed(self, partitions: Iterable[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int | None]:
        request = [ck(tp) for tp in partitions]
        if not request:
            return {}
        found = call_mapped("committed offsets", lambda: self._consumer.committed(request, timeout=timeout_ms / 1000))
        return _offsets_of(found, "committed offset")

    def watermarks(
        self, partitions: Iterable[TopicPartition], timeout_ms: int
    ) -> dict[TopicPartition, tuple[int, int]]:
        end = time.monotonic() + timeout_ms / 1000
        out = {}
        for tp in partitions:
            left = max(0.001, end - time.monotonic())

            def query(tp: TopicPartition = tp, left: float = left) -> tuple[int, int]:
                low, high = self._consumer.get_watermark_offsets(ck(tp), timeout=left)
                return int(low), int(high)

            out[tp] = call_mapped(f"watermarks of {tp}", query)
        return out

    def beginning_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int]:
        return {tp: low for tp, (low, _high) in self.watermarks(partitions, timeout_ms).items()}

    def end_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int]:
        return {tp: high for tp, (_low, high) in self.watermarks(partitions, timeout_ms).items()}

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout_ms: int
    ) -> dict[TopicPartition, int | None]:
        request = [ck(tp, int(ts)) for tp, ts in timestamps.items()]
        if not request:
            return {}
        found = call_mapped(
            "offsets for times", lambda: self._consumer.offsets_for_times(request, timeout=timeout_ms / 1000)
        )
        return _offsets_of(found, "offset for time")

    def reset_offset(self, partition: TopicPartition, timeout_ms: int) -> int:
        """Step 5; KafkaClientError for a policy that names no watermark."""
        if self.auto_offset_reset in EARLIEST:
            return self.beginning_offsets([partition], timeout_ms)[partition]
        if self.auto_offset_reset in LATEST:
            return self.end_offsets([partition], timeout_ms)[partition]
        raise KafkaClientError(
            f"position of {partition}: no committed offset and auto.offset.reset is {self.auto_offset_reset!r}"
        )

    def start_offsets(self, tps: Iterable[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int]:
        """Absolute start offsets of partitions assigned without a seek: the
        committed offset, else what ``auto.offset.reset`` names (the low or high
        watermark); none for a policy that is neither (librdkafka then reports
        the partition's error itself).

        Assigned at a logical offset, librdkafka looks the offset up itself, and a
        seek made while that lookup is in flight (the operator seeks a partition it
        held at the assignment once the region tells it where) makes the lookup's
        answer outdated: librdkafka then re-arms the lookup of the same logical
        offset on a timer and, half a second after the seek, moves the fetch to
        the log end, skipping every record in between while the operator's
        offsets (and so its commits) follow. Assigned at an absolute offset, no
        lookup is ever started. Bounded by ``timeout_ms`` in all; a failed lookup raises."""
        tps = set(tps)
        if not tps:
            return {}
        end = time.monotonic() + timeout_ms / 1000
        out = {tp: off for tp, off in self.committed(tps, timeout_ms).items() if off is not None}
        rest = tps - out.keys()
        left_ms = max(1, int((end - time.monotonic()) * 1000))
        if rest and self.auto_offset_reset in EARLIEST:
            out.update(self.beginning_offsets(rest, left_ms))
        elif rest and self.auto_offset_reset in LATEST:
            out.update(self.end_offsets(rest, left_ms))
        return out


__all__ = ["NO_OFFSET", "OffsetLookups", "ck"]
