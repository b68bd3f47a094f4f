"""The region controller's reset rounds: the counters and timing that
:class:`~coordinator.region.reset_round.ResetDrive` keeps in one `ResetRounds`
object (no I/O, the loop thread only). What a round sends and when it ends is
`coordinator.region.reset_round`; the core applies it (phase, persistence,
sends); the pacing of the checkpoint after it is `coordinator.region.pacing`.

The reset:

1. Cause: a member's request (``force`` for rebalances: the consecutive counter
   goes to 0), a failure (the counter goes up), or a membership change (the
   counter is unchanged). While a reset is running, further requests do not
   stack: they are logged and dropped, except one from a member that already
   answered the round (the round restarts). A request that arrived before the
   asker's own answer but was about a revocation after its reset is therefore
   dropped: the member asks again while its source stays in CR_RESET_PENDING
   (``cr_consumer/runtime/member/reset_watch.py``). A member joining during a reset
   restarts the reset round (new attempt) so that it takes part.
2. Past ``max_consecutive_resets`` the region goes to FAILED: it stays there
   (status, metrics; the runner exits non-zero). A consistent checkpoint clears
   the counter only when it is progress: it moved a source offset past the
   previous consistent checkpoint, or the last failure is at least
   ``failure_memory_s`` old. A checkpoint that merely completes between two
   failures (the members drained before they reached the record that fails
   them) is not progress, so a record that fails every time ends in FAILED
   instead of an endless reset loop. The backoff follows a second count, the
   failure streak: failure resets in a row, each less than ``failure_memory_s``
   after the previous one; progress does not end it, a forced cause does (and a
   checkpoint ``failure_memory_s`` after the last failure; a failure that much
   later starts a new streak at 1). From the second failure of a streak the
   RESUME waits for a growing hold (``coordinator/region/backoff.py``). Both
   counts are durable; the time of the last failure is not: after a restart the
   first failure continues the restored streak and the first checkpoint starts
   the ``failure_memory_s`` clock, so a restart never clears either count.
   Limit: failures are not attributed to partitions. A record that fails every
   time on one partition while other partitions move makes every checkpoint
   between two failures progress: the consecutive count stays at 1 and the
   region never goes FAILED, but the streak grows and the region resets once
   per ``reset_backoff_max_s`` (docs/operations.md: alert on the streak).
3. ``attempt = next_attempt`` (persisted; attempts are never reused, so two
   rounds never mix in a merge), then RESET(last consistent seq, attempt,
   checkpoint members, merged offsets, own) to every member, or
   RESET_TO_INITIAL (attempt) when there is no consistent checkpoint yet.
   ``own`` is the member's own last completed checkpoint (``own_checkpoint``:
   the last consistent one, an earlier one for a member that was away, None
   for a new member): its non-source operators go back to their data of
   ``own``, so intervals it sealed there are published, never deleted.
   A reset caused by a member joining (new or restarted) or leaving gracefully
   carries ``rejoin: true``: a Kafka consumer is joining or has left the
   group, so a rebalance follows; each member asks its consumer to rejoin the
   group at once, so it is revoked during this reset (nothing fetched: no
   further forced reset) instead of at its next Kafka heartbeat, after the
   reset, with records fetched (one more forced reset round).
4. All members answered within ``reset_timeout_s``: RESUME(complete=None),
   phase RUNNING (after a repeated failure: BACKOFF until the hold is over,
   ``coordinator/region/backoff.py``). A failed or late answer retries from
   step 1 as a failure.
"""

from __future__ import annotations

from coordinator.protocol.region.config import RegionConfig
from coordinator.region.document import MAX_FAILURE_STREAK
from coordinator.region.model import ResetKind


class ResetRounds:
    """Attempt numbering, the consecutive-reset count, the failure streak and the timing of one region's
    reset rounds (steps 1-4 above). The core calls, in order: `note_cause` for
    every cause, `begin` when a round starts, `finish` when every member
    answered; `checkpoint_completed` after a consistent checkpoint; `restore`
    once, from the durable document, before any of them."""

    def __init__(self, config: RegionConfig) -> None:
        self._config = config
        self.attempt: int | None = None  # attempt of the running (or last) round
        self.next_attempt = 1  # durable: attempts are never reused
        self.consecutive = 0  # durable: failures since the last progress (step 2) or forced reset
        self.streak = 0  # durable: failures in a row, each < failure_memory_s after the previous (step 2)
        # When the last failure was counted (None: none since the streak ended, or
        # unknown after a restore). Not durable.
        self._last_failure_at: float | None = None
        self.rounds = 0  # rounds started (status and metrics)
        self._started_at: float | None = None  # first cause of the rounds in progress

    def restore(self, *, next_attempt: int, consecutive: int, streak: int) -> None:
        """From the durable document. The last failure's time is not durable: when
        failures were counted, the first checkpoint after the restore starts the
        ``failure_memory_s`` clock and the first failure continues the streak
        (step 2), so a restart never clears a count nor shortens a hold."""
        self.next_attempt = next_attempt
        self.consecutive = consecutive
        self.streak = streak
        self._last_failure_at = None

    def note_cause(self, kind: ResetKind, now: float) -> str | None:
        """Step 1: count one cause. A forced (rebalance) cause clears the consecutive
        count and ends the streak, a failure raises both (or starts a new streak,
        step 2), a membership change leaves them. Returns why the region must fail
        instead (step 2), else None."""
        if kind is ResetKind.FORCE:
            self.consecutive = 0
            self.streak = 0
            self._last_failure_at = None
        elif kind is ResetKind.FAILURE:
            self.consecutive += 1
            if self._last_failure_at is not None and now - self._last_failure_at >= self._config.failure_memory_s:
                self.streak = 1
            else:  # within failure_memory_s of the last failure, or its time unknown (restored)
                self.streak = min(self.streak + 1, MAX_FAILURE_STREAK)
            self._last_failure_at = now
        if self.consecutive > self._config.max_consecutive_resets:
            return (f"{self.consecutive - 1} consecutive resets did not bring the region "
                    f"back (max {self._config.max_consecutive_resets})")
        return None

    def begin(self) -> int:
        """Step 3: a new attempt number (the caller persists `next_attempt` before
        sending it); returns it."""
        self.attempt = self.next_attempt
        self.next_attempt += 1
        self.rounds += 1
        return self.attempt

    def started(self, now: float) -> None:
        """The round is under way; the first one since the last RESUME starts the clock."""
        if self._started_at is None:
            self._started_at = now

    def finish(self, now: float) -> float:
        """Step 4: every member answered; returns the seconds since the first cause."""
        took = now - (self._started_at or now)
        self._started_at = None
        return took

    def checkpoint_completed(self, *, advanced: bool, now: float) -> bool:
        """Step 2: a checkpoint became consistent; ``advanced``: it moved a source
        offset past the previous consistent checkpoint. Clears the counter when
        the checkpoint is progress, and ends the streak too when the last failure
        is ``failure_memory_s`` old; returns whether the counter is 0 now."""
        if (self.consecutive or self.streak) and self._last_failure_at is None:  # restored: the clock starts now
            self._last_failure_at = now
        quiet = self._last_failure_at is None or now - self._last_failure_at >= self._config.failure_memory_s
        if advanced:
            self.consecutive = 0
        if quiet:
            self.consecutive = 0
            self.streak = 0
            self._last_failure_at = None
        return self.consecutive == 0
