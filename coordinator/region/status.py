"""A region's status reply, as typed records (no I/O).

1. :class:`~coordinator.region.machine.RegionCore` builds a `RegionStatus` from
   its parts on request (``RegionCore.status``): the member table's rows
   (``coordinator/region/membership.py``), the reset drive's `ResetStatus`
   (``coordinator/region/reset.py``), the cycle drive's counters, the
   members' transactions to resolve (``coordinator/region/resolve.py``) and its
   own phase.
2. The region controller service (``coordinator/region/service.py``) adds the
   recent checkpoints and reset rounds and answers ``region_status`` with
   ``to_dict()``; ``crkafka status`` (``coordinator/cli/status.py``) and the
   status page read those keys.

The keys are part of the wire protocol (docs/protocol.md): a key is added,
never renamed or removed.
"""

from __future__ import annotations

from typing import Any

import attrs


@attrs.frozen
class ResetStatus:
    """The reset rounds' part of the status (``coordinator/region/reset.py``)."""

    #: Attempt of the running (or last) reset round; None before the first.
    attempt: int | None
    #: Failure resets since the last progress (coordinator/region/reset.py).
    consecutive_resets: int
    #: Past it the region goes FAILED.
    max_consecutive_resets: int
    #: Reset rounds started since the coordinator started.
    resets: int
    #: The length of the backoff hold in force after a repeated failure
    #: (coordinator/region/timing.py, the backoff); None: none.
    backoff_s: float | None = None
    #: Seconds until the held RESUME may be sent; None: not held.
    backoff_left_s: float | None = None
    #: Failure resets in a row, each less than failure_memory_s after the previous,
    #: whatever progress was made between them: the backoff's count
    #: (coordinator/region/timing.py, the backoff).
    failure_streak: int = 0

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class RegionStatus:
    """One region as ``region_status`` shows it."""

    name: str
    index: int
    phase: str
    mode: str
    period_s: float
    #: Member name -> its row (``MemberTable.status``).
    members: dict[str, dict[str, Any]]
    last_consistent: int | None
    #: Sequence id of the running (or last) cycle.
    seq: int | None
    #: Members whose answer the current phase awaits.
    waiting_for: list[str]
    reset: ResetStatus
    #: Checkpoints completed, cycles failed since the coordinator started.
    checkpoints: int
    failed_cycles: int
    failed_reason: str | None
    #: Member name (live or absent) -> its Kafka transactions still to resolve:
    #: ``{seq, prepared, fence}`` (``coordinator/region/resolve.py``, ``EntryStatus``).
    transactions: dict[str, dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        """The reply's flat form (the reset part's keys at the top level)."""
        out = attrs.asdict(self, recurse=False, filter=lambda a, _: a.name != "reset")
        out.update(self.reset.to_dict())
        return out
