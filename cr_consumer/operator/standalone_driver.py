"""The standalone driver: the operator without a region runtime commits what it
processed now and then, with its own region handlers (:class:`StandaloneDriver`).

The operator (``consumer.py``) makes one when it is given no permit, starts it
last at ``start()`` and stops it first at ``close()``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from cr_consumer.operator.config import RegionMode
from cr_consumer.operator.region import DrainError, RegionPermit
from cr_consumer.operator.states import ClientState

log = logging.getLogger(__name__)

#: Bound on blocking the permit before a standalone drain, so a stuck submit
#: shows as an error in the log instead of a silent hang.
PERMIT_BLOCK_S = 60.0
#: Wait between checks in operator-driven mode (no period): bounds how late the
#: thread notices that the operator failed (a failure does not notify it).
IDLE_WAIT_S = 1.0


class StandaloneDriver:
    """The operator without a region runtime. A plain group consumer commits what
    it processed now and then; this thread does that with the operator's own
    handlers:

    1. every ``commit_period_s`` (periodic mode), or when the process thread
       reached the trigger count (operator-driven mode, :meth:`StandaloneDriver.request_drain`):
       a. block the permit (the in-flight batch finishes);
       b. ``drain()``: stop polling, one synchronous commit of the submitted offsets;
       c. resume polling (throttled) and unblock the permit.
       A failed drain is logged and retried at the next period (a rebalance makes
       the commit fail).
    2. A periodic commit is skipped while the group join is in progress (nothing
       is assigned, and the drain would interrupt the join's polls).

    Rebalances need no cycle here: the revocation clears the queue and the next
    assignment seeks every partition to its committed offset (else control
    variable, else start position), see rebalance.py. Records submitted after the
    last commit are submitted again: at-least-once, as with any group consumer.

    The thread ends on :meth:`StandaloneDriver.stop` (joined with a timeout); an
    exception in a cycle other than a failed drain is handed to ``on_failure``
    (fatal for the operator).
    """

    #: The reason of a drain asked for by the process thread, or None. Written
    #: by the process thread and this thread, under ``_cond``.
    _drain_reason: str | None
    #: Set by stop() (the closing thread), under ``_cond``.
    _stop: bool

    def __init__(
        self,
        name: str,
        *,
        mode: RegionMode,
        commit_period_s: float,
        permit: RegionPermit,
        drain: Callable[[], None],
        resume_polling: Callable[[], None],
        state: Callable[[], ClientState],
        failed: Callable[[], bool],
        joining: Callable[[], bool],
        on_failure: Callable[[BaseException], None],
    ) -> None:
        self.name = name
        self._periodic = mode is RegionMode.PERIODIC
        self._period = commit_period_s
        self._permit = permit
        self._drain = drain
        self._resume_polling = resume_polling
        self._state = state
        self._failed = failed
        self._joining = joining
        self._on_failure = on_failure
        self._cond = threading.Condition()
        self._stop = False
        self._drain_reason = None
        self._thread = threading.Thread(target=self._run, name=f"cr-standalone-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def request_drain(self, reason: str) -> None:
        with self._cond:
            self._drain_reason = reason
            self._cond.notify_all()

    def _run(self) -> None:
        next_commit = time.monotonic() + self._period
        try:
            while True:
                with self._cond:
                    wait = max(0.0, next_commit - time.monotonic()) if self._periodic else IDLE_WAIT_S
                    self._cond.wait_for(lambda: self._stop or self._drain_reason is not None, wait)
                    if self._stop:
                        return
                    drain, self._drain_reason = self._drain_reason, None
                if self._failed():
                    return
                if drain is not None or (self._periodic and time.monotonic() >= next_commit):
                    next_commit = time.monotonic() + self._period
                    if self._joining() and drain is None:
                        continue  # nothing assigned, nothing to commit; do not interrupt the join's polls
                    self._cycle()
        except Exception as exc:  # fatal for the operator, reported there
            log.exception("%s: standalone driver failed", self.name)
            self._on_failure(exc)

    def _cycle(self) -> None:
        if not self._permit.block(PERMIT_BLOCK_S):
            self._permit.unblock()
            raise TimeoutError(f"{self.name}: the process thread kept the permit for {PERMIT_BLOCK_S}s")
        try:
            if self._state() not in (ClientState.CLOSED, ClientState.FAILED):
                try:
                    self._drain()
                except DrainError as exc:
                    log.warning("%s: standalone drain failed (will retry): %s", self.name, exc)
                self._resume_polling()
        finally:
            self._permit.unblock()


__all__ = ["IDLE_WAIT_S", "PERMIT_BLOCK_S", "StandaloneDriver"]
