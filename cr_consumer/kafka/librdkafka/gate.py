"""Keeping the polling thread out of librdkafka while an abandoned commit is
still inside it.

A synchronous commit that got no answer within its timeout goes on on the
adapter's :class:`~cr_consumer.kafka.librdkafka.bounded_call.BoundedCaller` thread
(its outcome is unknown, the drain has failed). While it is inside
librdkafka, *every* other call on the same consumer blocks behind it: poll,
pause, resume, seek, position, the lookups, the member id, even the
assignment (measured with the broker stopped: each call still blocked after
10 s, and a poll after 90 s; with no commit outstanding each returns at once
or at its timeout). A commit to a group coordinator that never answers can
stay there for minutes, and the polling thread with it: the member would be
alive to the region's coordinator and never answer it.

So every call into librdkafka on the polling thread passes :meth:`CallGate.wait`
first:

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

from __future__ import annotations

import logging
import time

from cr_consumer.kafka.client import ClientTimeout
from cr_consumer.kafka.librdkafka.bounded_call import BoundedCaller

log = logging.getLogger(__name__)

#: Longest time the polling thread waits for a commit that got no answer in
#: time to leave librdkafka before the consumer is given up (step 5). Prevents
#: a member that never processes again while its process looks alive (a
#: coordinator that never answers holds the commit, and every call behind it,
#: for minutes); long enough that a coordinator a few seconds late (a GC pause,
#: a leader move) costs a failed drain, not a process restart.
ABANDONED_CALL_LIMIT_S = 30.0


class CallGate:
    """Steps 1-5 of the module docstring, for one consumer and its caller thread."""

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


__all__ = ["ABANDONED_CALL_LIMIT_S", "CallGate"]
