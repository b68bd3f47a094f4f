"""The backoff between the failure resets of a streak (no I/O, the loop thread
only; owned by :class:`~coordinator.region.reset_round.ResetDrive`).

A failure reset completes in milliseconds; without a pause, a failure that
persists for a second (a sink that is down) burns ``max_consecutive_resets``
in ~100 ms and the region goes FAILED for good, and a failure that comes back
after every reset while the region still makes progress elsewhere (a record
that fails every time on one partition, the others moving) resets at full
speed for ever. So, like an exponential-delay restart strategy (whose delay
goes back to its start only after a stable run, whatever progress was made
meanwhile), the region waits longer after each failure of a streak:

1. The streak (``coordinator/region/reset.py`` step 2): failure resets in a
   row, each less than ``failure_memory_s`` after the previous one. Progress
   (a checkpoint that moved an offset) does not end it; a forced reset does
   (step 3b), and so does a quiet stretch: a failure ``failure_memory_s``
   after the last one starts a new streak at 1, and a checkpoint that late
   sets it to 0. A membership reset leaves it. The first failure of a streak
   resets and resumes at once. Forced (rebalance) and membership resets are
   never delayed by themselves: a kill or a rebalance costs what it cost before.
2. The k-th failure of the streak (k >= 2) holds the region: its reset round
   runs at once (members stop and reset, their permits stay blocked, nothing
   is processed), and the RESUME waits until
   ``min(reset_backoff_s * 2^(k-2), reset_backoff_max_s)`` after the failure.
   A round that answers before then moves the region from RESETTING to
   BACKOFF; the controller's tick sends the RESUME when the hold is over.
   With the defaults (0.5 s, 30 s, 5 resets):
   a. a failure that persists (no checkpoint between the failures: the streak
      is the consecutive count) ends in FAILED after 0 + 0.5 + 1 + 2 + 4 s of
      holds: a sink down for 5 s survives (the sixth failure in a row, 7.5 s
      after the first, is the one that fails it);
   b. a failure that returns after every reset while other partitions move
      (every checkpoint between two failures is progress: the consecutive
      count stays at 1, the region never goes FAILED) is held 0.5, 1, 2, ...
      up to 30 s: one reset per ``reset_backoff_max_s`` instead of a hot loop.
3. During a hold:
   a. a membership change (a join, a restarted member; everybody leaving and
      coming back) restarts the round as it does without a hold; the RESUME
      still waits for the same due time (a join neither skips nor lengthens it);
   b. a forced reset (a rebalance) ends the streak (reset.py step 1) and with
      it the hold: its round resumes at once;
   c. another failure (a request, a failed or late answer) is the next
      failure of the streak: a new round and a new, longer hold from that failure;
   d. a member that leaves or falls silent is dropped; the hold goes on for
      the others;
   e. triggers are answered ``not_now``, acks of earlier commands are stale.
4. Durable: the length of the hold in force is in the region document
   (``backoff_s``, null without one) from the failure until the RESUME, and
   the streak always (``failure_streak``). A coordinator restarted during a
   hold holds its first round (the membership reset that brings the members
   back) that long again, from that round's start, and its next failure is the
   next of the restored streak: a restart never shortens a hold (it may
   lengthen it by the time already held). The time of the last failure is not
   durable: after a restart the ``failure_memory_s`` clock starts at the first
   checkpoint (reset.py step 2).
"""

from __future__ import annotations

import logging

from coordinator.protocol.common.backoff import doubled
from coordinator.protocol.region.config import RegionConfig
from coordinator.region.model import ResetKind

log = logging.getLogger(__name__)


def failure_backoff_s(streak: int, config: RegionConfig) -> float:
    """Step 2: the hold after the ``streak``-th failure of a streak (0: none); a
    pure function of the streak (the durable count), the project's one doubling formula."""
    if streak < 2:
        return 0.0
    return doubled(config.reset_backoff_s, streak - 2, config.reset_backoff_max_s)


class ResetHold:
    """The hold in force (steps 1-4): when the RESUME may be sent, and how long
    the hold is. ``ResetDrive`` calls `on_cause` for every counted cause,
    `left` when a round has every answer and on every tick while holding,
    `resumed` at the RESUME, `restore` once after a coordinator restart."""

    def __init__(self, config: RegionConfig) -> None:
        self._config = config
        self.until: float | None = None  # the RESUME's earliest time (None: no hold)
        self.length_s: float | None = None  # the hold's length (durable until the RESUME)
        self._restored_s: float | None = None  # a hold to apply to the first round after a restart

    def on_cause(self, kind: ResetKind, streak: int, consecutive: int, now: float) -> None:
        """A reset cause, counted (``streak`` and ``consecutive`` after the count). Steps 1-4."""
        if kind is ResetKind.FORCE:
            if self.length_s is not None:
                log.info("region %s: a forced reset clears the backoff hold of %.2fs (step 3b)", self._config.name,
                         self.length_s)
            self._clear()
        elif kind is ResetKind.FAILURE:
            self._restored_s = None
            delay = failure_backoff_s(streak, self._config)
            if delay > 0:
                self.until = max(self.until or 0.0, now + delay)
                self.length_s = delay
                log.info("region %s: failure %d of a failure streak (%d since the last progress, max %d): its RESUME "
                         "waits %.2fs (backoff)", self._config.name, streak, consecutive,
                         self._config.max_consecutive_resets, delay)
            else:  # the first failure of a streak: no hold (a restored one is dropped with the old streak)
                self._clear()
        elif self._restored_s is not None:  # membership: the first round after a restart (step 4)
            self.until, self.length_s = now + self._restored_s, self._restored_s
            self._restored_s = None
            log.info("region %s: the first reset after a coordinator restart holds its RESUME %.2fs (the hold in "
                     "force when the coordinator stopped)", self._config.name, self.length_s)

    def left(self, now: float) -> float | None:
        """Seconds until the RESUME may be sent; None when it may be sent now."""
        if self.until is None or now >= self.until:
            return None
        return self.until - now

    def resumed(self) -> float | None:
        """The RESUME is sent: the hold is over. Returns its length (None: none)."""
        length = self.length_s
        self._clear()
        return length

    def restore(self, length_s: float | None) -> None:
        """Step 4: from the durable document, before any round."""
        self._restored_s = length_s
        self.length_s = length_s

    def _clear(self) -> None:
        self.until = None
        self.length_s = None
        self._restored_s = None
