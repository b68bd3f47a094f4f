"""What the server loop runs besides requests, and when: timers, cross-thread
calls, the services' tick hooks and the periodic maintenance steps.

One :class:`LoopScheduler` belongs to one server loop (``coordinator.server.loop``):

1. ``schedule(delay_s, callback)`` (loop thread: a handler or a hook) puts a
   :class:`~coordinator.server.api.Timer` on a heap; ``timer.cancel()`` makes
   it a no-op.
2. ``call_soon(fn)`` (any thread) queues ``fn``; the caller then wakes the loop.
3. Each iteration the loop polls at most ``wait(longest_s, now)``: until the
   earliest timer, so timers run on time even when no request arrives.
4. After reading the requests: ``run_calls()`` (the calls queued before it, in order),
   ``run_timers()`` (every due timer not cancelled), ``run_ticks(now,
   services)`` (each service's ``on_tick``), and the loop's own
   :class:`Periodic` steps (retention expiry, housekeeping) when due.
5. Every step runs through :func:`guarded`: one that raises is logged with its
   traceback and the loop goes on; a tick hook or periodic step that raised
   waits for a doubling backoff (``MAINTENANCE_BACKOFF_S`` up to
   ``MAINTENANCE_BACKOFF_MAX_S``) before it runs again. A failed log
   (``LogFailed``: the durable log refuses every write after an I/O error) is
   re-raised: the server is fail-stop on disk failure.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
from collections.abc import Callable, Iterable

from coordinator.protocol.common.backoff import Backoff
from coordinator.server.api import Service, Timer
from coordinator.store.log.segment import LogFailed

log = logging.getLogger(__name__)

#: First retry delay of a failed maintenance step or tick hook, so a persistent
#: failure is retried without flooding the log; doubles up to the max.
MAINTENANCE_BACKOFF_S = 1.0
MAINTENANCE_BACKOFF_MAX_S = 300.0


def guarded(fn: Callable[..., object], *args: object, what: str) -> bool:
    """Run one timer/call/hook/maintenance step (step 5); an exception is logged
    with its traceback and the loop goes on. Returns False if it raised.
    ``LogFailed`` is re-raised: the server is fail-stop on disk failure."""
    try:
        fn(*args)
    except LogFailed:
        raise
    except Exception:
        log.exception("%s failed; the coordinator goes on", what)
        return False
    return True


class Periodic:
    """When a recurring loop step runs next: every `interval_s` while it succeeds,
    after a doubling backoff (MAINTENANCE_BACKOFF_S up to MAINTENANCE_BACKOFF_MAX_S)
    while it fails, so a persistent failure is retried without flooding the log."""

    def __init__(self, interval_s: float, first_at: float) -> None:
        self._interval_s = interval_s
        self._next_at = first_at
        self._backoff = Backoff(MAINTENANCE_BACKOFF_S, MAINTENANCE_BACKOFF_MAX_S)

    def due(self, now: float) -> bool:
        return now >= self._next_at

    def ran(self, now: float, ok: bool) -> None:
        if ok:
            self._next_at = now + self._interval_s
            self._backoff.succeeded()
        else:
            self._next_at = now + self._backoff.failed(now)


class LoopScheduler:
    """The timers, queued calls and tick schedules of one loop (see the module docstring).
    Every method but ``call_soon`` is the loop thread's."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._timers: list[tuple[float, int, Timer]] = []
        self._timer_seq = itertools.count()
        self._calls: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        # id(service) -> when its tick hook runs next, and its name in a failure's log line
        # (built once: the hooks run every iteration).
        self._ticks: dict[int, tuple[Periodic, str]] = {}

    def schedule(self, delay_s: float, callback: Callable[[], None]) -> Timer:
        """Step 1: run ``callback`` on the loop thread in ``delay_s`` (at the earliest)."""
        timer = Timer(self._clock() + max(0.0, delay_s), callback)
        heapq.heappush(self._timers, (timer.deadline, next(self._timer_seq), timer))
        return timer

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Step 2 (any thread): queue ``fn``; the caller wakes the loop."""
        self._calls.put(fn)

    def wait(self, longest_s: float, now: float) -> float:
        """Step 3: how long the next poll may block."""
        if self._timers:
            return min(longest_s, max(0.0, self._timers[0][0] - now))
        return longest_s

    def run_calls(self) -> None:
        """The calls queued before this one started (those queued meanwhile wait for
        the next iteration: a stream of calls cannot hold the loop here)."""
        for _ in range(self._calls.qsize()):
            try:
                fn = self._calls.get_nowait()
            except queue.Empty:  # qsize() is approximate; nothing else takes from the queue
                return
            guarded(fn, what="cross-thread call")

    def run_timers(self) -> None:
        now = self._clock()
        while self._timers and self._timers[0][0] <= now:
            _, _, timer = heapq.heappop(self._timers)
            if not timer.cancelled:
                guarded(timer.callback, what="timer")

    def run_ticks(self, now: float, services: Iterable[Service]) -> None:
        """Services' tick hooks; one that raises is logged and skipped for a
        backoff (doubling), so a persistent failure does not flood the log."""
        for svc in services:
            tick = svc.on_tick
            entry = self._ticks.get(id(svc))
            if entry is None:  # interval 0: the hook runs every iteration while it succeeds
                entry = self._ticks[id(svc)] = (Periodic(0.0, now), f"tick of {type(svc).__name__}")
            schedule, what = entry
            if schedule.due(now):
                schedule.ran(now, guarded(tick, now, what=what))
