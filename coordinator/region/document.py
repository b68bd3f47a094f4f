"""The durable document of one region: what survives a coordinator restart.

Stored by the region controller service in the state store (namespace
``region``, key = the region's name) as versioned JSON:

1. :class:`~coordinator.region.state.RegionCore` builds a `RegionDocument`
   whenever a durable fact changes (a new sequence id or reset attempt, a
   consistent checkpoint, the member set, FAILED) and hands ``to_dict()`` to
   its ``persist`` callback; the service makes it durable before any command
   queued after it is sent.
2. After a restart the service reads the dict back and the core parses it with
   `RegionDocument.from_dict`, which raises KeyError, TypeError or ValueError
   for a document it cannot use (the service then marks the region FAILED and
   never overwrites that document).

``DOC_VERSION`` changes whenever a field's meaning or presence changes; a field
added as optional (absent in older documents, ignored by older coordinators:
``backoff_s``, ``failure_streak``) keeps it. A document without
``failure_streak`` loads it as its ``consecutive_resets``: the failures counted
since the last progress are a streak at least that long (their hold was that
count's), so an upgrade never shortens a hold.
"""

from __future__ import annotations

from typing import Any

import attrs

from coordinator.region.model import DOC_VERSION, AbsentCheckpoints

#: Bound on a stored hold: the largest reset_backoff_max_s a member may send
#: (coordinator/region/messages.py MAX_CONFIG_SECONDS, one day).
MAX_BACKOFF_S = 86_400.0
#: Bound on the failure streak (coordinator/region/reset.py step 2): the count
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
    #: The backoff hold in force (seconds, coordinator/region/backoff.py step 4);
    #: None: none. Optional: a document without it (an older coordinator's) has none.
    backoff_s: float | None = None
    #: The failure streak (coordinator/region/backoff.py step 1). Optional: a
    #: document without it (an older coordinator's) loads it as ``consecutive_resets``.
    failure_streak: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"version": DOC_VERSION, **attrs.asdict(self, recurse=False)}

    @classmethod
    def from_dict(cls, doc: dict[str, Any], region: str) -> RegionDocument:
        """Parse a stored document of region `region`; raises KeyError, TypeError or
        ValueError when it cannot be used (another version, a missing field)."""
        if doc.get("version") != DOC_VERSION:
            raise ValueError(f"region {region!r}: stored document version {doc.get('version')!r} "
                             f"is not {DOC_VERSION}")
        return cls(
            config=doc.get("config") or {},
            last_consistent=doc["last_consistent"],
            next_seq=doc["next_seq"],
            next_attempt=doc["next_attempt"],
            consecutive_resets=doc["consecutive_resets"],
            checkpoint_members=list(doc["checkpoint_members"]),
            checkpoint_offsets=list(doc["checkpoint_offsets"]),
            absent_checkpoints=AbsentCheckpoints.from_doc(doc.get("absent_checkpoints")).seqs,
            members=list(doc["members"]),
            failed=bool(doc.get("failed")),
            failed_reason=doc.get("failed_reason"),
            backoff_s=_backoff(doc.get("backoff_s")),
            failure_streak=_streak(doc.get("failure_streak", doc["consecutive_resets"])),
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
