"""The continuity fence: a checkpoint's offsets must continue the last consistent one.

Each member answers a checkpoint with one *claim* per partition its source
holds: ``[topic, partition, from, to]``, where ``from`` is the offset it
began the interval at (the offset of the last consistent checkpoint it
continued from, or where it seeked the partition after a reset or an
assignment) and ``to`` is the next offset to read (what it submitted up to).
Before a checkpoint becomes consistent, the controller checks every
partition's claims against ``last``, the last consistent checkpoint's
offsets (:func:`check_claims`; no I/O, no Kafka):

1. every claim's ``from`` equals the partition's offset in ``last``; a
   partition ``last`` does not know (never reported) accepts any ``from``,
   but its claims must agree on it;
2. at most one claim made progress (``to > from``); every other claim of the
   partition is empty (``to == from``);
3. the partition's offset in the checkpoint is the progressing claim's
   ``to``, else the claims' common ``from``.

A violation means two members processed the same records, or one processed
from an offset the region did not continue from (a zombie: a consumer away
longer than its Kafka session timeout, whose partitions the broker gave to
another member). The checkpoint then fails (the caller resets the region to
``last``: every member's interval since is discarded, nothing of it is
published). docs/region.md ("Why the region stays exactly once", steps 11-13)
says why this holds in every order and which legitimate cases pass.

Partitions nobody claims keep their offset of ``last`` (as
``coordinator.region.model.carry_forward``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

#: Violations listed in a log line or an event: the first ones are enough to
#: see what happened; the count says how many there were (bounds the status).
VIOLATIONS_SHOWN = 10
#: Claims of one partition listed (a partition claimed by many members: the
#: count says how many).
CLAIMS_SHOWN = 10

OffsetKey = tuple[str, int]


@attrs.frozen
class Claim:
    """One member's interval of one partition in a checkpoint answer."""

    member: str
    topic: str
    partition: int
    #: Where the interval began.
    start: int
    #: The next offset to read at the checkpoint.
    end: int

    @classmethod
    def from_entry(cls, member: str, entry: Sequence[Any]) -> Claim:
        """A wire entry ``[topic, partition, from, to]`` validated by
        ``coordinator.protocol.wire.fields.decode_offset_claims``."""
        return cls(member, entry[0], entry[1], entry[2], entry[3])

    @property
    def progressed(self) -> bool:
        return self.end > self.start

    def text(self) -> str:
        return f"{self.member} from {self.start} to {self.end}"

    def to_dict(self) -> dict[str, Any]:
        return {"member": self.member, "from": self.start, "to": self.end}


class ViolationKind(str, enum.Enum):
    STALE_START = "stale_start"  # rule 1: a claim does not start at the last consistent offset
    STARTS_DIFFER = "starts_differ"  # rule 1: a partition the region never saw, claims start apart
    TWO_PROGRESSED = "two_progressed"  # rule 2: more than one member processed the partition


@attrs.frozen
class Violation:
    kind: ViolationKind
    topic: str
    partition: int
    #: The partition's offset in the last consistent checkpoint (None: not known).
    expected: int | None
    #: Every claim of the partition (sorted by member).
    claims: tuple[Claim, ...]

    def text(self) -> str:
        claims = ", ".join(c.text() for c in self.claims[:CLAIMS_SHOWN])
        if len(self.claims) > CLAIMS_SHOWN:
            claims += f" and {len(self.claims) - CLAIMS_SHOWN} more"
        where = (
            f"the last consistent offset is {self.expected}"
            if self.expected is not None
            else "the region has no offset for it"
        )
        what = {
            ViolationKind.STALE_START: "a claim does not start where the region continues",
            ViolationKind.STARTS_DIFFER: "the claims start at different offsets",
            ViolationKind.TWO_PROGRESSED: "more than one member processed it",
        }[self.kind]
        return f"{self.topic}[{self.partition}]: {what} ({where}; claims: {claims})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "topic": self.topic,
            "partition": self.partition,
            "expected": self.expected,
            "claims": [c.to_dict() for c in self.claims[:CLAIMS_SHOWN]],
            "n_claims": len(self.claims),
        }


