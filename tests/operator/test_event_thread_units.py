"""EventThread without a broker: a scripted consumer and injected callables.

The fake client implements only the part of the KafkaClient interface the event
thread calls (poll, group, assignment, paused, pause, resume, close); the tests assert
what reached ``on_records``, which partitions were paused or resumed, how the
poll was paced, and how failures reach the callers.
"""

from __future__ import annotations

import threading
from collections import deque

import pytest

from coordinator.protocol.common.waiting import wait_until
from cr_consumer.kafka.client import GroupMembership, TopicPartition
from cr_consumer.operator import event_thread as et
from cr_consumer.operator.event_thread import EventThread, OperatorFailed

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
WAIT_S = 5.0
POLL_S = 0.005  # polling a condition another thread makes true


class FakeConsumer:
    """Polls return the scripted results in order, then nothing (after waiting
    the poll's timeout, as a real poll does)."""

    def __init__(self, assigned=(T0, T1), pause_drops_fetched: bool = False) -> None:
        self.pause_drops_fetched = pause_drops_fetched
        self.results: deque = deque()
        self.polls: list[tuple[int, int]] = []  # (timeout_ms, max_records)
        self.assigned = set(assigned)
        self.paused_set: set[TopicPartition] = set()
        self.closed_with: dict | None = None
        self.poll_error: BaseException | None = None
        self._idle = threading.Event()

    def poll(self, timeout_ms: int, max_records: int) -> dict:
        self.polls.append((timeout_ms, max_records))
        if self.poll_error is not None:
            raise self.poll_error
        if self.results:
            return self.results.popleft()
        self._idle.wait(timeout_ms / 1000)
        return {}

    def group(self) -> GroupMembership:
        return GroupMembership(member_id="m", generation=len(self.polls), rebalancing=False)

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def paused(self) -> set[TopicPartition]:
        return set(self.paused_set)

    def pause(self, tps) -> None:
        self.paused_set.update(tps)

    def resume(self, tps) -> None:
        self.paused_set.difference_update(tps)

    def close(self, timeout_ms: int) -> None:
        self.closed_with = {"timeout_ms": timeout_ms}


class Harness:
    """An EventThread with every callable injected; the flags drive its loop."""

    def __init__(self, consumer: FakeConsumer | None = None, factory=None, max_poll_records: int = 500) -> None:
        self.consumer = consumer if consumer is not None else FakeConsumer()
        self.records: list[dict] = []
        self.after_polls = 0
        self.pause = False
        self.may_resume = True
        self.blocked = False
        self.joining = False
        self.held: set[TopicPartition] = set()
        self.failures: list[BaseException] = []
        self.events = EventThread(
            "unit",
            factory or (lambda: self.consumer),
            on_records=lambda consumer, records: self.records.append(records),
            after_poll=self._after_poll,
            should_pause=lambda: self.pause,
            blocked=lambda: self.blocked,
            held=lambda: self.held,
            joining=lambda: self.joining,
            on_failure=self.failures.append,
            max_poll_records=max_poll_records,
            may_resume=lambda: self.may_resume,
        )

    def _after_poll(self, consumer) -> None:
        self.after_polls += 1


@pytest.fixture
def harness():
    h = Harness()
    h.events.start(WAIT_S)
    yield h
    h.events.stop(WAIT_S)


def test_polled_records_reach_on_records_in_order(harness):
    batches = [{T0: ["a", "b"]}, {T1: ["c"]}, {T0: ["d"]}]
    harness.consumer.results.extend(batches)
    harness.events.set_polling(True, WAIT_S)
    wait_until(lambda: len(harness.records) == 3, WAIT_S, "three polls handed over", interval=POLL_S)
    assert harness.records == batches
    assert harness.after_polls >= 3
    assert harness.events.group is not None  # the group snapshot is taken after each poll


def test_call_runs_on_the_event_thread_with_the_consumer_and_returns_its_result(harness):
    seen = harness.events.call(lambda consumer: (consumer, threading.current_thread().name), WAIT_S, "probe")
    assert seen == (harness.consumer, "cr-event-unit")


def test_an_event_that_raises_fails_only_its_caller(harness):
    def boom(_consumer):
        raise ValueError("bad event")

    with pytest.raises(ValueError, match="bad event"):
        harness.events.call(boom, WAIT_S, "boom")
    assert harness.events.call(lambda c: 42, WAIT_S, "after") == 42
    assert harness.events.failure is None
    assert harness.failures == []


