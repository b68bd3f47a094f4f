"""The runner's supervisor: keeps a region's member processes (and the
coordinator the runner started) running.

One thread (``region-supervisor``, owned by :class:`MemberSupervisor`,
started by :meth:`~MemberSupervisor.start`, stopped by
:meth:`~MemberSupervisor.stop`) checks the processes every ``SUPERVISE_S``:

1. A member that died (kill -9, crash) is restarted under the same name, at
   once, with a backoff only when it keeps dying (``member_proc.py``); its last
   ERROR line (``member_proc.last_error``) is logged with the restart. A restart that
   cannot spawn the process is logged and retried every ``RESTART_MAX_S``
   (one exit event, one restart counted when it succeeds).
2. A member that exits with a final code (:data:`cr_consumer.exit_code.FINAL`:
   bad settings, region FAILED) is not restarted and marks the region failed:
   ``failed`` names the member, the code, its last ERROR line and its log.
3. With ``restart_members`` False a dead member stays dead (removed).
4. The coordinator this runner started is restarted on the same endpoint and
   state directory if it died.
5. With a warm standby (``standby.py``), a member is started by handing its
   identity to the standby (``MemberLauncher.hand_over``) when one is ready,
   else cold; a hand-over the standby does not take (refused, no answer in
   time, it died) is logged and the member started cold at once. The pool's
   own round replaces a standby that died unused.

Between rounds the thread waits on the processes themselves
(:class:`~cr_consumer.runtime.runner.exit_watch.ExitWatch`): a member's death
wakes it at once, not at the next ``SUPERVISE_S`` tick.

A check that raises is logged and the next round retries. The fault handles
(``kill``, ``add``, ``remove``, ``kill_coordinator``) run on the callers'
threads, under the same lock as the checks.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import threading
import time
from typing import Any, ClassVar

from coordinator.launcher import CoordinatorProcess
from cr_consumer.exit_code import FINAL, ExitCode
from cr_consumer.runtime.runner.exit_watch import ExitWatch
from cr_consumer.runtime.runner.launch import MemberLauncher
from cr_consumer.runtime.runner.member_proc import RESTART_MAX_S, MemberProc, last_error
from cr_consumer.runtime.runner.standby import StandbyPool
from cr_consumer.runtime.runner.standby_proc import HandoffFailed

log = logging.getLogger(__name__)

#: Supervisor round interval: bounds how long a dead member stays dead where
#: process exits cannot be waited on (``exit_watch.py``), and how late a backoff
#: restart or a standby's start happens.
SUPERVISE_S = 0.1
#: SIGTERM -> SIGKILL grace for a member at stop()/remove(), so a wedged
#: member (a sink stuck in I/O) cannot hang the runner's shutdown.
STOP_TIMEOUT_S = 10.0
#: Bound on the supervisor thread's exit at stop() (it wakes every SUPERVISE_S;
#: a restart in progress finishes first).
THREAD_JOIN_S = 5.0
#: Events kept (the oldest are dropped): bounds the memory of a runner whose
#: members are killed and restarted for weeks.
MAX_EVENTS = 10_000
#: Bound on reaping a member after its SIGKILL, so one stuck in the kernel (an
#: uninterruptible wait) cannot hang stop(); it is logged and left.
KILL_WAIT_S = 5.0


class NotRunning(ValueError):
    """A fault handle named a member (or coordinator) that has no live process."""


class MemberSupervisor:
    """The member processes of one region (see the module docstring).

    Shared thread state, guarded by ``_lock`` (the supervisor thread and the
    callers of the fault handles): ``_members`` (added by callers, restarted and
    marked removed by both), ``events`` and ``standby`` (the pool: taken by a
    start on either, checked by the supervisor thread, stopped by ``stop()``).
    ``failed`` and ``failed_code`` are written once, by the supervisor thread
    (step 2), and read by any thread. ``_exits`` is waited on by the supervisor
    thread only (outside the lock), woken by ``stop()``.
    """

    _members: dict[str, MemberProc]
    events: list[dict[str, Any]]
    failed: str | None
    failed_code: ExitCode | None
    #: Names are ``member-<index>``; an index is never reused (metrics ports, logs).
    NAME_PREFIX: ClassVar[str] = "member-"

    def __init__(
        self,
        launcher: MemberLauncher,
        *,
        restart_members: bool = True,
        coordinator: CoordinatorProcess | None = None,
        standby: bool = False,
    ) -> None:
        self._launcher = launcher
        self._restart_members = restart_members
        self._coordinator = coordinator
        #: Step 5: the warm standby (None: every member starts cold).
        self.standby: StandbyPool | None = StandbyPool(launcher, self._event) if standby else None
        self._exits = ExitWatch()
        self._members = {}
        self.events = []  # starts, exits, restarts, kills, removals: {t, kind, member, ...}
        self.failed = None
        self.failed_code = None
        self._next_index = 0
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ life cycle
    def start(self, members: int) -> None:
        """Start ``members`` members (the first reset waits for all of them), then the thread."""
        with self._lock:
            for _ in range(members):
                self._add(min_members=members, warm=False)
            if self.standby is not None:
                self.standby.start()
        self._thread = threading.Thread(target=self._supervise, name="region-supervisor", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread, SIGTERM every member, reap them (SIGKILL after STOP_TIMEOUT_S)."""
        self._stop.set()
        self._exits.wake()
        if self._thread is not None:
            self._thread.join(THREAD_JOIN_S)
            if self._thread.is_alive():  # a restart in progress; it sees _stop and ends after it
                log.warning(
                    "region supervisor thread still busy after %.0fs; stopping the members anyway", THREAD_JOIN_S
                )
        with self._lock:
            if self.standby is not None:
                self.standby.stop()
            for m in self._members.values():
                if m.proc is not None and m.proc.poll() is None:
                    m.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            for m in self._members.values():
                self._reap(m, deadline)
        if self._thread is None or not self._thread.is_alive():
            self._exits.close()

    # ------------------------------------------------------------------ fault handles (callers' threads)
    def add(self) -> str:
        with self._lock:
            return self._add()

    def remove(self, name: str | None = None) -> str:
        """Stop a member for good (SIGTERM: it leaves the region and the group); the
        last live one when ``name`` is None."""
        with self._lock:
            live = self.live()
            if not live:
                raise NotRunning("no member to remove")
            name = name or live[-1]
            if name not in live:
                raise NotRunning(f"{name} is not a live member (live: {', '.join(live)})")
            m = self._members[name]
            m.removed = True
            if m.proc is not None and m.proc.poll() is None:
                m.proc.send_signal(signal.SIGTERM)
            self._event("remove", name)
            self._reap(m, time.monotonic() + STOP_TIMEOUT_S)
            return name

    def kill(self, name: str, sig: int = signal.SIGKILL) -> int:
        """Send ``sig`` to a member's process (step 1 restarts it); returns its pid."""
        with self._lock:
            m = self._members.get(name)
            if m is None or m.removed or m.proc is None or m.proc.poll() is not None:
                raise NotRunning(f"{name} is not running")
            pid = m.proc.pid
            m.proc.send_signal(sig)
            self._event("kill", name, pid=pid, signal=int(sig))
            return pid

    def kill_coordinator(self) -> int | None:
        """SIGKILL the coordinator the runner started (step 4 restarts it)."""
        if self._coordinator is None:
            raise NotRunning("this region uses an external coordinator")
        with self._lock:
            pid = self._coordinator.pid
            self._coordinator.kill()
            self._event("kill", "coordinator", pid=pid)
            return pid

    # ------------------------------------------------------------------ views (any thread)
    def names(self) -> list[str]:
        """Every member name ever started, removed ones included."""
        with self._lock:
            return list(self._members)

    def live(self) -> list[str]:
        """Members not removed (running, or dead and waiting for their restart)."""
        with self._lock:
            return [n for n, m in self._members.items() if not m.removed]

    def pids(self) -> dict[str, int | None]:
        """Each member not removed -> the pid of its running process (None: dead now)."""
        with self._lock:
            return {
                n: (m.proc.pid if m.proc is not None and m.proc.poll() is None else None)
                for n, m in self._members.items()
                if not m.removed
            }

    def standby_pid(self) -> int | None:
        """The ready standby's pid; None: no standby, or none ready now."""
        with self._lock:
            if self.standby is None:
                return None
            self.standby.check(time.monotonic(), spawn=False)  # reads its status: "ready" may be waiting
            return self.standby.ready_pid

    def restarts(self) -> dict[str, int]:
        with self._lock:
            return {n: m.restarts for n, m in self._members.items()}

    def last_error(self, name: str) -> str | None:
        return last_error(self._launcher.log_path(name))

    # ------------------------------------------------------------------ supervisor thread
    def _add(self, min_members: int = 1, warm: bool = True) -> str:
        name = f"{self.NAME_PREFIX}{self._next_index}"
        self._next_index += 1
        m = MemberProc(name)
        self._members[name] = m
        self._launch(m, min_members, warm=warm)
        return name

    def _launch(self, m: MemberProc, min_members: int = 1, warm: bool = True) -> None:
        """Start ``m``: on the standby when one is ready (step 5), else cold. A
        hand-over that fails (``standby.py``'s failure list) is logged with why
        and the member started cold at once: never a member death, never final."""
        pool = self.standby if warm else None
        standby = pool.take() if pool is not None else None
        if pool is not None and standby is not None:
            try:
                self._launcher.hand_over(m, standby, min_members)
            except HandoffFailed as exc:
                log.warning(
                    "%s: the standby (pid %d) did not take over: %s; starting it cold", m.name, standby.pid, exc
                )
                self._event("handoff-failed", m.name, pid=standby.pid, reason=str(exc))
                pool.discard(standby, str(exc))
            else:
                pool.handed(standby)
                assert m.proc is not None
                self._event("start", m.name, pid=m.proc.pid, standby=True)
                return
        self._launcher.launch(m, min_members)
        assert m.proc is not None
        self._event("start", m.name, pid=m.proc.pid)

    def _event(self, kind: str, member: str, **info: Any) -> None:
        self.events.append({"t": time.time(), "kind": kind, "member": member, **info})
        if len(self.events) > MAX_EVENTS:
            del self.events[: len(self.events) - MAX_EVENTS]

    def _reap(self, m: MemberProc, deadline: float) -> None:
        if m.proc is not None:
            try:
                m.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop in time: SIGKILL", m.name)
                m.proc.kill()
                try:
                    m.proc.wait(KILL_WAIT_S)
                except subprocess.TimeoutExpired:  # stuck in the kernel (D state): the others are reaped first
                    log.error(
                        "%s (pid %d) did not end %.0fs after SIGKILL; left unreaped", m.name, m.proc.pid, KILL_WAIT_S
                    )
        if m.log_file is not None:
            m.log_file.close()
            m.log_file = None

    def _supervise(self) -> None:
        while not self._stop.is_set():
            try:
                self._exits.wait(self._watched(), SUPERVISE_S)
                if self._stop.is_set():
                    break
                self._check_members()
                self._check_coordinator()
                if self.standby is not None:
                    with self._lock:
                        self.standby.check(time.monotonic())
            except Exception:  # keep supervising; the next round retries
                log.exception("region supervisor: check failed")
                self._stop.wait(SUPERVISE_S)

    def _watched(self) -> list[int]:
        """The pids whose end wakes the supervisor: running members and the standby."""
        with self._lock:
            pids = [
                m.proc.pid
                for m in self._members.values()
                if m.proc is not None and not m.removed and m.proc.returncode is None
            ]
            if self.standby is not None and self.standby.pid is not None:
                pids.append(self.standby.pid)
            return pids

    def _check_members(self) -> None:
        now = time.monotonic()
        with self._lock:
            for m in self._members.values():
                if m.removed or m.proc is None:
                    continue
                code = m.proc.poll()
                if code is None:
                    continue
                if m.next_start == 0.0:  # first time we see it dead
                    self._on_death(m, code, now)
                    if m.removed:
                        continue
                if now >= m.next_start:
                    try:
                        self._launch(m)
                    except OSError as exc:  # cannot spawn (the python gone, no descriptors): retried, not re-counted
                        m.next_start = now + RESTART_MAX_S
                        log.error("%s: restart failed (%s); retrying in %.0fs", m.name, exc, RESTART_MAX_S)
                        continue
                    m.next_start = 0.0
                    m.restarts += 1
                    self._event("restart", m.name, pid=m.proc.pid)

    def _on_death(self, m: MemberProc, code: int, now: float) -> None:
        """Steps 1-3 for a member first seen dead with exit ``code``."""
        assert m.proc is not None
        m.exit_codes.append(code)
        self._event("exit", m.name, pid=m.proc.pid, code=code)
        reason = self.last_error(m.name)
        if code in FINAL:
            final = ExitCode(code)
            self.failed_code = final
            self.failed = (
                f"{m.name} exited with code {code} "
                f"({'region FAILED' if final is ExitCode.REGION_FAILED else 'bad settings'})"
                + (f": {reason}" if reason else "")
                + f"; see its log {self._launcher.log_path(m.name)}"
            )
            log.error("%s", self.failed)
            m.removed = True
            return
        if not self._restart_members:
            m.removed = True
            return
        m.schedule_restart(now)  # at once, unless it keeps dying (member_proc.py)
        log.warning(
            "%s (pid %d) exited with code %s; restarting in %.1fs%s",
            m.name,
            m.proc.pid,
            code,
            m.delay,
            f" (last error: {reason})" if reason else "",
        )

    def _check_coordinator(self) -> None:
        c = self._coordinator
        with self._lock:
            if c is None or self._stop.is_set() or c.running:
                return
            log.warning("coordinator exited (%s); restarting it on %s", c.returncode, c.endpoint)
            c.restart()
            self._event("restart", "coordinator", pid=c.pid)
