"""CallGate (cr_consumer/kafka/librdkafka/bounded_call.py) without a broker: what a call
into librdkafka does while an abandoned call is still running on the caller
thread (steps 1-5 of the module docstring)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from cr_consumer.kafka.client import ClientTimeout
from cr_consumer.kafka.librdkafka.bounded_call import BoundedCaller, CallGate

#: Bound on events the tests wait for.
WAIT_S = 10.0
#: The gate's limit in these tests.
LIMIT_S = 1.0


@pytest.fixture
def caller() -> Iterator[BoundedCaller]:
    made = BoundedCaller("test-gate")
    yield made
    made.shutdown()


def _abandon(caller: BoundedCaller) -> threading.Event:
    """A commit that gets no answer in time; set the event to let it end."""
    release = threading.Event()
    with pytest.raises(ClientTimeout):
        caller.run(lambda: release.wait(WAIT_S), 0.2, "commit")
    return release


def test_nothing_abandoned_passes_at_once(caller):
    gate = CallGate(caller, LIMIT_S)
    start = time.monotonic()
    assert gate.wait("poll", 0.0)
    assert gate.wait("pause", None)
    gate.require("committed", 0.0)
    assert time.monotonic() - start < 0.5


def test_a_call_waits_for_the_abandoned_commit_to_end(caller):
    gate = CallGate(caller, WAIT_S)
    release = _abandon(caller)
    threading.Timer(0.2, release.set).start()
    assert gate.wait("pause", None)  # step 3: went on once the commit ended
    assert caller.abandoned_since() is None


def test_the_own_timeout_returns_false_and_a_lookup_fails(caller):
    gate = CallGate(caller, WAIT_S)
    release = _abandon(caller)
    try:
        assert gate.wait("poll", 0.1) is False  # step 4: a poll returns nothing
        with pytest.raises(ClientTimeout, match="committed: not started within 100 ms"):
            gate.require("committed", 0.1)
    finally:
        release.set()


def test_past_the_limit_every_call_fails(caller):
    gate = CallGate(caller, LIMIT_S)
    release = _abandon(caller)
    try:
        start = time.monotonic()
        with pytest.raises(ClientTimeout, match="pause: librdkafka is still inside a commit"):
            gate.wait("pause", None)  # step 5: bounded by the limit, not by the commit
        assert time.monotonic() - start < LIMIT_S + 0.5
        with pytest.raises(ClientTimeout, match="poll: librdkafka is still inside a commit"):
            gate.wait("poll", 0.1)
    finally:
        release.set()
