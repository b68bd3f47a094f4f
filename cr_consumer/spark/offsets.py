"""The ``crkafka`` source offset: which records a Spark micro-batch covers.

Spark stores a source offset as JSON in the query's offset log and hands it back
to ``read(start)``, ``readBetweenOffsets(start, end)`` and ``commit(end)``. It
must round-trip unchanged, so it only uses string keys, ints and dicts::

    {"v": 1, "epoch": 7, "query": "5f0c2a91d3e84b7a",
     "offsets": {"orders:0": 1200, "orders:1": 1187},   # next offset to read, per partition
     "from": {"orders:2": 40}}                          # optional, see below

* ``offsets`` is the merged checkpoint of the group at the end of the batch:
  for every partition any member has been assigned, the offset of the next
  record to read. A batch holds, per partition, the records from the start
  offset's position (inclusive) to the end offset's position (exclusive).
* ``from`` names where a partition's range in this batch begins when that is
  not the start offset's position: a partition that first appears in this
  batch (absent from the start offset), or one handed over by another
  consumer of the group (it begins at that consumer's commit). So the batch
  can be re-read deterministically after a crash.
* ``epoch`` counts the end offsets handed to Spark (commits are idempotent by it).
* ``query`` identifies the query of the checkpoint location: drawn at its
  first read, carried by every end after it; the query's coordinator group is
  ``group.id`` + query id (:mod:`cr_consumer.spark.control`). Only the
  initial offset (no positions) has none.

Kafka topic names use only ``[A-Za-z0-9._-]``, so ``topic:partition`` is an
unambiguous key. A wrong version or shape raises :class:`OffsetFormatError`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

from cr_consumer.kafka.client import TopicPartition

OFFSET_VERSION = 1

#: A query id: lower-case hex (see cr_consumer.spark.control.new_query_id);
#: bounded so a corrupt offset log cannot make an unbounded coordinator group name.
QUERY_ID_RE = re.compile(r"[0-9a-f]{8,32}")

TopicPartitionKey = tuple[str, int]
#: An offset as Spark stores it in its offset log (a JSON object).
OffsetJson = dict[str, object]


class OffsetFormatError(ValueError):
    """A source offset from Spark's offset log is not a version-1 crkafka offset."""


def partition_key(tp: TopicPartition) -> TopicPartitionKey:
    return (tp.topic, tp.partition)


def tp_key(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


def parse_tp_key(key: str) -> TopicPartitionKey:
    topic, sep, partition = key.rpartition(":")
    if not sep or not topic or not partition.isdigit():
        raise OffsetFormatError(f"bad partition key {key!r}: expected 'topic:partition'")
    return topic, int(partition)


def _freeze(positions: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
    return {(str(t), int(p)): int(o) for (t, p), o in positions.items()}


@attrs.frozen
class SourceOffset:
    """One end (or start) offset of the source; compare with ``==``."""

    epoch: int = 0
    positions: dict[TopicPartitionKey, int] = attrs.field(factory=dict, converter=_freeze)
    first: dict[TopicPartitionKey, int] = attrs.field(factory=dict, converter=_freeze)
    query: str = ""

    def with_query(self, query: str) -> SourceOffset:
        return attrs.evolve(self, query=query)

    @classmethod
    def initial(cls) -> SourceOffset:
        """The offset before any batch: every partition starts at its control variable."""
        return cls(epoch=0)

    def to_json(self) -> OffsetJson:
        out: OffsetJson = {
            "v": OFFSET_VERSION,
            "epoch": self.epoch,
            "offsets": {tp_key(t, p): o for (t, p), o in sorted(self.positions.items())},
        }
        if self.query:
            out["query"] = self.query
        if self.first:
            out["from"] = {tp_key(t, p): o for (t, p), o in sorted(self.first.items())}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SourceOffset:
        if not isinstance(data, Mapping):
            raise OffsetFormatError(f"expected a JSON object, got {type(data).__name__}")
        if data.get("v") != OFFSET_VERSION:
            raise OffsetFormatError(
                f"unsupported crkafka offset version {data.get('v')!r} (this build reads {OFFSET_VERSION})"
            )
        epoch = data.get("epoch")
        if not isinstance(epoch, int) or epoch < 0:
            raise OffsetFormatError(f"bad epoch {epoch!r}")
        query = data.get("query", "")
        if query != "" and not (isinstance(query, str) and QUERY_ID_RE.fullmatch(query)):
            raise OffsetFormatError(f"bad query id {query!r}: expected {QUERY_ID_RE.pattern}")
        positions = _read_map(data.get("offsets", {}), "offsets")
        if positions and not query:
            raise OffsetFormatError("an offset with positions has no query id: not an offset of this source")
        return cls(epoch=epoch, positions=positions, first=_read_map(data.get("from", {}), "from"), query=query)

    def start_of(self, tp: TopicPartitionKey, start: SourceOffset) -> int:
        """Where this end's batch begins for ``tp`` (given the batch's ``start``)."""
        if tp in self.first:
            return self.first[tp]
        return start.positions.get(tp, self.positions[tp])


def _read_map(raw: object, name: str) -> dict[TopicPartitionKey, int]:
    if not isinstance(raw, Mapping):
        raise OffsetFormatError(f"{name!r} must be an object")
    out = {}
    for key, value in raw.items():
        if not isinstance(value, int) or value < 0:
            raise OffsetFormatError(f"bad offset {value!r} for {key!r} in {name!r}")
        out[parse_tp_key(key)] = value
    return out