def test_stop_polling_returns_after_the_loop_saw_it(harness):
    harness.events.set_polling(True, WAIT_S)
    wait_until(lambda: len(harness.consumer.polls) >= 2, WAIT_S, "polling", interval=POLL_S)
    harness.events.set_polling(False, WAIT_S)
    n = len(harness.consumer.polls)
    harness.events.call(lambda c: None, WAIT_S, "a round trip after the stop")
    assert len(harness.consumer.polls) == n


def test_poll_pacing_follows_joining_blocked_and_idle(harness):
    ev = harness.events
    harness.joining = True
    ev.set_polling(True, WAIT_S)
    wait_until(
        lambda: et.JOIN_POLL_TIMEOUT_MS in (p[0] for p in harness.consumer.polls), WAIT_S, "join poll", interval=POLL_S
    )
    ev.set_polling(False, WAIT_S)
    assert set(harness.consumer.polls) == {(et.JOIN_POLL_TIMEOUT_MS, 500)}

    harness.consumer.polls.clear()
    harness.joining, harness.blocked = False, True
    ev.set_polling(True, WAIT_S)
    wait_until(lambda: len(harness.consumer.polls) >= 2, WAIT_S, "blocked polls", interval=POLL_S)
    ev.set_polling(False, WAIT_S)
    assert set(harness.consumer.polls) == {(et.BLOCKED_POLL_TIMEOUT_MS, et.BLOCKED_MAX_RECORDS)}

    harness.consumer.polls.clear()
    harness.blocked = False
    ev.set_polling(True, WAIT_S)
    wait_until(lambda: len(harness.consumer.polls) >= 2, WAIT_S, "idle polls", interval=POLL_S)
    ev.set_polling(False, WAIT_S)
    # no poll has returned records yet: the topic looks idle
    assert set(harness.consumer.polls) == {(et.IDLE_POLL_TIMEOUT_MS, 500)}


def test_records_make_the_poll_short_while_they_flow(harness):
    harness.consumer.results.append({T0: ["a"]})
    harness.events.set_polling(True, WAIT_S)
    wait_until(lambda: len(harness.consumer.polls) >= 3, WAIT_S, "polls after records", interval=POLL_S)
    harness.events.set_polling(False, WAIT_S)
    assert harness.consumer.polls[0] == (et.IDLE_POLL_TIMEOUT_MS, 500)
    assert harness.consumer.polls[1] == (et.POLL_TIMEOUT_MS, 500)


def test_backpressure_pauses_every_assigned_partition_and_resumes_all_but_the_held(harness):
    harness.pause = True
    harness.held = {T1}
    harness.events.set_polling(True, WAIT_S)
    wait_until(lambda: harness.consumer.paused_set == {T0, T1}, WAIT_S, "both paused", interval=POLL_S)
    assert harness.events.paused
    harness.consumer.paused_set.discard(T0)  # pause() is idempotent: a partition found unpaused is paused again
    wait_until(lambda: harness.consumer.paused_set == {T0, T1}, WAIT_S, "paused again", interval=POLL_S)
    assert harness.events.n_queue_full_pause == 1  # one episode, however many polls it lasts
    harness.pause = False
    wait_until(lambda: not harness.events.paused, WAIT_S, "room again", interval=POLL_S)
    assert harness.consumer.paused_set == {T1}  # the held partition waits for its seek


def test_backpressure_resumes_only_at_the_low_mark(harness):
    harness.pause = True
    harness.events.set_polling(True, WAIT_S)
    wait_until(lambda: harness.events.paused, WAIT_S, "queue-full pause", interval=POLL_S)
    harness.may_resume = False  # room for a poll, but not yet down to the low mark
    harness.pause = False
    n = len(harness.consumer.polls)
    wait_until(lambda: len(harness.consumer.polls) >= n + 3, WAIT_S, "polls while above the low mark", interval=POLL_S)
    assert harness.events.paused
    assert harness.consumer.paused_set == {T0, T1}
    harness.may_resume = True
    wait_until(lambda: not harness.events.paused, WAIT_S, "resumed at the low mark", interval=POLL_S)
    assert harness.consumer.paused_set == set()


