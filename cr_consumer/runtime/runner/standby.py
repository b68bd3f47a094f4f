"""The runner's warm standby: one member process started ahead, with everything a
member imports already imported, waiting for the identity of a member to
replace (``cr_consumer/cli/standby.py`` is the process; ``handoff.py`` the
lines it is handed and answers with; ``standby_proc.py`` one standby as the
runner sees it). Why, and what it costs: docs/operations.md, "The warm standby".

:class:`StandbyPool`, owned by the supervisor (``supervisor.py``); every method
is called under the supervisor's lock:

1. :meth:`~StandbyPool.start` (the region's start): schedule the first
   standby :data:`RESPAWN_DELAY_S` later, out of the way of the members' own
   start-up; step 3 spawns it (``MemberLauncher.spawn_standby``: the members'
   environment, stdin a pipe, a status pipe, output to
   ``<state_dir>/logs/standby.log``).
2. :meth:`~StandbyPool.take` (a member is to be started): the standby if it
   runs and has said ``ready``, else None (none yet, still importing, or it
   died): the member then starts cold at once, never waiting for a standby.
   The pool forgets a standby it gives and starts the next one
   RESPAWN_DELAY_S later, so that the next standby's imports do not compete
   for the CPU with the replacement's start and the region's reset. The
   caller reports how the hand-over went: :meth:`~StandbyPool.handed`, or
   :meth:`~StandbyPool.discard` (the standby is killed and reaped, the next
   one's delay doubles as for a standby dying young).
3. :meth:`~StandbyPool.check` (every supervisor round): reads the standby's
   status (``ready``); a standby that ended unused (killed, crashed, its wait
   ran out), that is stopped (SIGSTOP: killed), or that is not ready
   :data:`READY_TIMEOUT_S` after its start (wedged in an import: killed) is
   reaped, logged and replaced after RESPAWN_DELAY_S, the delay doubling up
   to :data:`RESPAWN_MAX_S` while standbys keep dying young; a start that is
   due happens (a spawn that fails is logged and retried after RESPAWN_MAX_S).
4. :meth:`~StandbyPool.stop` (the region stops): SIGTERM the standby, reap it
   (SIGKILL after ``standby_proc.END_TIMEOUT_S``); nothing is started after it.

Where the hand-over can break, and what then (each has a test in
``tests/runtime/runner/test_standby_failures.py``):

1. The standby dies before it is ready (a tree without the standby module or
   with one that has no ``--status-fd``, a crash in an import): step 3 sees it (its pidfd wakes the supervisor) and
   replaces it after the doubling delay; a member start meanwhile is cold.
2. The standby is never ready (wedged while importing): a member start
   meanwhile is cold; after READY_TIMEOUT_S it is killed and replaced.
3. A ready standby is killed while idle: as 1. Killed just before a member
   start, ``take`` polls it first and the start is cold. Stopped (SIGSTOP)
   while idle or while importing: the next round (or ``take``) sees it in
   ``/proc``, kills, reaps and replaces it; the start is cold, at once.
4. It dies between ``take`` and the write, or its stdin is closed: the write
   fails (EPIPE): HandoffFailed, the member starts cold.
5. It is stopped (SIGSTOP) after ``take`` looked, or wedged, at the hand-over:
   the write or the answer does not come within ``launch.HANDOFF_TIMEOUT_S``:
   it is killed (SIGKILL works on a stopped process) and reaped, the member
   starts cold.
6. It dies after the write, before its answer: the status pipe ends:
   HandoffFailed, reaped, cold start, whatever its exit code (ExitCode.CONFIG
   from a standby that rejects the line without saying so is no final exit).
7. It refuses the hand-over (a line it cannot decode: a runner and standby of
   different versions; a member log it cannot open): it answers ``refused``
   with why and exits with ExitCode.CONFIG; the runner logs why, reaps it and
   starts the member cold. The region never sees that exit (it is no member's).
8. It dies after it answered ``took``: it is the member by then; its death
   is a member's, restarted as any (``supervisor.py`` step 1).
9. The runner dies at any point: the standby's parent-death signal (and its
   stdin's end) ends it.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from coordinator.protocol.common.backoff import doubled
from cr_consumer.runtime.runner.launch import MemberLauncher
from cr_consumer.runtime.runner.standby_proc import HandoffFailed, StandbyProc, StandbyState

log = logging.getLogger(__name__)

#: Delay between the region's start, a hand-over or an unused standby's death
#: and the next standby's start: its ~0.3-0.7 s of import CPU lands after the
#: members started (or the replacement joined and the region reset), not during it.
RESPAWN_DELAY_S = 3.0
#: Longest delay before replacing standbys that keep dying (a broken
#: environment must not fork a process every round).
RESPAWN_MAX_S = 60.0
#: A standby ending within this long of its start counts as "dying young".
YOUNG_S = 10.0
#: A standby not ready this long after its start (stopped, or wedged in an
#: import: a cold start takes about 1 s on a loaded machine) is killed and
#: replaced: without it such a standby would keep the pool's one place, and
#: every restart would start cold while it lives (up to the standby's 6 h wait).
READY_TIMEOUT_S = 60.0
#: The standby's log, in the members' log directory.
LOG_NAME = "standby.log"


class StandbyPool:
    """One warm standby (see the module docstring)."""

    def __init__(
        self, launcher: MemberLauncher, event: Callable[..., None], respawn_delay_s: float | None = None
    ) -> None:
        self._launcher = launcher
        self._event = event  # the supervisor's event log: (kind, member, **info)
        self.respawn_delay_s = RESPAWN_DELAY_S if respawn_delay_s is None else respawn_delay_s
        self._young_deaths = 0  # standbys in a row that died young or failed their hand-over
        self._standby: StandbyProc | None = None
        self._next_start: float | None = None  # when the next standby is due (monotonic); None: not scheduled
        self._log_file: BinaryIO | None = None
        self._stopped = False
        self.handed_over = 0

    @property
    def _delay(self) -> float:
        """Until the next standby's start: RESPAWN_DELAY_S, doubled per standby in a
        row that died young or failed its hand-over, at most RESPAWN_MAX_S."""
        if self._young_deaths == 0:
            return self.respawn_delay_s
        return doubled(self.respawn_delay_s, self._young_deaths, RESPAWN_MAX_S)

    @property
    def log_path(self) -> Path:
        return self._launcher.log_dir / LOG_NAME

    @property
    def pid(self) -> int | None:
        """The standby's pid while its process runs (ready or not), or None."""
        s = self._standby
        return s.pid if s is not None and s.proc.returncode is None else None

    @property
    def ready_pid(self) -> int | None:
        """The pid of a standby that said ready (as last seen), or None."""
        s = self._standby
        return s.pid if s is not None and s.proc.returncode is None and s.state is StandbyState.READY else None

    def start(self) -> None:
        """Step 1."""
        self._next_start = time.monotonic() + self.respawn_delay_s

    def take(self) -> StandbyProc | None:
        """Step 2: the ready standby, now the caller's, or None."""
        now = time.monotonic()
        self.check(now, spawn=False)  # a spawn now would delay the member's start
        standby = self._standby
        if standby is None or standby.state is not StandbyState.READY:
            return None
        self._standby = None
        self._next_start = now + self._delay
        return standby

    def handed(self, standby: StandbyProc) -> None:
        """Step 2: ``standby`` took its hand-over (a member now)."""
        self.handed_over += 1
        self._young_deaths = 0
        if self._standby is None and self._next_start is not None:
            self._next_start = min(self._next_start, time.monotonic() + self._delay)

    def discard(self, standby: StandbyProc, why: str) -> None:
        """Step 2: a taken standby did not take its hand-over: kill and reap it
        (bounded); the next one comes later, as after a death young."""
        standby.end(signal.SIGKILL, why)
        self._event("standby-exit", "standby", pid=standby.pid, code=standby.proc.returncode, reason=why)
        now = time.monotonic()
        self._young_deaths += 1
        if self._standby is None and not self._stopped:
            self._next_start = now + self._delay

    def check(self, now: float, spawn: bool = True) -> None:
        """Step 3 (without starting a standby that is due when ``spawn`` is False)."""
        if self._stopped:
            return
        standby = self._standby
        if standby is not None:
            why = self._unusable(standby, now)
            if why is not None:
                young = now - standby.started < YOUNG_S
                self._young_deaths = self._young_deaths + 1 if young else 0
                standby.end(signal.SIGKILL, why)
                self._event("standby-exit", "standby", pid=standby.pid, code=standby.proc.returncode, reason=why)
                log.warning(
                    "the standby (pid %d) %s (code %s); another starts in %.1fs (its log: %s)",
                    standby.pid,
                    why,
                    standby.proc.returncode,
                    self._delay,
                    self.log_path,
                )
                self._standby = None
                self._next_start = now + self._delay
        if spawn and self._standby is None and self._next_start is not None and now >= self._next_start:
            self._spawn(now)

    def _unusable(self, standby: StandbyProc, now: float) -> str | None:
        """Why ``standby`` must be replaced (step 3), or None."""
        if standby.proc.poll() is not None:
            return "ended unused"
        try:
            standby.poll()
        except HandoffFailed as exc:  # a malformed status line: a standby of another version
            return f"sent a bad status ({exc})"
        if standby.stopped():  # would not answer a hand-over: the member would wait HANDOFF_TIMEOUT_S for nothing
            return "is stopped (SIGSTOP)"
        if standby.state is StandbyState.STARTING and now - standby.started > READY_TIMEOUT_S:
            return f"was not ready {READY_TIMEOUT_S:.0f}s after its start (stopped or wedged)"
        return None

    def stop(self) -> None:
        """Step 4."""
        self._stopped = True
        standby, self._standby = self._standby, None
        if standby is not None:
            standby.end(signal.SIGTERM, "the region stops")
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _spawn(self, now: float) -> None:
        if self._stopped:
            return
        if self._log_file is None:
            self._log_file = open(self.log_path, "ab")  # noqa: SIM115 (closed at stop())
        try:
            self._standby = self._launcher.spawn_standby(self._log_file)
        except OSError as exc:  # cannot spawn (the python gone, no descriptors): retried later
            self._next_start = now + RESPAWN_MAX_S
            log.error("cannot start a standby (%s); retrying in %.0fs", exc, RESPAWN_MAX_S)
            return
        self._next_start = None
        self._event("standby-start", "standby", pid=self._standby.pid)
        log.info("standby started (pid %d)", self._standby.pid)
