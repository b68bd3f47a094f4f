"""The running checkpoint cycle's bookkeeping: who takes part, who answered, who joined.

No I/O, the coordinator's loop thread only. :class:`CycleRound` is owned by
:class:`~coordinator.region.state.RegionCore`, which drives the cycle (phases,
commands, persistence; its module docstring numbers the steps); this object
keeps what one cycle collects between its DRAIN and its RESUME:

1. At the drain (:meth:`CycleRound.start`): the cycle's members (the members at
   the drain), when it started and its slot on the fixed-rate grid
   (``coordinator/region/cadence.py``).
2. At the checkpoint (:meth:`CycleRound.checkpoint_started`): the members still
   in the cycle are awaited; every answer is recorded with its claims
   (:meth:`CycleRound.checkpoint_answered`), checked by the continuity fence
   (``coordinator/region/continuity.py``) once all answered.
3. Cooperative joins and leaves while the cycle runs (the core decides when they
   keep the cycle): a restarted member's predecessor leaves the cycle unless it
   answered the checkpoint (:meth:`CycleRound.member_joined`); the joiners are
   remembered for the reset that follows the cycle (:meth:`CycleRound.take_joiners`);
   a leaver leaves the cycle (:meth:`CycleRound.member_left`).
4. At completion, the members that answered the checkpoint
   (:meth:`CycleRound.answered`) make the new consistent checkpoint.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

from coordinator.region.continuity import Continuity, CycleClaims


class CycleRound:
    """One region's cycle in flight (see the module docstring). Not thread-safe."""

    def __init__(self) -> None:
        # The running cycle's checkpoint answers, checked before it completes (continuity.py).
        self._claims = CycleClaims()
        # The members taking part in the running cycle (its drain's members, less any that
        # left or were replaced by a new incarnation since), those that answered its
        # checkpoint, and the members that joined while it ran (reset once it completes).
        self._members: set[str] = set()
        self._checkpointed: set[str] = set()
        self._joined: list[str] = []
        self._started_at: float | None = None
        self._slot: float | None = None  # the grid slot of the running cycle's drain (cadence.py)

    @property
    def slot(self) -> float | None:
        """The grid slot of the last cycle's drain (None: no cycle yet)."""
        return self._slot

    def start(self, members: Iterable[str], now: float, slot: float) -> None:
        """Step 1."""
        self._members = set(members)
        self._checkpointed = set()
        self._started_at = now
        self._slot = slot

    def elapsed_s(self, now: float) -> float:
        """Seconds since the cycle's drain started (0 without a cycle)."""
        return now - (self._started_at if self._started_at is not None else now)

    def checkpoint_started(self) -> set[str]:
        """Step 2: the members to await (the cycle's members); no claims yet."""
        self._claims.clear()
        self._checkpointed = set()
        return set(self._members)

    def checkpoint_answered(self, name: str, offsets: Sequence[Sequence[Any]] | None) -> None:
        """Step 2: member ``name`` answered the checkpoint with ``offsets`` (validated claims)."""
        self._checkpointed.add(name)
        self._claims.add(name, offsets or [])

    def has_checkpointed(self, name: str) -> bool:
        return name in self._checkpointed

    def is_joiner(self, name: str) -> bool:
        """``name`` joined while this cycle ran (step 3)."""
        return name in self._joined

    def member_joined(self, name: str, restarted: bool) -> bool:
        """Step 3: ``name`` joined during the cycle (``restarted``: a new incarnation
        replaced a member). Returns True when its predecessor left the cycle (it had not
        answered the checkpoint): the caller no longer waits for that name."""
        dropped = restarted and name not in self._checkpointed
        if dropped:
            self._members.discard(name)
        self._joined.append(name)
        return dropped

    def member_left(self, name: str) -> None:
        """Step 3: ``name`` left gracefully and the cycle goes on without it."""
        self._members.discard(name)
        self._joined = [n for n in self._joined if n != name]

    def take_joiners(self) -> list[str]:
        """Step 3: the members that joined during the cycle (forgotten here: the caller
        resets the region for them)."""
        joined, self._joined = self._joined, []
        return joined

    def check(self, last: Sequence[Sequence[Any]]) -> Continuity:
        """Step 2's check: the answers' claims against the last consistent offsets ``last``."""
        return self._claims.check(last)

    def answered(self, present: Collection[str]) -> list[str]:
        """Step 4: the members of ``present`` that answered the checkpoint, sorted."""
        return sorted(self._checkpointed & set(present))


__all__ = ["CycleRound"]
