"""The runner's warm standby: one member process started ahead, with everything a
member imports already imported, waiting for the identity of a member to
replace (``cr_consumer/cli/standby.py`` is the process; ``handoff.py`` the
line it is handed).

A member restarted cold spends most of its restart in the Python start-up and
its imports (about 0.3 s of CPU quiet, 0.4-1 s on a loaded machine); a standby
has done that already, so the replacement's pipeline is built within a few
tens of milliseconds of the hand-over. A standby never registers with the
coordinator or joins the Kafka group before it is handed an identity.

:class:`StandbyPool`, owned by the supervisor (``supervisor.py``); every method
is called under the supervisor's lock:

1. :meth:`~StandbyPool.start` (the region's start): schedule the first
   standby :data:`RESPAWN_DELAY_S` later, out of the way of the members' own
   start-up; step 3 spawns it (``MemberLauncher.spawn_standby``: the members'
   environment, stdin a pipe, output to ``<state_dir>/logs/standby.log``).
2. :meth:`~StandbyPool.take` (a member is to be started): the running standby,
   or None (none yet, or it died). The pool forgets it and starts the next one
   :data:`RESPAWN_DELAY_S` later, so that the next standby's imports do not
   compete for the CPU with the replacement's start and the region's reset.
3. :meth:`~StandbyPool.check` (every supervisor round): a standby that ended
   unused (killed, crashed, or its wait ran out) is reaped, logged and
   replaced after RESPAWN_DELAY_S, the delay doubling up to
   :data:`RESPAWN_MAX_S` while standbys keep dying young; a start that is due
   happens (a spawn that fails is logged and retried after RESPAWN_MAX_S).
4. :meth:`~StandbyPool.stop` (the region stops): SIGTERM the standby, reap it
   (SIGKILL after STOP_TIMEOUT_S); nothing is started after it.

Cost: one more Python process holding the member's imports (about 40 MB
resident, docs/operations.md) and its start-up CPU once per hand-over.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from cr_consumer.runtime.runner.launch import MemberLauncher

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
#: SIGTERM -> SIGKILL grace at stop(); a standby before its hand-over ends at
#: once on SIGTERM, so this only bounds one stuck in the kernel.
STOP_TIMEOUT_S = 5.0
#: The standby's log, in the members' log directory.
LOG_NAME = "standby.log"


class StandbyPool:
    """One warm standby (see the module docstring)."""

    def __init__(self, launcher: MemberLauncher, event: Callable[..., None],
                 respawn_delay_s: float | None = None) -> None:
        self._launcher = launcher
        self._event = event  # the supervisor's event log: (kind, member, **info)
        self.respawn_delay_s = RESPAWN_DELAY_S if respawn_delay_s is None else respawn_delay_s
        self._delay = self.respawn_delay_s
        self._proc: subprocess.Popen | None = None
        self._started = 0.0
        self._next_start: float | None = None  # when the next standby is due (monotonic); None: not scheduled
        self._log_file: BinaryIO | None = None
        self._stopped = False
        self.handed_over = 0

    @property
    def log_path(self) -> Path:
        return self._launcher.log_dir / LOG_NAME

    @property
    def pid(self) -> int | None:
        """The waiting standby's pid, or None."""
        proc = self._proc
        return proc.pid if proc is not None and proc.returncode is None else None

    def start(self) -> None:
        """Step 1."""
        self._next_start = time.monotonic() + self.respawn_delay_s

    def take(self) -> subprocess.Popen | None:
        """Step 2: the running standby, now the caller's, or None."""
        now = time.monotonic()
        self.check(now)
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        self.handed_over += 1
        self._delay = self.respawn_delay_s
        self._next_start = now + self._delay
        return proc

    def discard(self, proc: subprocess.Popen) -> None:
        """A taken standby that did not take its hand-over: kill and reap it (bounded)."""
        self._end(proc, signal.SIGKILL)

    def check(self, now: float) -> None:
        """Step 3."""
        if self._stopped:
            return
        proc = self._proc
        if proc is not None and proc.poll() is not None:
            young = now - self._started < YOUNG_S
            self._delay = min(RESPAWN_MAX_S, self._delay * 2) if young else self.respawn_delay_s
            self._event("standby-exit", "standby", pid=proc.pid, code=proc.returncode)
            log.warning("the standby (pid %d) ended unused with code %s; another starts in %.1fs (its log: %s)",
                        proc.pid, proc.returncode, self._delay, self.log_path)
            self._proc = None
            self._next_start = now + self._delay
            _close_stdin(proc)
        if self._proc is None and self._next_start is not None and now >= self._next_start:
            self._spawn(now)

    def stop(self) -> None:
        """Step 4."""
        self._stopped = True
        proc, self._proc = self._proc, None
        if proc is not None:
            self._end(proc, signal.SIGTERM)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _spawn(self, now: float) -> None:
        if self._stopped:
            return
        if self._log_file is None:
            self._log_file = open(self.log_path, "ab")  # noqa: SIM115 (closed at stop())
        try:
            self._proc = self._launcher.spawn_standby(self._log_file)
        except OSError as exc:  # cannot spawn (the python gone, no descriptors): retried later
            self._next_start = now + RESPAWN_MAX_S
            log.error("cannot start a standby (%s); retrying in %.0fs", exc, RESPAWN_MAX_S)
            return
        self._started = now
        self._next_start = None
        self._event("standby-start", "standby", pid=self._proc.pid)
        log.info("standby started (pid %d)", self._proc.pid)

    def _end(self, proc: subprocess.Popen, sig: int) -> None:
        if proc.poll() is None:
            proc.send_signal(sig)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:  # stuck in the kernel: logged and left
                log.error("the standby (pid %d) did not end %.0fs after SIGKILL; left unreaped", proc.pid,
                          STOP_TIMEOUT_S)
        _close_stdin(proc)

    def info(self) -> dict[str, Any]:
        return {"pid": self.pid, "handed_over": self.handed_over, "next_start_in_s":
                None if self._next_start is None else round(max(0.0, self._next_start - time.monotonic()), 3)}


def _close_stdin(proc: subprocess.Popen) -> None:
    if proc.stdin is not None:
        try:
            proc.stdin.close()
        except OSError:  # the pipe's reader is gone; nothing was buffered
            pass
