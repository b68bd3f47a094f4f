"""A member whose source waits for a reset that nobody asked for asks again,
boundedly (reset_watch.py; no I/O)."""

from __future__ import annotations

from cr_consumer.runtime.member.reset_watch import ResetPendingWatch, WatchAction


def test_pending_source_asks_again_then_gives_up():
    w = ResetPendingWatch(interval_s=2.0, max_requests=2)
    assert w.check(False, True, 0.0) is WatchAction.NONE
    w.requested(1.0)  # the source's own request (then lost)
    assert w.check(True, True, 2.5) is WatchAction.NONE
    assert w.check(True, True, 3.1) is WatchAction.REQUEST
    assert w.check(True, True, 4.0) is WatchAction.NONE
    assert w.check(True, False, 9.0) is WatchAction.NONE  # the region is not RUNNING: it resets us anyway
    assert w.check(True, True, 9.1) is WatchAction.REQUEST
    assert w.check(True, True, 11.2) is WatchAction.GIVE_UP


def test_completed_reset_or_leaving_pending_starts_over():
    w = ResetPendingWatch(interval_s=2.0, max_requests=1)
    assert w.check(True, True, 0.0) is WatchAction.NONE  # first seen pending: the source's request gets its time
    assert w.check(True, True, 2.0) is WatchAction.REQUEST
    w.reset_done(2.5)
    assert w.check(True, True, 4.0) is WatchAction.NONE
    assert w.check(True, True, 4.6) is WatchAction.REQUEST  # the count started again
    assert w.check(False, True, 5.0) is WatchAction.NONE
    assert w.check(True, True, 7.0) is WatchAction.REQUEST
