"""One supervised member process of a region runner, and its restart backoff.

The runner's supervisor (``supervisor.MemberSupervisor``) keeps one
:class:`MemberProc` per member name. When it first sees the process dead it
calls :meth:`MemberProc.schedule_restart`, then starts the member again once
``next_start`` has passed:

1. The first death since a start that was not itself a quick restart is
   restarted at once: a kill -9 must not add a delay to recovery.
2. A member that dies again within :data:`RESTART_WINDOW_S` of its restart
   waits :data:`RESTART_FIRST_S`, doubling while it keeps dying (no hot restart
   loop), up to :data:`RESTART_MAX_S` (``coordinator.protocol.common.backoff.Backoff``:
   each quick death is a failure, a death after a stable run a success).
"""

from __future__ import annotations

import subprocess
from typing import BinaryIO

import attrs

from coordinator.protocol.common.backoff import Backoff

#: Restart delay of a member's first death: none.
RESTART_MIN_S = 0.0
#: Restart delay of the first death within RESTART_WINDOW_S of a restart.
RESTART_FIRST_S = 0.2
#: Longest restart delay of a member that keeps dying: once the cause is gone (a
#: broker back up), it is running again within this long.
RESTART_MAX_S = 5.0
#: A death within this long of the last (re)start counts as "keeps dying".
RESTART_WINDOW_S = 10.0


@attrs.define
class MemberProc:
    name: str
    proc: subprocess.Popen[bytes] | None = None
    log_file: BinaryIO | None = None  # the member's log, open while its process may write to it
    restarts: int = 0
    last_start: float = 0.0
    next_start: float = 0.0
    delay: float = RESTART_MIN_S  # of the last scheduled restart
    removed: bool = False
    exit_codes: list[int] = attrs.field(factory=list)
    #: Quick deaths in a row (step 2); a death after a stable run starts over.
    backoff: Backoff = attrs.field(factory=lambda: Backoff(RESTART_FIRST_S, RESTART_MAX_S))

    def schedule_restart(self, now: float) -> float:
        """Set ``next_start`` after a death seen at ``now`` (monotonic); returns the delay."""
        quick = self.restarts > 0 and now - self.last_start < RESTART_WINDOW_S
        if quick:
            self.delay = self.backoff.failed(now)
        else:
            self.backoff.succeeded()
            self.delay = RESTART_MIN_S
        self.next_start = now + self.delay
        return self.delay


__all__ = ["RESTART_FIRST_S", "RESTART_MAX_S", "RESTART_MIN_S", "RESTART_WINDOW_S", "MemberProc"]
