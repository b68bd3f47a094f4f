"""When the coordinator resolves a region's Kafka transactions itself: the decision part, no I/O,
the loop thread only (the protocol's "no live member" steps,
``coordinator/protocol/region/transactions.py``; the Kafka work runs on
``coordinator/region/txn_worker.py``'s thread).

:class:`AbandonedResolve` is kept per region by the region controller service
(``coordinator/region/service.py``), which calls it at every tick:

1. :meth:`AbandonedResolve.due`: the region has had no member for
   :data:`RESOLVE_AFTER_S` (a FAILED region counts as having none: its
   members were told to exit and none resumes, though a FAILED region keeps
   listing them), no job of it runs, the retry delay of its last
   failure (the project's ``Backoff``) is over, and some entry names its
   cluster (``Transactions.bootstrap``): those entries (at most
   :data:`MAX_JOB_ENTRIES`, oldest checkpoint first) become the region's one
   job. The service then holds the region's start (``RegionCore.hold_start``)
   and hands the job to the worker.
2. While the job runs, a member that joins cancels it (:meth:`AbandonedResolve.cancel`):
   the worker stops before its next Kafka step; the entries it did not finish
   go to the joiner's reset as always.
3. :meth:`AbandonedResolve.finished`: the outcome is back on the loop thread;
   the service applies it (``ResolveEntries.resolved_elsewhere``), releases the
   hold, and on a failure the next attempt waits the backoff's delay.
"""

from __future__ import annotations

import threading

import attrs

from coordinator.protocol.common.backoff import Backoff
from coordinator.protocol.region.transactions import Resolve

#: How long a region must have had no member before the coordinator resolves its transactions
#: itself. Below it a restarted member (the runner restarts one at once, the warm standby in
#: about a second) rejoins and its reset resolves them, with no second client on the cluster;
#: far below the sink's ``transaction.timeout.ms`` (15 minutes by default), so a broker never
#: aborts a completed checkpoint's prepared transaction first, and an abandoned open
#: transaction holds back ``read_committed`` readers for the member timeout plus this plus the
#: job, not until a member returns.
RESOLVE_AFTER_S = 10.0
#: Retry delays after a failed job (doubling, ``Backoff``): a cluster that is down is asked
#: again soon, then at most once a minute, well within the transaction timeout.
RETRY_FIRST_S = 2.0
RETRY_MAX_S = 60.0
#: Most entries of one job: a job is bounded in time (each Kafka step is, ``RESOLVE_DEADLINE_S``
#: in ``coordinator/kafka/transactions.py``), so a region with many absent members is resolved in
#: several jobs and a joining member waits for one job's step at most.
MAX_JOB_ENTRIES = 64


@attrs.frozen
class ResolveJob:
    """One region's entries to resolve on the worker; ``cancel`` is set by the loop thread."""

    region: str
    entries: tuple[Resolve, ...]
    cancel: threading.Event = attrs.field(factory=threading.Event, eq=False)


@attrs.frozen
class JobOutcome:
    """What the worker did with a job: the entries it resolved whole, and why the others failed
    (member -> (entry, reason)); an entry not tried (cancelled) is in neither."""

    job: ResolveJob
    resolved: tuple[Resolve, ...]
    failed: dict[str, tuple[Resolve, str]]
    cancelled: bool


class AbandonedResolve:
    """One region's steps 1-3 (see the module docstring). Not thread-safe."""

    def __init__(self, after_s: float = RESOLVE_AFTER_S) -> None:
        self.after_s = after_s
        self.backoff = Backoff(RETRY_FIRST_S, RETRY_MAX_S)
        self.running: ResolveJob | None = None
        self._alone_since: float | None = None

    def due(
        self, region: str, now: float, *, members: int, entries: tuple[Resolve, ...], failed: bool = False
    ) -> ResolveJob | None:
        """Step 1: the job to start now, or None (``failed``: the region is FAILED)."""
        if members and not failed:
            self._alone_since = None
            return None
        if self._alone_since is None:
            self._alone_since = now
        if self.running is not None or now - self._alone_since < self.after_s or not self.backoff.ready(now):
            return None
        todo = sorted((e for e in entries if e.transactions.bootstrap is not None), key=lambda e: (e.seq, e.member))
        if not todo:
            return None
        self.running = ResolveJob(region, tuple(todo[:MAX_JOB_ENTRIES]))
        return self.running

    def cancel(self) -> None:
        """Step 2: a member joined while the job runs."""
        if self.running is not None:
            self.running.cancel.set()

    def finished(self, outcome: JobOutcome, now: float) -> float | None:
        """Step 3: the job is over; returns the delay before the next attempt after a failure."""
        if outcome.job is self.running:
            self.running = None
        if outcome.failed:
            return self.backoff.failed(now)
        if not outcome.cancelled:
            self.backoff.succeeded()
        return None


__all__ = [
    "MAX_JOB_ENTRIES",
    "RESOLVE_AFTER_S",
    "RETRY_FIRST_S",
    "RETRY_MAX_S",
    "AbandonedResolve",
    "JobOutcome",
    "ResolveJob",
]
