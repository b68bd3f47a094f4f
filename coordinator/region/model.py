"""The region's data: reset kinds, member records, the absent
members' own checkpoints and the offset-list helpers (the region config is
``coordinator/protocol/region/config.py``, the phases
``coordinator/protocol/region/replies.py``, their transition table the state
machine's, ``coordinator/region/machine.py``).

Used by every part of the region controller; no I/O here.
"""

from __future__ import annotations

import enum
from typing import Any

import attrs

from coordinator.protocol.region.kafka_report import KafkaReport
from coordinator.protocol.region.replies import Predecessor

DOC_VERSION = 3


class ResetKind(str, enum.Enum):
    FAILURE = "failure"  # counts towards max_consecutive_resets and the failure streak
    FORCE = "force"  # a rebalance: resets the consecutive counter and ends the failure streak
    MEMBERSHIP = "membership"  # a member joined/left: counter unchanged


@attrs.define
class MemberInfo:
    name: str
    identity: bytes
    incarnation: str
    last_seen: float
    pid: int | None = None
    #: Last valid Kafka group report of its heartbeats (coordinator/protocol/region/kafka_report.py).
    kafka: KafkaReport | None = None
    #: When that report arrived (coordinator clock).
    kafka_at: float | None = None
    #: Why its last report was ignored (None: valid); cleared by the next valid one.
    kafka_invalid: str | None = None
    #: The incarnation it replaced (a restart).
    predecessor: Predecessor | None = None
    host: str | None = None
    #: Records its pipeline dead-lettered, as its last heartbeat said (None: no dead-letter sink).
    dead_letters: int | None = None


#: Absent members remembered per region (see ``AbsentCheckpoints``): bounds the
#: durable document, which is rewritten at every checkpoint. Past it the member
#: with the oldest checkpoint is forgotten (the caller logs an ERROR and an event).
ABSENT_KEPT = 1024


@attrs.define
class AbsentCheckpoints:
    """Member name -> the last completed checkpoint it took part in, for members
    that took part in an earlier checkpoint but not in the last consistent one
    (dropped, left, restarted too late). ``ConsistentCheckpoints.own``
    (coordinator/region/checkpoints.py) states the invariant this serves; durable in the region document."""

    seqs: dict[str, int] = attrs.field(factory=dict)
    kept: int = ABSENT_KEPT

    @classmethod
    def from_doc(cls, value: Any) -> AbsentCheckpoints:
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in value.items()
        ):
            raise ValueError(f"stored absent_checkpoints {value!r} is not a map of member name to checkpoint id")
        return cls(dict(value))

    def get(self, name: str) -> int | None:
        return self.seqs.get(name)

    def checkpoint_completed(
        self, previous: int | None, before: list[str], members: list[str]
    ) -> list[tuple[str, int]]:
        """A checkpoint completed with ``members``; ``before`` took part in the
        ``previous`` one. Members of ``before`` that are not among ``members`` keep
        ``previous`` as their own; ``members`` are no longer absent. Returns the
        (name, seq) pairs forgotten past ``kept``, oldest checkpoint first."""
        for name in members:
            self.seqs.pop(name, None)
        if previous is not None:
            for name in set(before) - set(members):
                self.seqs[name] = previous
        forgotten = []
        while len(self.seqs) > self.kept:
            oldest = min(self.seqs, key=lambda n: (self.seqs[n], n))
            forgotten.append((oldest, self.seqs.pop(oldest)))
        return forgotten


def carry_forward(previous: list[list[Any]], current: list[list[Any]]) -> list[list[Any]]:
    """``current`` plus the partitions only ``previous`` knows.

    A partition that no member had assigned at the drain (its owner died and the
    group has not reassigned it yet) was not consumed since the previous
    consistent checkpoint (a revocation after fetching forces a reset to that
    checkpoint), so its offset there is still right; dropping it would send the
    next owner back to the partition's initial offset and duplicate its records.
    """
    out = {(t, p): o for t, p, o in previous}
    out.update({(t, p): o for t, p, o in current})
    return [[t, p, o] for (t, p), o in sorted(out.items())]
