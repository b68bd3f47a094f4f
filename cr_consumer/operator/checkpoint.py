"""The consumer operator's checkpoint: versioned, language-neutral JSON.

Layout (version 1)::

    {"v": 1, "operator": "member-0", "members": ["member-0", "member-1"],
     "offsets": [["topic", 0, 1234], ["topic", 1, 99]],
     "from": [["topic", 0, 1200], ["topic", 1, 99]]}

``offsets`` lists (topic, partition, next offset to fetch) of the partitions
this operator had assigned at the drain. ``from`` lists, for the same
partitions, where this operator's interval of each began: the ``from`` of its
checkpoint answer to the region controller (:meth:`OperatorCheckpoint.claims`,
coordinator/region/continuity.py). Every checkpoint an operator takes has it;
the merged checkpoint a reset passes to the source (offsets only: no interval
began yet) does not.
``members`` are the names registered in the group when the checkpoint was
taken: their count is the number of contributions the reset merge waits for. Unknown versions and malformed
documents are rejected with :class:`CheckpointError` naming the problem.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import attrs

from cr_consumer.kafka.client import TopicPartition

VERSION = 1


class CheckpointError(ValueError):
    """The checkpoint bytes are not a checkpoint this version understands."""


@attrs.frozen
class OperatorCheckpoint:
    operator: str
    members: tuple[str, ...]
    offsets: Mapping[TopicPartition, int]
    #: Where each partition's interval began (None: not recorded); same keys as ``offsets``.
    starts: Mapping[TopicPartition, int] | None = None

    def __attrs_post_init__(self) -> None:
        if self.starts is not None and set(self.starts) != set(self.offsets):
            raise CheckpointError("checkpoint 'from' must name exactly the partitions of 'offsets'")

    def encode(self) -> bytes:
        doc = {
            "v": VERSION,
            "operator": self.operator,
            "members": list(self.members),
            "offsets": [[tp.topic, tp.partition, int(off)] for tp, off in sorted(self.offsets.items())],
        }
        if self.starts is not None:
            doc["from"] = [[tp.topic, tp.partition, int(off)] for tp, off in sorted(self.starts.items())]
        return json.dumps(doc, separators=(",", ":")).encode()

    def claims(self) -> list[list[str | int]]:
        """The checkpoint answer's entries, sorted: ``[topic, partition, from, to]``
        per partition. A checkpoint without ``from`` (a reset's merged one) has no
        intervals to claim: CheckpointError."""
        if self.starts is None:
            raise CheckpointError(
                "checkpoint has no 'from': it cannot answer a checkpoint (the region checks where each interval began)"
            )
        return [[tp.topic, tp.partition, int(self.starts[tp]), int(off)] for tp, off in sorted(self.offsets.items())]

    @classmethod
    def decode(cls, data: bytes) -> OperatorCheckpoint:
        try:
            doc = json.loads(data)
        except (ValueError, TypeError) as exc:
            raise CheckpointError(f"checkpoint is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise CheckpointError("checkpoint is not a JSON object")
        version = doc.get("v")
        if version != VERSION:
            raise CheckpointError(f"unsupported checkpoint version {version!r} (this operator reads version {VERSION})")
        operator = doc.get("operator")
        members = doc.get("members")
        rows = doc.get("offsets")
        if not isinstance(operator, str) or not isinstance(members, list) or not isinstance(rows, list):
            raise CheckpointError("checkpoint needs 'operator' (string), 'members' (list) and 'offsets' (list)")
        offsets = _rows(rows, "offsets")
        starts = None if doc.get("from") is None else _rows(doc["from"], "from")
        if starts is not None and any(starts[tp] > off for tp, off in offsets.items() if tp in starts):
            raise CheckpointError("checkpoint 'from' holds an offset after its partition's offset")
        return cls(operator, tuple(str(m) for m in members), offsets, starts)


def _rows(rows: object, what: str) -> dict[TopicPartition, int]:
    if not isinstance(rows, list):
        raise CheckpointError(f"checkpoint '{what}' must be a list")
    out: dict[TopicPartition, int] = {}
    for row in rows:
        if (
            not isinstance(row, list)
            or len(row) != 3
            or not isinstance(row[0], str)
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in row[1:])
        ):
            raise CheckpointError(f"bad {what} entry {row!r}: expected [topic, partition, offset]")
        out[TopicPartition(row[0], row[1])] = row[2]
    return out


__all__ = ["VERSION", "CheckpointError", "OperatorCheckpoint"]