def test_a_full_queue_stops_polling_without_a_pause_when_pause_drops_fetched_records(monkeypatch):
    """librdkafka purges a paused partition's fetched-ahead records: the event
    thread waits the full queue out without polling (events still served), and
    pauses only once it stayed full for HOLD_MAX_S."""
    monkeypatch.setattr(et, "HOLD_MAX_S", 1.0)
    h = Harness(FakeConsumer(pause_drops_fetched=True))
    h.events.start(WAIT_S)
    try:
        h.events.set_polling(True, WAIT_S)
        wait_until(lambda: len(h.consumer.polls) >= 1, WAIT_S, "polling", interval=POLL_S)
        h.pause = True
        h.events.call(lambda c: None, WAIT_S, "a turn of the loop with the queue full")
        n = len(h.consumer.polls)
        assert h.events.call(lambda c: "served", WAIT_S, "an event while holding") == "served"
        assert len(h.consumer.polls) == n
        assert h.consumer.paused_set == set()
        assert not h.events.paused
        # room again before HOLD_MAX_S: polling goes on, nothing was ever paused
        h.pause = False
        wait_until(lambda: len(h.consumer.polls) >= n + 2, WAIT_S, "polling again", interval=POLL_S)
        assert h.events.n_queue_full_pause == 0
        assert h.events.n_queue_full_hold == 1
        # full for longer than HOLD_MAX_S (the process thread stalled): paused, and polls go on
        h.pause = True
        wait_until(lambda: h.events.paused, WAIT_S, "paused after the hold", interval=POLL_S)
        assert h.consumer.paused_set == {T0, T1}
        assert h.events.n_queue_full_pause == 1
        n = len(h.consumer.polls)
        wait_until(lambda: len(h.consumer.polls) >= n + 2, WAIT_S, "polls while paused", interval=POLL_S)
        h.pause = False
        wait_until(lambda: not h.events.paused, WAIT_S, "resumed", interval=POLL_S)
        assert h.consumer.paused_set == set()
        assert h.events.n_queue_full_hold == 2
    finally:
        h.events.stop(WAIT_S)


def test_resume_partitions_leaves_them_to_the_backpressure_while_the_queue_is_full(harness):
    harness.pause = True
    harness.events.set_polling(True, WAIT_S)
    wait_until(lambda: harness.events.paused, WAIT_S, "queue-full pause", interval=POLL_S)
    harness.events.call(lambda c: harness.events.resume_partitions(c, {T0}), WAIT_S, "resume")
    assert T0 in harness.consumer.paused_set


def test_a_poll_failure_is_kept_reported_and_raised_to_later_callers():
    h = Harness()
    h.consumer.poll_error = RuntimeError("broker exploded")
    h.events.start(WAIT_S)
    try:
        h.events.set_polling(True, WAIT_S)
        wait_until(lambda: h.failures, WAIT_S, "on_failure called", interval=POLL_S)
        assert h.failures == [h.consumer.poll_error]
        assert h.events.failure is h.consumer.poll_error
        wait_until(lambda: h.consumer.closed_with is not None, WAIT_S, "consumer closed", interval=POLL_S)
        assert h.consumer.closed_with == {"timeout_ms": et.CLOSE_TIMEOUT_MS}  # the client closes without a commit
        with pytest.raises(OperatorFailed) as info:
            h.events.call(lambda c: None, WAIT_S, "later")
        assert info.value.__cause__ is h.consumer.poll_error
    finally:
        h.events.stop(WAIT_S)


def test_a_consumer_that_cannot_be_created_fails_start():
    def factory():
        raise ValueError("no bootstrap")

    h = Harness(factory=factory)
    with pytest.raises(ValueError, match="no bootstrap"):
        h.events.start(WAIT_S)
    assert isinstance(h.events.failure, ValueError)
    fut = h.events.submit(lambda c: None, "after")
    assert isinstance(fut.exception(0), OperatorFailed)


def test_stop_closes_the_consumer_without_committing_and_fails_queued_events():
    h = Harness()
    h.events.start(WAIT_S)
    gate = threading.Event()
    first = h.events.submit(lambda c: gate.wait(WAIT_S), "slow")
    h.events.stop(0.0)  # asks the loop to end; the slow event is still running
    second = h.events.submit(lambda c: "never", "queued behind the stop")
    gate.set()
    assert first.result(WAIT_S) is True
    with pytest.raises(OperatorFailed, match="closed before"):
        second.result(WAIT_S)
    wait_until(lambda: h.consumer.closed_with is not None, WAIT_S, "consumer closed", interval=POLL_S)
    assert h.consumer.closed_with == {"timeout_ms": et.CLOSE_TIMEOUT_MS}
    assert h.events.consumer is None


def test_request_rejoin_is_false_before_the_consumer_exists():
    h = Harness()
    assert h.events.request_rejoin() is False
