"""The standalone driver: the operator without a region runtime.

A plain group consumer commits what it processed now and then; this thread
does that with the operator's own handlers, and handles rebalances:

* every ``commit_period_s`` (periodic mode), or when the process thread
  reached the trigger count (operator-driven mode):
  1. block the permit (the in-flight batch finishes);
  2. ``drain()``: stop polling, one synchronous commit of the submitted offsets;
  3. resume polling (throttled) and unblock the permit.
  A failed drain is logged and retried at the next period (a rebalance makes
  the commit fail; the reset below follows).
* rebalances need no cycle here: the revocation clears the queue and the
  next assignment seeks every partition to its committed offset (else
  control variable, else start position), see rebalance.py. Records
  submitted after the last commit are submitted again: at-least-once, as
  with any group consumer. Drains during a rebalance fail and are retried.
* ``request_reset`` (kept for callers that want one) resets the same way:
  block the permit, seek all to the committed offsets, unblock.

The thread ends on ``stop()`` (joined with a timeout); an exception in a
cycle other than a failed drain is fatal for the operator.
"""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger(__name__)

#: Bound on blocking the permit before a standalone drain/reset, so a stuck
#: submit shows as an error in the log instead of a silent hang.
PERMIT_BLOCK_S = 60.0


class StandaloneDriver:
    def __init__(self, op) -> None:
        self._op = op
        self._cond = threading.Condition()
        self._stop = False
        self._reset_reason: str | None = None
        self._drain_reason: str | None = None
        self._thread = threading.Thread(target=self._run, name=f"cr-standalone-{op.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def request_reset(self, reason: str) -> None:
        with self._cond:
            self._reset_reason = reason
            self._cond.notify_all()

    def request_drain(self, reason: str) -> None:
        with self._cond:
            self._drain_reason = reason
            self._cond.notify_all()

    def _run(self) -> None:
        from cr_consumer.operator.config import RegionMode

        op = self._op
        periodic = op.config.region_mode is RegionMode.PERIODIC
        period = op.config.commit_period_s
        next_commit = time.monotonic() + period
        try:
            while True:
                with self._cond:
                    wait = max(0.0, next_commit - time.monotonic()) if periodic else None
                    self._cond.wait_for(
                        lambda: self._stop or self._reset_reason is not None or self._drain_reason is not None,
                        wait if wait is not None else 1.0,
                    )
                    if self._stop:
                        return
                    reset, self._reset_reason = self._reset_reason, None
                    drain, self._drain_reason = self._drain_reason, None
                if op.failure is not None:
                    return
                if reset is not None:
                    self._cycle(lambda why=reset: op._reset_to(None, initial=False, what=f"committed offsets ({why})"))
                elif drain is not None or (periodic and time.monotonic() >= next_commit):
                    next_commit = time.monotonic() + period
                    if op.rebalancer.joining and drain is None:
                        continue  # nothing assigned, nothing to commit; do not interrupt the join's polls
                    self._cycle(self._drain_and_resume)
        except Exception as exc:  # noqa: BLE001 - fatal for the operator, reported there
            log.exception("%s: standalone driver failed", op.name)
            op._on_failure(exc)

    def _drain_and_resume(self) -> None:
        op = self._op
        from cr_consumer.operator.consumer import DrainError

        try:
            op.drain()
        except DrainError as exc:
            log.warning("%s: standalone drain failed (will retry): %s", op.name, exc)
        op.resume_polling()

    def _cycle(self, fn) -> None:
        op = self._op
        from cr_consumer.operator.states import ClientState

        if not op.permit.block(PERMIT_BLOCK_S):
            op.permit.unblock()
            raise TimeoutError(f"{op.name}: the process thread kept the permit for {PERMIT_BLOCK_S}s")
        try:
            if op.state not in (ClientState.CLOSED, ClientState.FAILED):
                fn()
        finally:
            op.permit.unblock()


__all__ = ["StandaloneDriver"]
