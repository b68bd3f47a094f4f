"""The reset round: how causes are counted, what a round sends, and when it
ends (no I/O, the loop thread only). :class:`ResetDrive` is owned by
:class:`~coordinator.region.machine.RegionCore`, which owns the phase, the
awaited members and the deadline, and does the I/O: it applies the steps this
module returns. The hold after a repeated failure is
``coordinator/region/timing.py`` (`ResetHold`, owned here); the pacing of the
checkpoint after a round is there too.

1. Cause: a member's request (``force`` for rebalances: the consecutive count
   goes to 0), a failure (a failed or late answer, a failed continuity check,
   a silent member: the count goes up), or a membership change (the count is
   unchanged). While a reset is running, further requests do not stack: the
   core logs and drops them, except one from a member that already answered
   the round (the round restarts). A request that arrived before the asker's
   own answer but was about a revocation after its reset is therefore
   dropped: the member asks again while its source stays in CR_RESET_PENDING
   (``cr_consumer/runtime/member/reset_watch.py``). A member joining during a
   reset restarts the reset round (new attempt) so that it takes part. A
   forced request that does not restart the round still clears the counts and
   the hold (`ResetDrive.forced`).
2. Counting (`ResetDrive.start`). Past ``max_consecutive_resets`` the region
   goes to FAILED (`RoundRefused`): it stays there (status, metrics; the
   runner exits non-zero). A consistent checkpoint clears the count only when
   it is progress (`ResetDrive.checkpoint_completed`): it moved a source
   offset past the previous consistent checkpoint, or the last failure is at
   least ``failure_memory_s`` old. A checkpoint that merely completes between
   two failures (the members drained before they reached the record that
   fails them) is not progress, so a record that fails every time ends in
   FAILED instead of an endless reset loop. The backoff follows a second
   count, the failure streak: failure resets in a row, each less than
   ``failure_memory_s`` after the previous one; progress does not end it, a
   forced cause does (and a checkpoint ``failure_memory_s`` after the last
   failure; a failure that much later starts a new streak at 1). From the
   second failure of a streak the RESUME waits for a growing hold (timing.py,
   the backoff). Both counts are durable; the time of the last failure is
   not: after a restart the first failure continues the restored streak and
   the first checkpoint starts the ``failure_memory_s`` clock, so a restart
   never clears either count. Limit: failures are not attributed to
   partitions. A record that fails every time on one partition while other
   partitions move makes every checkpoint between two failures progress: the
   consecutive count stays at 1 and the region never goes FAILED, but the
   streak grows and the region resets once per ``reset_backoff_max_s``
   (docs/operations.md: alert on the streak).
3. The round (`RoundStart`): ``attempt = next_attempt`` (persisted; attempts
   are never reused, so two rounds never mix in a merge), then RESET(last
   consistent seq, attempt, checkpoint members, merged offsets, own) to every
   member, or RESET_TO_INITIAL (attempt) when there is no consistent
   checkpoint yet. ``own`` is the member's own last completed checkpoint
   (``ConsistentCheckpoints.own``: the last consistent one, an earlier one for
   a member that was away, None for a new member): its non-source operators
   go back to their data of ``own``, so intervals it sealed there are
   published, never deleted. A reset caused by a member joining (new or
   restarted) or leaving gracefully carries ``rejoin: true``: a Kafka consumer
   is joining or has left the group, so a rebalance follows; each member asks
   its consumer to rejoin the group at once, so it is revoked during this
   reset (nothing fetched: no further forced reset) instead of at its next
   Kafka heartbeat, after the reset, with records fetched (one more forced
   reset round). Each command's ``resolve`` names the Kafka transactions its
   receiver resolves before it resets: its own entry, and for the first
   member in sorted order also those of members not in the round
   (``coordinator/region/resolve.py``, step 2). The core persists the
   attempt, then transitions to RESETTING, then sends.
4. Each member's answer is the core's (``RegionCore.ack``); an answer of
   another attempt is stale. A failed answer, or none within
   ``reset_timeout_s``, is a new cause (step 1, as a failure, restarting the
   round).
5. Every awaited member answered (or left): `ResetDrive.answered` returns
   `RoundAnswered`: how long the rounds took since the first cause, the
   hold still to wait after a repeated failure, and whose Kafka transactions
   the answering members resolved (resolve.py, step 3: the core persists the
   change before the RESUME). With a hold the core
   transitions to BACKOFF, and its tick asks the hold until it is over.
6. The RESUME: `ResetDrive.resume` returns `RoundEnd`: when the next drain may
   start (the pacing after a reset, ``CheckpointPacing.settle_delay``) and how
   long the region was held. The core persists the end of a hold (a restarted
   coordinator must not hold again), transitions to RUNNING and sends
   RESUME(complete=None).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import attrs

from coordinator.protocol.region.commands import RegionCommand, Reset, ResetToInitial
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.status import ResetStatus
from coordinator.protocol.region.transactions import Resolve
from coordinator.region.checkpoints import ConsistentCheckpoints
from coordinator.region.document import MAX_FAILURE_STREAK, RegionDocument
from coordinator.region.model import ResetKind
from coordinator.region.resolve import Resolved
from coordinator.region.timing import CheckpointPacing, ResetHold


@attrs.frozen
class RoundStart:
    """Step 3: a reset round to run now."""

    attempt: int
    kind: ResetKind
    #: The reason the core logs with its transition to RESETTING.
    why: str
    #: Each awaited member's command, by member name in sorted order.
    commands: tuple[tuple[str, RegionCommand], ...]
    #: The round fails as a whole (a failure cause, step 4) past this time.
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
    """Step 5: every member answered."""

    attempt: int | None
    #: Seconds since the first cause of the rounds that ended.
    took_s: float
    #: Seconds the RESUME must still wait (the backoff hold); None: RESUME now.
    hold_left_s: float | None
    #: The hold's length, counted from its failure (None: no hold).
    hold_s: float | None
    #: Whose transactions the round resolved (resolve.py, step 3): the core persists them.
    resolved: Resolved


@attrs.frozen
class RoundEnd:
    """Step 6: RESUME(complete=None) follows."""

    attempt: int | None
    #: Seconds from the first cause to the last answer of the rounds (a hold not included).
    took_s: float
    #: Seconds from now to the next drain (the pacing after a reset).
    next_drain_in_s: float
    #: The length of the hold that ended (None: there was none).
    held_s: float | None


class ResetDrive:
    """The decisions of one region's reset rounds (steps above): attempt
    numbering, the consecutive-reset count, the failure streak, the timing of
    the rounds, and the hold (`hold`). Reads the consistent checkpoints (for
    each member's RESET) and tells the pacing about rejoin hints and RESUMEs.
    The core calls `restore` once, from the durable document, before anything
    else; `start` for every cause that starts a round, `forced` for a forced
    one that does not; `answered` when every member answered, `resume` at the
    RESUME; `checkpoint_completed` after a consistent checkpoint."""

    def __init__(self, config: RegionConfig, pacing: CheckpointPacing, checkpoints: ConsistentCheckpoints) -> None:
        self._config = config
        self._pacing = pacing
        self._checkpoints = checkpoints
        #: The hold after a repeated failure (timing.py, the backoff).
        self.hold = ResetHold(config)
        #: Attempt of the running (or last) round.
        self.attempt: int | None = None
        #: Durable: attempts are never reused.
        self.next_attempt = 1
        #: Durable: failures since the last progress or forced reset (step 2).
        self.consecutive = 0
        #: Durable: failures in a row, each < failure_memory_s after the previous (step 2).
        self.streak = 0
        #: Rounds started (status and metrics).
        self.rounds = 0
        # When the last failure was counted (None: none since the streak ended, or
        # unknown after a restore). Not durable.
        self._last_failure_at: float | None = None
        self._started_at: float | None = None  # first cause of the rounds in progress
        self._took_s = 0.0  # the duration of the rounds that last ended (step 5), for their RESUME (step 6)

    # ------------------------------------------------------------------ steps
    def start(
        self, why: str, kind: ResetKind, members: Iterable[str], now: float, *, rejoin: bool
    ) -> RoundStart | RoundRefused:
        """Steps 2-3 for a cause ``kind`` with the awaited ``members``."""
        too_many = self._count(kind, now)
        if too_many is not None:
            return RoundRefused(f"{too_many}; last cause: {why}")
        self.hold.on_cause(kind, self.streak, self.consecutive, now)
        attempt = self.attempt = self.next_attempt
        self.next_attempt += 1
        self.rounds += 1
        if self._started_at is None:  # the first round since the last RESUME starts the clock
            self._started_at = now
        if rejoin:
            self._pacing.rejoin_hinted(now)
        names = sorted(members)
        resolve = self._checkpoints.transactions.hand_out(names)
        return RoundStart(
            attempt,
            kind,
            f"attempt {attempt} ({kind.value}, consecutive {self.consecutive}, streak {self.streak}): {why}",
            tuple((name, self._command(name, attempt, rejoin, resolve.get(name, ()))) for name in names),
            now + self._config.reset_timeout_s,
        )

    def _count(self, kind: ResetKind, now: float) -> str | None:
        """Step 2: count one cause. A forced (rebalance) cause clears the consecutive
        count and ends the streak, a failure raises both (or starts a new streak),
        a membership change leaves them. Returns why the region must fail
        instead, else None."""
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
            return (
                f"{self.consecutive - 1} consecutive resets did not bring the region "
                f"back (max {self._config.max_consecutive_resets})"
            )
        return None

    def _command(self, name: str, attempt: int, rejoin: bool, resolve: tuple[Resolve, ...]) -> RegionCommand:
        last = self._checkpoints.last_consistent
        if last is None:
            return ResetToInitial(attempt, rejoin=rejoin, resolve=resolve)
        return Reset(
            last,
            attempt,
            self._checkpoints.members,
            self._checkpoints.offsets,
            self._checkpoints.own(name),
            rejoin=rejoin,
            resolve=resolve,
        )

    def forced(self, now: float) -> None:
        """Step 1: a forced cause that starts no round (a round is running and the
        request does not restart it): it still clears the consecutive count, the
        streak and the hold."""
        self._count(ResetKind.FORCE, now)
        self.hold.on_cause(ResetKind.FORCE, self.streak, self.consecutive, now)

    def answered(self, now: float, present: Collection[str]) -> RoundAnswered:
        """Step 5; ``present``: the region's members now (those of the round each
        answered it; the others left during it)."""
        took = self._took_s = now - (self._started_at or now)
        self._started_at = None
        resolved = self._checkpoints.transactions.round_completed(present)
        return RoundAnswered(self.attempt, took, self.hold.left(now), self.hold.length_s, resolved)

    def resume(self) -> RoundEnd:
        """Step 6. Off the cadence grid: the pacing after a reset decides the next drain."""
        delay = self._pacing.settle_delay()
        self._pacing.resumed()
        return RoundEnd(self.attempt, self._took_s, delay, self.hold.resumed())

    def checkpoint_completed(self, *, advanced: bool, now: float) -> bool:
        """Step 2: a checkpoint became consistent; ``advanced``: it moved a source
        offset past the previous consistent checkpoint. Clears the count when
        the checkpoint is progress, and ends the streak too when the last failure
        is ``failure_memory_s`` old; returns whether the count is 0 now."""
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

    # ------------------------------------------------------------------ durable state, status
    def restore(self, stored: RegionDocument) -> None:
        """From the durable document, before any round. The last failure's time is
        not durable: when failures were counted, the first checkpoint after the
        restore starts the ``failure_memory_s`` clock and the first failure
        continues the streak (step 2), so a restart never clears a count nor
        shortens a hold."""
        self.next_attempt = stored.next_attempt
        self.consecutive = stored.consecutive_resets
        self.streak = stored.failure_streak
        self._last_failure_at = None
        self.hold.restore(stored.backoff_s)

    def status(self, now: float) -> ResetStatus:
        """The reset part of the region's status."""
        left = self.hold.left(now)
        return ResetStatus(
            attempt=self.attempt,
            consecutive_resets=self.consecutive,
            max_consecutive_resets=self._config.max_consecutive_resets,
            resets=self.rounds,
            backoff_s=self.hold.length_s,
            backoff_left_s=None if left is None else round(left, 3),
            failure_streak=self.streak,
        )


__all__ = ["ResetDrive", "RoundAnswered", "RoundEnd", "RoundRefused", "RoundStart"]
