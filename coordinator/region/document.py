"""The durable document of one region: what survives a coordinator restart.

Stored by the region controller service in the state store (namespace
``region``, key = the region's name) as versioned JSON:

1. :class:`~coordinator.region.machine.RegionCore` builds a `RegionDocument`
   whenever a durable fact changes (a new sequence id or reset attempt, a
   consistent checkpoint, the member set, FAILED) and hands ``to_dict()`` to
   its ``persist`` callback; the service makes it durable before any command
   queued after it is sent.
2. After a restart the service reads the dict back and the core parses it with
   `RegionDocument.from_dict`, which raises KeyError, TypeError or ValueError
   for a document it cannot use (the service then marks the region FAILED and
   never overwrites that document).

Every field is required (``to_dict`` writes them all; a value may be null
where the field says so): a document of another version, or one that lacks a
field, is refused naming the version or the missing fields. ``DOC_VERSION``
changes whenever a field's meaning or presence changes.
"""

from __future__ import annotations

from typing import Any

import attrs

from coordinator.protocol.region.transactions import Resolve, encode_resolve
from coordinator.region.model import DOC_VERSION, AbsentCheckpoints
from coordinator.region.resolve import ResolveEntries

#: Bound on a stored hold: the largest reset_backoff_max_s a member may send
#: (coordinator/protocol/region/config.py MAX_CONFIG_SECONDS, one day).
MAX_BACKOFF_S = 86_400.0
#: Bound on the failure streak (coordinator/region/reset.py, the counting): the count
#: saturates there, and a stored one past it is refused. At one failure per
#: millisecond it takes eleven days to reach; the hold stopped growing long before.
MAX_FAILURE_STREAK = 1_000_000_000


@attrs.frozen
class RegionDocument:
    config: dict[str, Any]
    last_consistent: int | None  # the last consistent checkpoint (None: none yet)
    next_seq: int  # sequence ids are never reused
    next_attempt: int  # reset attempts are never reused
    consecutive_resets: int
    checkpoint_members: list[str]  # members of the last consistent checkpoint
    checkpoint_offsets: list[list[Any]]  # its source offsets, [[topic, partition, offset], ...]
    absent_checkpoints: dict[str, int]  # absent member -> its own last checkpoint
    members: list[str]  # the members when written (the ones expected back after a restart)
    failed: bool
    failed_reason: str | None
    #: The backoff hold in force (seconds, coordinator/region/timing.py, the backoff); None: none.
    backoff_s: float | None
    #: The failure streak (coordinator/region/reset.py).
    failure_streak: int
    #: Each member's Kafka transactions to resolve, by member name (coordinator/region/resolve.py);
    #: stored in the wire form of a reset's ``resolve``.
    transactions: tuple[Resolve, ...]

    def to_dict(self) -> dict[str, Any]:
        doc = {"version": DOC_VERSION, **attrs.asdict(self, recurse=False)}
        doc["transactions"] = encode_resolve(self.transactions)
        return doc

    @classmethod
    def from_dict(cls, doc: dict[str, Any], region: str) -> RegionDocument:
        """Parse a stored document of region `region`; raises KeyError, TypeError or
        ValueError when it cannot be used (another version, a missing field)."""
        if doc.get("version") != DOC_VERSION:
            raise ValueError(f"region {region!r}: stored document version {doc.get('version')!r} is not {DOC_VERSION}")
        missing = [f.name for f in attrs.fields(cls) if f.name not in doc]
        if missing:
            raise ValueError(f"region {region!r}: stored document (version {DOC_VERSION}) lacks the fields {missing}")
        if not isinstance(doc["config"], dict):
            raise ValueError(f"region {region!r}: stored config {doc['config']!r:.40} is not an object")
        if not isinstance(doc["failed"], bool):
            raise ValueError(f"region {region!r}: stored failed {doc['failed']!r:.40} is not true or false")
        return cls(
            config=doc["config"],
            last_consistent=doc["last_consistent"],
            next_seq=doc["next_seq"],
            next_attempt=doc["next_attempt"],
            consecutive_resets=doc["consecutive_resets"],
            checkpoint_members=list(doc["checkpoint_members"]),
            checkpoint_offsets=list(doc["checkpoint_offsets"]),
            absent_checkpoints=AbsentCheckpoints.from_doc(doc["absent_checkpoints"]).seqs,
            members=list(doc["members"]),
            failed=doc["failed"],
            failed_reason=doc["failed_reason"],
            backoff_s=_backoff(doc["backoff_s"]),
            failure_streak=_streak(doc["failure_streak"]),
            transactions=_transactions(doc["transactions"], doc["last_consistent"]),
        )


def _backoff(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_BACKOFF_S:
        raise ValueError(f"stored backoff_s {value!r:.40} is not a number of seconds in (0, {MAX_BACKOFF_S}]")
    return float(value)


def _streak(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_FAILURE_STREAK:
        raise ValueError(f"stored failure_streak {value!r:.40} is not a count in [0, {MAX_FAILURE_STREAK}]")
    return value


def _transactions(value: Any, last_consistent: Any) -> tuple[Resolve, ...]:
    """Decoded with the protocol's decoder; an entry's checkpoint completed, so it is at most
    ``last_consistent``."""
    entries = ResolveEntries.from_doc(value).entries()
    late = [e for e in entries if not isinstance(last_consistent, int) or e.seq > last_consistent]
    if late:
        raise ValueError(
            f"stored transactions of {late[0].member!r} are of checkpoint {late[0].seq}, after the last "
            f"consistent checkpoint {last_consistent!r}"
        )
    return entries
