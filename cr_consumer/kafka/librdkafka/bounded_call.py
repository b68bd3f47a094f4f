"""Bounding a library call that takes no timeout: run it on a thread of its own
and wait for it at most a timeout.

librdkafka's synchronous commit and its close wait as long as they need (a
commit waits for the group coordinator). :class:`BoundedCaller` owns one
long-lived thread that runs such calls, one at a time:

1. ``run(call, timeout_s, what)`` hands ``call`` to the thread (waking it
   through a condition variable) and waits on the same condition until the
   call's outcome is there; the outcome is returned, or its exception raised,
   in the caller's thread.
2. No outcome within ``timeout_s``: :class:`~cr_consumer.kafka.client.ClientTimeout`
   naming ``what`` (the outcome is unknown: a commit may still succeed). The
   call goes on on the thread and its outcome, when it comes, is logged.
3. A ``run`` while an earlier call is still running waits for the thread to be
   free within its own timeout (ClientTimeout naming the call it waited for).
4. ``abandoned_since()`` tells whether a call whose caller stopped waiting
   (step 2) is still running, and since when; ``wait_free(timeout_s)`` waits
   for the thread to be free (:mod:`cr_consumer.kafka.librdkafka.gate` keeps
   every other library call from blocking behind such a call).
5. ``shutdown()`` asks the thread to end once it is free (and waits for that
   up to its ``join_s``); it is a daemon thread, so a call that never returns
   cannot keep the process alive.

The thread waits for work in slices of :data:`IDLE_SLICE_S` (every wait has a
timeout; a shutdown is seen within a slice).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from cr_consumer.kafka.client import ClientTimeout

log = logging.getLogger(__name__)
T = TypeVar("T")
#: Covariant: the thread's slot holds any caller's job as a ``_Job[object]``.
R_co = TypeVar("R_co", covariant=True)

#: Longest wait of the idle thread before it looks at a shutdown request again.
IDLE_SLICE_S = 1.0


class _Job(Generic[R_co]):
    """One call and its outcome; guarded by the caller's condition."""

    __slots__ = ("abandoned", "call", "done", "error", "result", "started_at", "what")

    def __init__(self, call: Callable[[], R_co], what: str) -> None:
        self.call = call
        self.what = what
        #: When the thread took the call (monotonic; None: not yet).
        self.started_at: float | None = None
        self.done = False
        self.result: R_co | None = None
        self.error: BaseException | None = None
        #: The caller stopped waiting (step 2): the outcome is only logged.
        self.abandoned = False


class BoundedCaller:
    """See the module docstring. Any thread may call :meth:`run`; calls are
    run one at a time, in the order the thread is free for them."""

    def __init__(self, name: str) -> None:
        self._cond = threading.Condition()
        self._job: _Job[object] | None = None  # handed over, not yet taken by the thread
        self._running: _Job[object] | None = None  # taken by the thread, not finished
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def run(self, call: Callable[[], T], timeout_s: float, what: str) -> T:
        deadline = time.monotonic() + timeout_s
        job: _Job[T] = _Job(call, what)
        with self._cond:
            while self._job is not None or self._running is not None:  # step 3
                busy = self._job or self._running
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ClientTimeout(
                        f"{what}: not started within {timeout_s * 1000:.0f} ms: "
                        f"{busy.what if busy else 'an earlier call'} is still running"
                    )
                self._cond.wait(left)
            if self._stop:
                raise ClientTimeout(f"{what}: the caller thread is shut down")
            self._job = job
            self._cond.notify_all()
            while not job.done:  # steps 1 and 2
                left = deadline - time.monotonic()
                if left <= 0:
                    job.abandoned = True
                    if self._job is job:  # never started: withdrawn
                        self._job = None
                        self._cond.notify_all()
                        raise ClientTimeout(f"{what}: not started within {timeout_s * 1000:.0f} ms")
                    raise ClientTimeout(f"{what}: no answer within {timeout_s * 1000:.0f} ms (outcome unknown)")
                self._cond.wait(left)
        if job.error is not None:
            raise job.error
        return job.result  # type: ignore[return-value]  # done without error: the call's result

    def abandoned_since(self) -> tuple[str, float] | None:
        """Step 4: the running call whose caller gave up waiting (what, when it
        started), or None."""
        with self._cond:
            job = self._running
            if job is None or not job.abandoned or job.started_at is None:
                return None
            return job.what, job.started_at

    def wait_free(self, timeout_s: float) -> bool:
        """Step 4: wait up to ``timeout_s`` until no call is running or handed
        over; True once free."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._job is not None or self._running is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def shutdown(self, join_s: float = 0.0) -> bool:
        """Step 5; waits up to ``join_s`` for the thread to end (a call in
        progress is not interrupted). True once the thread has ended."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if join_s > 0:
            self._thread.join(join_s)
        return not self._thread.is_alive()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._job is None and not self._stop:
                    self._cond.wait(IDLE_SLICE_S)
                if self._job is None:
                    return  # shut down and nothing handed over
                job, self._job = self._job, None
                job.started_at = time.monotonic()
                self._running = job
            try:
                result = job.call()
                error: BaseException | None = None
            except BaseException as exc:  # noqa: BLE001 - delivered to the caller (or logged if abandoned)
                result, error = None, exc
            with self._cond:
                job.result, job.error, job.done = result, error, True
                self._running = None
                self._cond.notify_all()
                abandoned = job.abandoned
            if abandoned:
                if error is not None:
                    log.error("%s finished after its caller's timeout, failed: %r", job.what, error)
                else:
                    log.warning("%s finished after its caller's timeout", job.what)


__all__ = ["IDLE_SLICE_S", "BoundedCaller"]
