"""The reset round's drive, without I/O: what a reset round sends and when it
ends (used by :class:`~coordinator.region.state.RegionCore`, the loop thread
only). The counters it keeps are `coordinator.region.reset` (steps 1-4 there);
the core owns the phase, the awaited members and the deadline, and does the
I/O: it applies the decisions this module returns.

The round, as the core drives it:

1. A cause (a request, a failed or late answer, a failed continuity check, a
   membership change) reaches the core. It drops the cause when a round is
   already running and the cause does not restart it (reset.py step 1), else
   asks `ResetDrive.start`.
2. `start` counts the cause (reset.py steps 1-2). Past the maximum it returns
   `RoundRefused`: the core fails the region with that reason. Else it numbers
   the attempt and returns `RoundStart`: the attempt, the reason the core logs
   with its transition to RESETTING, the deadline, and one command per member
   (RESET with that member's own checkpoint, or RESET_TO_INITIAL before the
   first consistent checkpoint; ``rejoin`` for a membership change, reset.py
   step 3). The core persists the attempt, then transitions, then sends.
3. Each member's answer is the core's (``RegionCore.ack``); a failed or late
   answer is a new cause (step 1, as a failure, restarting the round).
4. Every awaited member answered (or left): `answered` returns
   `RoundAnswered`: how long the rounds took since the first cause, and the
   hold still to wait after a repeated failure (``coordinator/region/backoff.py``).
   With a hold the core transitions to BACKOFF, and its tick calls `hold_left`
   until the hold is over.
5. The RESUME: `resume` returns `RoundEnd`: when the next drain may start (the
   pacing after a reset, ``coordinator/region/pacing.py``) and how long the
   region was held. The core persists the end of a hold (a restarted
   coordinator must not hold again), transitions to RUNNING and sends
   RESUME(complete=None).
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from coordinator.protocol.region.commands import RegionCommand, Reset, ResetToInitial
from coordinator.protocol.region.config import RegionConfig
from coordinator.region.checkpoints import ConsistentCheckpoints
from coordinator.region.document import RegionDocument
from coordinator.region.model import ResetKind
from coordinator.region.reset import ResetRounds
from coordinator.region.status import ResetStatus
from coordinator.region.timing import CheckpointPacing, ResetHold


@attrs.frozen
class RoundStart:
    """Step 2: a reset round to run now."""

    attempt: int
    kind: ResetKind
    #: The reason the core logs with its transition to RESETTING.
    why: str
    #: Each awaited member's command, by member name in sorted order.
    commands: tuple[tuple[str, RegionCommand], ...]
    #: The round fails as a whole (a failure cause, step 3) past this time.
    deadline: float

    @property
    def members(self) -> set[str]:
        return {name for name, _ in self.commands}


@attrs.frozen
class RoundRefused:
    """Step 2: too many consecutive resets; the region must fail with ``reason``."""

    reason: str


@attrs.frozen
class RoundAnswered:
    """Step 4: every member answered."""

    attempt: int | None
    #: Seconds since the first cause of the rounds that ended.
    took_s: float
    #: Seconds the RESUME must still wait (backoff.py step 2); None: RESUME now.
    hold_left_s: float | None
    #: The hold's length, counted from its failure (None: no hold).
    hold_s: float | None


@attrs.frozen
class RoundEnd:
    """Step 5: RESUME(complete=None) follows."""

    attempt: int | None
    #: Seconds from the first cause to the last answer of the rounds (a hold not included).
    took_s: float
    #: Seconds from now to the next drain (the pacing after a reset).
    next_drain_in_s: float
    #: The length of the hold that ended (None: there was none).
    held_s: float | None


class ResetDrive:
    """The decisions of one region's reset rounds (steps above). Owns the
    counters (`ResetRounds`); reads the consistent checkpoints (for each member's
    RESET) and tells the pacing about rejoin hints and RESUMEs."""

    def __init__(self, config: RegionConfig, pacing: CheckpointPacing, checkpoints: ConsistentCheckpoints) -> None:
        self._config = config
        self._pacing = pacing
        self._checkpoints = checkpoints
        self._counters = ResetRounds(config)  # read through the properties below
        self._hold = ResetHold(config)
        self._took_s = 0.0  # the duration of the rounds that last ended (step 4), for their RESUME (step 5)

    def start(self, why: str, kind: ResetKind, members: Iterable[str], now: float,
              *, rejoin: bool) -> RoundStart | RoundRefused:
        """Step 2 for a cause ``kind`` with the awaited ``members``."""
        too_many = self._counters.note_cause(kind, now)
        if too_many is not None:
            return RoundRefused(f"{too_many}; last cause: {why}")
        self._hold.on_cause(kind, self._counters.streak, self._counters.consecutive, now)
        attempt = self._counters.begin()
        self._counters.started(now)
        if rejoin:
            self._pacing.rejoin_hinted(now)
        return RoundStart(attempt, kind, f"attempt {attempt} ({kind.value}, consecutive "
                                         f"{self._counters.consecutive}, streak {self._counters.streak}): {why}",
                          tuple((name, self._command(name, attempt, rejoin)) for name in sorted(members)),
                          now + self._config.reset_timeout_s)

    def _command(self, name: str, attempt: int, rejoin: bool) -> RegionCommand:
        last = self._checkpoints.last_consistent
        if last is None:
            return ResetToInitial(attempt, rejoin=rejoin)
        return Reset(last, attempt, self._checkpoints.members, self._checkpoints.offsets,
                     self._checkpoints.own(name), rejoin=rejoin)

    def answered(self, now: float) -> RoundAnswered:
        """Step 4."""
        took = self._took_s = self._counters.finish(now)
        return RoundAnswered(self._counters.attempt, took, self._hold.left(now), self._hold.length_s)

    def hold_left(self, now: float) -> float | None:
        """Seconds until the RESUME may be sent (None: now)."""
        return self._hold.left(now)

    @property
    def hold_until(self) -> float | None:
        """When the hold in force ends (None: no hold)."""
        return self._hold.until

    def resume(self) -> RoundEnd:
        """Step 5. Off the cadence grid (``coordinator/region/cadence.py`` step 3):
        the pacing after a reset decides the next drain."""
        delay = self._pacing.settle_delay()
        self._pacing.resumed()
        return RoundEnd(self._counters.attempt, self._took_s, delay, self._hold.resumed())

    # ------------------------------------------------------------------ durable state, status, counters
    def restore(self, stored: RegionDocument) -> None:
        """From the durable document, before any round (reset.py `ResetRounds.restore`)."""
        self._counters.restore(next_attempt=stored.next_attempt, consecutive=stored.consecutive_resets,
                               streak=stored.failure_streak)
        self._hold.restore(stored.backoff_s)

    def status(self, now: float) -> ResetStatus:
        """The reset part of the region's status (status.py)."""
        left = self._hold.left(now)
        return ResetStatus(attempt=self.attempt, consecutive_resets=self.consecutive,
                           max_consecutive_resets=self._config.max_consecutive_resets, resets=self.rounds,
                           backoff_s=self._hold.length_s, backoff_left_s=None if left is None else round(left, 3),
                           failure_streak=self.streak)

    @property
    def backoff_s(self) -> float | None:
        """The length of the hold in force (durable, backoff.py step 4)."""
        return self._hold.length_s

    def forced(self, now: float) -> None:
        """A forced cause that starts no round (a round is running and the request
        does not restart it): it still clears the consecutive count and the streak
        (reset.py step 1) and the hold (backoff.py step 3b)."""
        self._counters.note_cause(ResetKind.FORCE, now)
        self._hold.on_cause(ResetKind.FORCE, self._counters.streak, self._counters.consecutive, now)

    def checkpoint_completed(self, *, advanced: bool, now: float) -> bool:
        """reset.py step 2: whether the consecutive count is 0 after this checkpoint."""
        return self._counters.checkpoint_completed(advanced=advanced, now=now)

    @property
    def attempt(self) -> int | None:
        return self._counters.attempt

    @property
    def next_attempt(self) -> int:
        return self._counters.next_attempt

    @property
    def consecutive(self) -> int:
        return self._counters.consecutive

    @property
    def streak(self) -> int:
        """The failure streak (durable, backoff.py step 1)."""
        return self._counters.streak

    @property
    def rounds(self) -> int:
        return self._counters.rounds