@attrs.frozen
class Continuity:
    """The outcome of :func:`check_claims`."""

    #: The checkpoint's offsets ``[[topic, partition, offset], ...]``, sorted,
    #: with the partitions nobody claimed carried over from ``last``.
    offsets: list[list[Any]]
    violations: tuple[Violation, ...]

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        shown = "; ".join(v.text() for v in self.violations[:VIOLATIONS_SHOWN])
        more = len(self.violations) - VIOLATIONS_SHOWN
        return shown + (f"; and {more} more" if more > 0 else "")


def check_claims(claims: Iterable[Claim], last: Sequence[Sequence[Any]]) -> Continuity:
    """Rules 1-3 of the module docstring for every claimed partition; ``last``:
    the last consistent checkpoint's offsets ``[[topic, partition, offset], ...]``
    (empty when there is none)."""
    expected_of: dict[OffsetKey, int] = {(t, p): o for t, p, o in last}
    by_key: dict[OffsetKey, list[Claim]] = {}
    for claim in claims:
        key = (claim.topic, claim.partition)
        group = by_key.get(key)
        if group is None:
            by_key[key] = [claim]
        else:
            group.append(claim)
    out = dict(expected_of)  # partitions nobody claims keep their offset (carry_forward)
    violations: list[Violation] = []
    for key, group in by_key.items():
        expected = expected_of.get(key)
        if len(group) == 1:  # the common case: one owner
            claim = group[0]
            if expected is None or claim.start == expected:
                out[key] = claim.end
                continue
        kind = _violated(group, expected)
        if kind is not None:
            group.sort(key=lambda c: c.member)
            violations.append(Violation(kind, key[0], key[1], expected, tuple(group)))
            continue
        out[key] = _offset(group)
    violations.sort(key=lambda v: (v.topic, v.partition))
    return Continuity([[t, p, o] for (t, p), o in sorted(out.items())], tuple(violations))


def _violated(group: list[Claim], expected: int | None) -> ViolationKind | None:
    if expected is not None and any(c.start != expected for c in group):
        return ViolationKind.STALE_START
    if expected is None and len({c.start for c in group}) > 1:
        return ViolationKind.STARTS_DIFFER
    if sum(1 for c in group if c.progressed) > 1:
        return ViolationKind.TWO_PROGRESSED
    return None


def _offset(group: list[Claim]) -> int:
    """Rule 3 for a group that passed rules 1-2 (its claims share one ``from``)."""
    progressing = [c.end for c in group if c.progressed]
    return progressing[0] if progressing else group[0].start


class CycleClaims:
    """The running checkpoint cycle's claims (the region core's bookkeeping):
    cleared when the cycle's checkpoint phase starts, one :meth:`add` per
    member's checkpoint answer, checked once every member answered."""

    def __init__(self) -> None:
        self._claims: list[Claim] = []

    def clear(self) -> None:
        self._claims = []

    def add(self, member: str, entries: Iterable[Sequence[Any]]) -> None:
        """A member's validated checkpoint entries (see :class:`Claim`)."""
        self._claims.extend(Claim.from_entry(member, e) for e in entries)

    def check(self, last: Sequence[Sequence[Any]]) -> Continuity:
        return check_claims(self._claims, last)

    def __len__(self) -> int:
        return len(self._claims)


def offsets_advanced(last: Sequence[Sequence[Any]], merged: Sequence[Sequence[Any]]) -> bool:
    """Whether checkpoint offsets ``merged`` moved past ``last`` (both
    ``[[topic, partition, offset], ...]``): some partition's offset is higher, or
    a partition is new. The reset rounds count a checkpoint as progress only then
    (``coordinator/region/reset.py``, the consecutive-reset count)."""
    before = {(t, p): o for t, p, o in last}
    return any((t, p) not in before or o > before[(t, p)] for t, p, o in merged)


__all__ = [
    "CLAIMS_SHOWN",
    "VIOLATIONS_SHOWN",
    "Claim",
    "Continuity",
    "CycleClaims",
    "Violation",
    "ViolationKind",
    "check_claims",
    "offsets_advanced",
]
