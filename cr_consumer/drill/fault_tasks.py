"""The background side of drill faults that play out over time.

A pause (SIGSTOP now, SIGCONT later) or a fault point armed in the member
runtime (it fires when a member reaches that protocol step) cannot act within
the drill's fault call. :class:`FaultTasks` runs each such task on a thread
it owns:

1. the fault function (``faults.py``) arms what it needs and starts a task;
2. the task waits (for its trigger to be claimed, ``wait_fired``, or for the
   pause to end), records ``fault_fired`` / ``fault_pause`` /
   ``fault_continue`` events on the drill's timeline, and marks itself fired;
3. the drill does not finish before ``done()``; ``all_fired()`` goes into the
   report's ``fault_fired``; a task that raised is the drill's error;
4. ``close()`` (the drill's clean-up, before it stops anything) ends every
   wait and sends SIGCONT to every process still stopped, so no stopped
   process outlives the drill.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

from coordinator.protocol.common.waiting import WaitTimeout, wait_until
from cr_consumer.drill.timeline import TimelineWriter
from cr_consumer.runtime import fault_points
from cr_consumer.runtime.fault_points import Point

log = logging.getLogger(__name__)

#: Bound on waiting for an armed point to fire (the member must reach that
#: protocol step: a checkpoint period or a reset away), so a trigger that
#: never fires fails the drill instead of hanging it.
FIRE_TIMEOUT_S = 60.0
#: Bound on the tasks' end when the drill stops them.
TASK_JOIN_S = 10.0
#: How often a task looks for a claimed trigger or at the controller's status.
TASK_POLL_S = 0.1
#: Bound on one request of a task for the controller's status.
STATUS_TIMEOUT_S = 1.0


class FaultTasks:
    """The background side of faults that play out over time.

    Each task runs on its own thread (owned here): it waits for its trigger
    or its pause, records ``fault_fired`` on the timeline, and marks itself
    fired. Every wait ends at ``close()``. Processes a task stopped (SIGSTOP,
    or a member that stopped itself at a point) are recorded and continued by
    the task, or by ``close()`` at the latest, so no stopped process outlives
    the drill.

    Shared thread state, under ``_lock``: ``started`` (the drill's thread),
    ``fired`` and ``errors`` (the task threads), ``_threads``, ``_stopped``
    (both); read by the drill's thread through :meth:`done`.
    """

    started: int
    fired: int
    errors: list[str]

    def __init__(self, timeline: TimelineWriter) -> None:
        self.timeline = timeline
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stopped: set[int] = set()
        self._stop = threading.Event()
        self.errors: list[str] = []
        self.started = 0
        self.fired = 0

    def start(self, name: str, fn: Callable[[], None]) -> None:
        t = threading.Thread(target=self._run, args=(name, fn), name=f"fault-{name}", daemon=True)
        with self._lock:
            self._threads.append(t)
            self.started += 1
        t.start()

    def _run(self, name: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as exc:  # reported as the drill's error
            log.exception("fault task %s failed", name)
            with self._lock:
                self.errors.append(f"{name}: {type(exc).__name__}: {exc}")
            return
        with self._lock:
            self.fired += 1

    def done(self) -> bool:
        with self._lock:
            return all(not t.is_alive() for t in self._threads)

    def all_fired(self) -> bool | None:
        """None without tasks; else whether every task fired and ended cleanly."""
        with self._lock:
            return None if not self.started else (self.fired == self.started and not self.errors)

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True when the drill is stopping the tasks."""
        return self._stop.wait(seconds)

    def stopping(self) -> bool:
        return self._stop.is_set()

    def stop_process(self, pid: int, what: str) -> None:
        self.stopped(pid)
        os.kill(pid, signal.SIGSTOP)
        self.timeline.event("fault_pause", target=what, pid=pid)

    def stopped(self, pid: int) -> None:
        """Record a process that stopped itself (a ``pause`` fault point)."""
        with self._lock:
            self._stopped.add(pid)

    def continue_process(self, pid: int, what: str) -> None:
        with self._lock:
            self._stopped.discard(pid)
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            log.warning("fault task: %s (pid %d) is gone; nothing to continue", what, pid)
            return
        self.timeline.event("fault_continue", target=what, pid=pid)

    def pause(self, pid: int, seconds: float, what: str) -> None:
        """SIGSTOP ``pid`` now, SIGCONT it after ``seconds`` (or at ``close()``)."""
        self.stop_process(pid, what)
        self.wait(seconds)
        self.continue_process(pid, what)

    def wait_fired(self, fault_dir: Path, point: Point, member: str) -> fault_points.Fired:
        """Wait until ``member`` claimed the trigger of ``point``; raises TimeoutError
        after FIRE_TIMEOUT_S, InterruptedError when the drill stops the tasks."""

        def claimed() -> fault_points.Fired | None:
            for f in fault_points.fired(fault_dir, point):
                if f.member == member:
                    return f
            if self.stopping():
                raise InterruptedError(f"the drill ended before fault point {point.value} fired for {member}")
            return None

        try:
            return wait_until(claimed, FIRE_TIMEOUT_S, f"fault point {point.value} to fire", interval=TASK_POLL_S)
        except WaitTimeout:
            raise TimeoutError(
                f"fault point {point.value} armed for {member} did not fire within {FIRE_TIMEOUT_S:.0f}s"
            ) from None

    def close(self) -> None:
        """Stop every task, continue every process still stopped."""
        self._stop.set()
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            t.join(TASK_JOIN_S)
            if t.is_alive():
                log.error("fault task %s did not end within %.0fs", t.name, TASK_JOIN_S)
        with self._lock:
            pids, self._stopped = sorted(self._stopped), set()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                continue
