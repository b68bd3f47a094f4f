"""wait_until: the first true result, at once or after polling; a timeout that names what it waited
for and the last result; the predicate's own exception at once; bad arguments refused."""

from __future__ import annotations

import threading
import time

import pytest

from coordinator.protocol.common.waiting import WaitTimeout, wait_until


def test_returns_the_first_true_result():
    results = iter([None, 0, [], "ready", "later"])
    assert wait_until(lambda: next(results), 5, "ready", interval=0.001) == "ready"


def test_a_condition_another_thread_makes_true():
    flag = threading.Event()
    threading.Timer(0.1, flag.set).start()
    start = time.monotonic()
    assert wait_until(flag.is_set, 5, "the flag") is True
    assert time.monotonic() - start < 2


def test_timeout_names_what_and_the_last_result():
    start = time.monotonic()
    with pytest.raises(WaitTimeout, match=r"after 0.2s waiting for the impossible; last \[\]") as info:
        wait_until(lambda: [], 0.2, "the impossible", interval=0.02)
    assert 0.2 <= time.monotonic() - start < 2
    assert isinstance(info.value, TimeoutError)


def test_the_predicates_exception_propagates_at_once():
    calls = []

    def broken() -> bool:
        calls.append(1)
        raise KeyError("gone")

    with pytest.raises(KeyError):
        wait_until(broken, 5, "never")
    assert calls == [1]


@pytest.mark.parametrize(
    ("timeout", "interval"),
    [(-1, 0.1), (1, 0), (1, -0.5), (float("inf"), 0.1), (float("nan"), 0.1), (1, float("nan")), (1, float("inf"))],
)
def test_bad_arguments_are_refused(timeout, interval):
    with pytest.raises(ValueError, match=r"must be finite and >= 0, interval .* finite and > 0"):
        wait_until(lambda: True, timeout, "x", interval=interval)


def test_a_stop_event_cuts_the_pause_short():
    """``pause``: a stop event's wait ends the pause at once; the predicate then sees the stop."""
    stop = threading.Event()
    threading.Timer(0.1, stop.set).start()
    start = time.monotonic()

    def pause(seconds: float) -> None:
        stop.wait(seconds)

    assert (
        wait_until(lambda: "stopping" if stop.is_set() else None, 30, "the stop", interval=10, pause=pause)
        == "stopping"
    )
    assert time.monotonic() - start < 5
