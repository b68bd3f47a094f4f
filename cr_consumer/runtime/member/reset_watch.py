"""Member side: a source left waiting for a reset asks for it again (no I/O).

A source that was revoked after fetching enters CR_RESET_PENDING: its
partitions stay paused and its records are dropped until the region resets
it. Its forced reset request can go missing: dropped by a control channel that
was not joined at that moment, not stacked by a controller already resetting
(the request arrived before this member's own answer to that round, which then
ran before the revocation), or never sent because another member of the group
had already set the group's reset-pending flag and its request was the lost
one. In periodic mode the next drain fails and resets the region; in
operator-driven mode nothing would ever trigger again (no records flow, so no
trigger): the region hung.

The watch, polled by the member's control thread between commands:

1. While the source is not in CR_RESET_PENDING, nothing (and the count of
   re-requests starts again).
2. In CR_RESET_PENDING, the region RUNNING as the last heartbeat answer said
   (while the control channel is not joined it holds the last request and
   sends it once joined again; a region that is resetting or waiting resets
   this member anyway, and a drain fails in CR_RESET_PENDING), and no reset
   request or completed reset for ``interval_s``: ask again (``REQUEST``; the member sends a forced reset
   request directly on its control channel, past the group's flag).
3. After ``max_requests`` re-requests within one stay in CR_RESET_PENDING:
   ``GIVE_UP``: the member exits with an error (the runner restarts it, and its
   rejoin resets the region), instead of asking for ever.
"""

from __future__ import annotations

import enum
import threading

#: Time in CR_RESET_PENDING without a reset request or a completed reset before
#: the member asks again: longer than a reset round normally takes to reach it
#: (its request is usually answered within ~100 ms), short against the drain timeout.
RE_REQUEST_S = 2.0
#: Re-requests per stay in CR_RESET_PENDING before the member gives up and exits
#: (bounds a member that keeps asking a region that cannot serve it).
RE_REQUESTS_MAX = 5


class WatchAction(str, enum.Enum):
    NONE = "none"
    REQUEST = "request"
    GIVE_UP = "give_up"


class ResetPendingWatch:
    """See the module docstring. ``requested`` may be called from any thread."""

    def __init__(self, interval_s: float = RE_REQUEST_S, max_requests: int = RE_REQUESTS_MAX) -> None:
        self.interval_s = interval_s
        self.max_requests = max_requests
        self._lock = threading.Lock()
        self._last: float | None = None  # last reset request or completed reset
        self._count = 0

    def requested(self, now: float) -> None:
        """A reset request was sent (by the source, the pipeline or this watch)."""
        with self._lock:
            self._last = now

    def reset_done(self, now: float) -> None:
        with self._lock:
            self._last = now
            self._count = 0

    def check(self, pending: bool, region_running: bool, now: float) -> WatchAction:
        with self._lock:
            if not pending:
                self._count = 0
                return WatchAction.NONE
            if not region_running:
                return WatchAction.NONE
            if self._last is None:
                self._last = now  # pending seen first now: give the source's own request its time
                return WatchAction.NONE
            if now - self._last < self.interval_s:
                return WatchAction.NONE
            if self._count >= self.max_requests:
                return WatchAction.GIVE_UP
            self._count += 1
            self._last = now
            return WatchAction.REQUEST

    @property
    def requests(self) -> int:
        return self._count
