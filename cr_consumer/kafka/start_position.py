"""Where a partition starts the first time a job sees it: one type for the operator and the Spark source.

A :class:`StartPosition` is a :class:`StartKind` and, for two kinds, values:

* EARLIEST: the log start offset;
* LATEST: the log end offset;
* COMMITTED: the group's committed offset; a partition without one falls back
  (the operator: ``auto.offset.reset``; the Spark source: earliest);
* TIMESTAMP: the first offset whose timestamp is at or after ``timestamp_ms``
  (every partition), or after the partition's own time in ``values``; a
  partition with no record that late falls back (the operator:
  ``auto.offset.reset``; the Spark source: latest);
* SPECIFIC: the partition's offset in ``values``, :data:`EARLIEST_OFFSET` or
  :data:`LATEST_OFFSET`; a partition not listed starts at latest. The Spark
  source only: an operator's group subscription spans partitions whose
  assignment changes, so an offset of one partition means nothing to it.

The operator turns a position into offsets in
:mod:`cr_consumer.operator.seek_targets`, the Spark source in
:mod:`cr_consumer.spark.positions`; the Spark source's option strings
(``startingOffsets`` ...) are read in :mod:`cr_consumer.spark.options.offset_specs`.
"""

from __future__ import annotations

import enum

import attrs


class StartKind(enum.Enum):
    """Which start a :class:`StartPosition` means (module docstring)."""

    EARLIEST = "earliest"
    LATEST = "latest"
    COMMITTED = "committed"
    TIMESTAMP = "timestamp"
    SPECIFIC = "specific"


#: In SPECIFIC values: the partition's earliest / latest offset (Spark's values).
EARLIEST_OFFSET = -2
LATEST_OFFSET = -1

#: ((topic, partition), value) pairs, sorted.
PartitionValues = tuple[tuple[tuple[str, int], int], ...]


@attrs.frozen
class StartPosition:
    """A start (module docstring). SPECIFIC: ((topic, partition), offset) pairs in
    ``values``; TIMESTAMP: ((topic, partition), epoch ms) pairs in ``values``, or
    ``timestamp_ms`` for every partition."""

    kind: StartKind = StartKind.LATEST
    values: PartitionValues = ()
    timestamp_ms: int | None = None

    @classmethod
    def at_time(cls, timestamp_ms: int) -> StartPosition:
        """TIMESTAMP: every partition at the first offset at or after ``timestamp_ms`` (epoch ms)."""
        return cls(StartKind.TIMESTAMP, timestamp_ms=timestamp_ms)

    def value_of(self, topic: str, partition: int) -> int | None:
        """The partition's value in ``values``, else ``timestamp_ms``."""
        return dict(self.values).get((topic, partition), self.timestamp_ms)


__all__ = ["EARLIEST_OFFSET", "LATEST_OFFSET", "PartitionValues", "StartKind", "StartPosition"]
