"""BoundedCaller (cr_consumer/kafka/librdkafka/bounded_call.py): a call without a timeout of
its own, run on the caller's thread and waited for at most a timeout."""

from __future__ import annotations

import threading

import pytest

from cr_consumer.kafka.client import ClientTimeout
from cr_consumer.kafka.librdkafka.bounded_call import IDLE_SLICE_S, BoundedCaller

#: Bound on events the tests wait for (the calls themselves are instant).
WAIT_S = 10.0


@pytest.fixture
def caller():
    made = BoundedCaller("test-bounded-call")
    yield made
    made.shutdown()


def test_the_result_and_the_exception_reach_the_caller(caller):
    assert caller.run(lambda: threading.current_thread().name, WAIT_S, "name") == "test-bounded-call"

    def fail() -> None:
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        caller.run(fail, WAIT_S, "fail")
    assert caller.run(lambda: 7, WAIT_S, "after a failure") == 7


def test_a_call_past_its_timeout_raises_and_finishes_on_the_thread(caller):
    release, finished = threading.Event(), threading.Event()

    def slow() -> str:
        release.wait(WAIT_S)
        finished.set()
        return "late"

    # 0.5 s: time enough for the thread to take the call even on a loaded machine
    with pytest.raises(ClientTimeout, match=r"commit: no answer within 500 ms \(outcome unknown\)"):
        caller.run(slow, 0.5, "commit")
    assert not finished.is_set()
    release.set()
    assert finished.wait(WAIT_S)
    assert caller.run(lambda: "next", WAIT_S, "next") == "next"


def test_a_call_that_cannot_start_in_time_never_runs(caller):
    """A commit queued behind a stuck one and given up must not land later
    (it would commit offsets its caller has already reported as failed)."""
    release, started = threading.Event(), threading.Event()
    ran: list[str] = []

    def stuck() -> None:
        started.set()
        release.wait(WAIT_S)

    first = threading.Thread(target=caller.run, args=(stuck, WAIT_S, "first commit"), daemon=True)
    first.start()
    assert started.wait(WAIT_S)
    with pytest.raises(ClientTimeout, match="second commit: not started within 50 ms: first commit is still running"):
        caller.run(lambda: ran.append("second"), 0.05, "second commit")
    release.set()
    first.join(WAIT_S)
    assert caller.run(lambda: ran.append("third") or "third", WAIT_S, "third commit") == "third"
    assert ran == ["third"]


def test_shutdown_ends_the_thread_and_later_calls_fail(caller):
    assert caller.shutdown(join_s=IDLE_SLICE_S + WAIT_S)
    with pytest.raises(ClientTimeout, match="shut down"):
        caller.run(lambda: None, WAIT_S, "after shutdown")


def test_an_abandoned_call_is_reported_until_it_ends(caller):
    release = threading.Event()
    assert caller.abandoned_since() is None
    assert caller.wait_free(0.0)
    with pytest.raises(ClientTimeout):
        caller.run(lambda: release.wait(WAIT_S), 0.5, "commit")
    abandoned = caller.abandoned_since()
    assert abandoned is not None
    assert abandoned[0] == "commit"
    assert not caller.wait_free(0.05)
    release.set()
    assert caller.wait_free(WAIT_S)
    assert caller.abandoned_since() is None


def test_a_call_waited_for_is_not_abandoned(caller):
    """Only a call whose caller gave up is abandoned: one still waited for is
    the polling thread's own call in progress."""
    release, started = threading.Event(), threading.Event()

    def slow() -> None:
        started.set()
        release.wait(WAIT_S)

    first = threading.Thread(target=caller.run, args=(slow, WAIT_S, "close"), daemon=True)
    first.start()
    assert started.wait(WAIT_S)
    assert caller.abandoned_since() is None
    release.set()
    first.join(WAIT_S)
