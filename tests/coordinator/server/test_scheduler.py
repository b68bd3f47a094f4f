"""What the server loop runs besides requests (coordinator/server/scheduler.py), without a socket."""

from __future__ import annotations

import pytest

from coordinator.server.scheduler import MAINTENANCE_BACKOFF_MAX_S, LoopScheduler, Periodic, guarded
from coordinator.store.log.segment import LogFailed


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_timers_run_when_due_in_deadline_order_and_cancelled_ones_never():
    clock, ran = Clock(), []
    sched = LoopScheduler(clock)
    sched.schedule(2.0, lambda: ran.append("late"))
    sched.schedule(1.0, lambda: ran.append("early"))
    sched.schedule(1.5, lambda: ran.append("cancelled")).cancel()
    assert sched.wait(0.1, clock.now) == 0.1
    assert sched.wait(5.0, clock.now) == 1.0
    sched.run_timers()
    assert ran == []
    clock.now += 2.0
    sched.run_timers()
    assert ran == ["early", "late"]
    assert sched.wait(0.1, clock.now) == 0.1


def test_a_call_that_raises_is_logged_and_the_next_ones_run(caplog):
    sched, ran = LoopScheduler(Clock()), []
    sched.call_soon(lambda: 1 / 0)
    sched.call_soon(lambda: ran.append("after"))
    sched.run_calls()
    assert ran == ["after"]
    assert "cross-thread call failed" in caplog.text


def test_a_failed_log_stops_the_loop():
    def fail() -> None:
        raise LogFailed("fsync failed")

    with pytest.raises(LogFailed):
        guarded(fail, what="timer")


def test_periodic_backs_off_doubling_while_it_fails_and_resumes_its_interval():
    step = Periodic(60.0, first_at=0.0)
    now, gaps = 0.0, []
    for _ in range(12):
        assert step.due(now)
        step.ran(now, ok=False)
        nxt = now
        while not step.due(nxt):
            nxt += 1.0
        gaps.append(nxt - now)
        now = nxt
    assert gaps[:4] == [1.0, 2.0, 4.0, 8.0]
    assert gaps[-1] == MAINTENANCE_BACKOFF_MAX_S
    step.ran(now, ok=True)
    assert not step.due(now + 59.0)
    assert step.due(now + 60.0)


def test_a_tick_hook_that_raises_waits_for_its_backoff():
    class Flaky:
        calls = 0

        def on_tick(self, now: float) -> None:
            self.calls += 1
            raise RuntimeError("broken")

    sched, svc = LoopScheduler(Clock()), Flaky()
    sched.run_ticks(0.0, [svc])
    sched.run_ticks(0.5, [svc])
    assert svc.calls == 1
    sched.run_ticks(1.0, [svc])
    assert svc.calls == 2


def test_run_calls_runs_only_the_calls_queued_before_it_started():
    """A call that queues another (or another thread queueing without pause)
    cannot keep the loop in run_calls: the new one waits for the next iteration."""
    sched, ran = LoopScheduler(Clock()), []

    def again() -> None:
        ran.append("again")
        sched.call_soon(again)

    sched.call_soon(again)
    sched.call_soon(lambda: ran.append("second"))
    sched.run_calls()
    assert ran == ["again", "second"]
    sched.run_calls()
    assert ran == ["again", "second", "again"]
