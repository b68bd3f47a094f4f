"""The runner's restart backoff: a first death restarts at once, a member that keeps dying backs off."""

from __future__ import annotations

from coordinator.protocol.common.backoff import Backoff
from cr_consumer.runtime.runner.member_proc import RESTART_FIRST_S, RESTART_MAX_S, RESTART_WINDOW_S, MemberProc


def test_first_death_restarts_at_once():
    m = MemberProc("member-0", last_start=100.0)
    assert m.schedule_restart(130.0) == 0.0
    assert m.next_start == 130.0


def test_quick_deaths_double_the_delay_up_to_the_cap():
    m = MemberProc("member-0")
    delays = []
    now = 1000.0
    for _ in range(8):
        m.restarts += 1
        m.last_start = now
        now += 1.0  # dies a second after each restart
        delays.append(m.schedule_restart(now))
        now = m.next_start
    assert delays[:5] == [0.2, 0.4, 0.8, 1.6, 3.2]
    assert delays[5:] == [RESTART_MAX_S] * 3


def test_a_death_after_the_window_resets_the_backoff():
    m = MemberProc(
        "member-0", restarts=3, delay=3.2, last_start=50.0, backoff=Backoff(RESTART_FIRST_S, RESTART_MAX_S, failures=5)
    )
    now = 50.0 + RESTART_WINDOW_S + 1
    assert m.schedule_restart(now) == 0.0
    assert m.backoff.failures == 0
    m.restarts, m.last_start = 4, now
    assert m.schedule_restart(now + 1.0) == RESTART_FIRST_S  # the next quick death starts over
