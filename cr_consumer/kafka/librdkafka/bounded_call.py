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
   for the thread to be free (:class:`CallGate` keeps every other library call
   from blocking behind such a call).
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


#: Longest time the polling thread waits for a commit that got no answer in
#: time to leave librdkafka before the consumer is given up (step 5). Prevents
#: a member that never processes again while its process looks alive (a
#: coordinator that never answers holds the commit, and every call behind it,
#: for minutes); long enough that a coordinator a few seconds late (a GC pause,
#: a leader move) costs a failed drain, not a process restart.
ABANDONED_CALL_LIMIT_S = 30.0


class CallGate:
    """Keeps the polling thread out of librdkafka while an abandoned call is still
    inside it, for one consumer and its caller thread.

    A call abandoned by its caller (a commit that got no answer in time) blocks
    every other call on the same consumer while it is inside librdkafka, for
    minutes if the group coordinator never answers (docs/clients.md, "The
    drain's commit"). So every call into librdkafka on the polling thread
    passes :meth:`wait` first:

    1. No abandoned call is running: go on (one lock, no wait).
    2. One is running: wait for it to end, at most the call's own timeout (a poll's,
       a lookup's) and never past ``limit_s`` after the abandoned call started.
    3. It ended in time: go on; the call does not block.
    4. The call's own timeout came first: ``False`` (a poll returns no records and
       the polling thread goes on with its events; a lookup fails with
       :class:`~cr_consumer.kafka.client.ClientTimeout`).
    5. ``limit_s`` after the abandoned call started it is still inside librdkafka:
       :class:`~cr_consumer.kafka.client.ClientTimeout` for this and every later
       call that has to wait. The operator fails and its process is restarted
       with a new consumer; the abandoned call stays on its daemon thread.

    Only the polling thread calls into the consumer and only it hands calls to
    the caller thread, so no call can become abandoned between step 1 and the
    library call.
    """

    def __init__(self, caller: BoundedCaller, limit_s: float | None = None) -> None:
        self._caller = caller
        self._limit_s = ABANDONED_CALL_LIMIT_S if limit_s is None else limit_s
        self._warned_at: float | None = None  # the abandoned call already logged (its start)

    def wait(self, what: str, timeout_s: float | None) -> bool:
        """True: librdkafka can be called now. False: ``timeout_s`` passed first
        (step 4). Raises ClientTimeout past the limit (step 5)."""
        abandoned = self._caller.abandoned_since()
        if abandoned is None:
            return True
        call, since = abandoned
        now = time.monotonic()
        if self._warned_at != since:
            self._warned_at = since
            log.warning(
                "librdkafka is still inside a %s that got no answer in time (%.1fs ago): calls into it "
                "wait for it, at most until %.0fs after it started",
                call,
                now - since,
                self._limit_s,
            )
        limit_at = since + self._limit_s
        deadline = limit_at if timeout_s is None else min(limit_at, now + timeout_s)
        if self._caller.wait_free(max(0.0, deadline - now)):
            log.info("the %s that got no answer in time has left librdkafka; %s goes on", call, what)
            return True
        if time.monotonic() >= limit_at:
            raise ClientTimeout(
                f"{what}: librdkafka is still inside a {call} that got no answer "
                f"{self._limit_s:.0f}s after it started; every call into the consumer would "
                f"block behind it, so the consumer is given up"
            )
        return False

    def require(self, what: str, timeout_s: float) -> None:
        """As `wait` for a call with a timeout of its own that cannot return
        nothing: ClientTimeout when its timeout passes first."""
        if not self.wait(what, timeout_s):
            raise ClientTimeout(
                f"{what}: not started within {timeout_s * 1000:.0f} ms: librdkafka is "
                f"still inside an earlier call that got no answer in time"
            )


__all__ = ["ABANDONED_CALL_LIMIT_S", "IDLE_SLICE_S", "BoundedCaller", "CallGate"]
