"""The librdkafka adapter after a commit that got no answer in time: while
that commit is still inside librdkafka, every other call on the consumer would
block behind it (cr_consumer/kafka/librdkafka/bounded_call.py). The polling thread
must stay bounded: a poll returns nothing, a lookup fails at its timeout, and
past the gate's limit every call fails; when the commit leaves in time, the
consumer goes on and hands out every record once.

The broker stops answering for real: each test runs its own embedded broker
and stops its process (SIGSTOP, a pause, not a kill); it is continued before
anything is closed.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
from kafka_clients.test_client_contract import CLOSE_MS, JOIN_S, Recorder, props

from cr_consumer.kafka.client import ClientKind, ClientTimeout, KafkaClient, TopicPartition
from cr_consumer.kafka.factory import make_client
from cr_consumer.kafka.librdkafka import bounded_call as librdkafka_gate
from cr_consumer.testing.broker import EmbeddedBroker
from cr_consumer.testing.kafka_util import create_topic, produce

from support.own_broker import own_broker

#: The drain's commit bound in these tests.
COMMIT_MS = 500
#: The gate's limit in the test of what happens past it (the adapter's is 30 s).
LIMIT_S = 3.0
#: Slack for a call that must return at its bound on a loaded machine.
SLACK_S = 2.0
RECORDS = 200
T = TypeVar("T")


@pytest.fixture
def broker(tmp_path) -> Iterator[EmbeddedBroker]:
    with own_broker(tmp_path) as own:
        yield own


def _consume(client: KafkaClient, want: int, got: dict[int, list[int]], deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while sum(map(len, got.values())) < want:
        assert time.monotonic() < end, f"only {sum(map(len, got.values()))} of {want} records"
        for tp, records in client.poll(100, 500).items():
            got.setdefault(tp.partition, []).extend(r.offset for r in records)


def _stopped_with_an_abandoned_commit(
    broker: EmbeddedBroker, names, monkeypatch, limit_s: float | None = None
) -> tuple[KafkaClient, str]:
    """A consumer whose commit was abandoned while the broker is stopped; ``limit_s``: the gate's
    limit instead of the adapter's."""
    if limit_s is not None:
        monkeypatch.setattr(librdkafka_gate, "ABANDONED_CALL_LIMIT_S", limit_s)
    topic = create_topic(broker.bootstrap, names.topic(), partitions=2)
    produce(broker.bootstrap, topic, [b"a%03d" % i for i in range(RECORDS)])
    client = make_client(ClientKind.LIBRDKAFKA, props(broker.bootstrap, names.group()))
    client.subscribe([topic], listener=Recorder())
    got: dict[int, list[int]] = {}
    _consume(client, RECORDS, got, JOIN_S)
    assert broker.pid is not None
    os.kill(broker.pid, signal.SIGSTOP)
    with pytest.raises(ClientTimeout, match="commit: no answer within 500 ms"):
        client.commit({TopicPartition(topic, 0): len(got[0])}, COMMIT_MS)
    return client, topic


def _returns_within(bound_s: float, call: Callable[[], T]) -> T:
    """``call()``'s result or exception, on a thread of its own so that a call
    that blocks fails the test at its bound instead of hanging it."""
    outcome: list[tuple[T | None, BaseException | None]] = []

    def run() -> None:
        try:
            outcome.append((call(), None))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            outcome.append((None, exc))

    start = time.monotonic()
    thread = threading.Thread(target=run, name="bounded-call-under-test", daemon=True)
    thread.start()
    thread.join(bound_s)
    assert not thread.is_alive(), f"the call still blocks after {bound_s:.2f}s"
    took = time.monotonic() - start
    assert took < bound_s, f"the call took {took:.2f}s (bound {bound_s:.2f}s)"
    result, error = outcome[0]
    if error is not None:
        raise error
    return result  # type: ignore[return-value]  # the call returned without an error


def test_calls_stay_bounded_and_fail_past_the_limit(broker, names, monkeypatch):
    client, topic = _stopped_with_an_abandoned_commit(broker, names, monkeypatch, LIMIT_S)
    tp0 = TopicPartition(topic, 0)
    try:
        # without the gate each of these blocked for as long as the broker was stopped
        assert _returns_within(0.1 + SLACK_S, lambda: client.poll(100, 500)) == {}
        assert _returns_within(SLACK_S, lambda: client.highwater(tp0)) is None
        with pytest.raises(ClientTimeout, match="committed: not started within 300 ms"):
            _returns_within(0.3 + SLACK_S, lambda: client.committed([tp0], 300))
        with pytest.raises(ClientTimeout, match="pause: librdkafka is still inside a commit"):
            _returns_within(LIMIT_S + SLACK_S, lambda: client.pause([tp0]))
        with pytest.raises(ClientTimeout, match="poll: librdkafka is still inside a commit"):
            _returns_within(SLACK_S, lambda: client.poll(100, 500))
    finally:
        assert broker.pid is not None
        os.kill(broker.pid, signal.SIGCONT)
        client.close(CLOSE_MS)


def test_a_commit_that_leaves_in_time_lets_the_consumer_go_on(broker, names, monkeypatch):
    """With the adapter's own limit: on a loaded machine the commit may leave librdkafka seconds
    after the broker is continued, past the short limit of the test above (calls then fail)."""
    client, topic = _stopped_with_an_abandoned_commit(broker, names, monkeypatch)
    try:
        assert _returns_within(0.1 + SLACK_S, lambda: client.poll(100, 500)) == {}
        assert broker.pid is not None
        os.kill(broker.pid, signal.SIGCONT)
        # the commit leaves librdkafka once the broker answers; the consumer goes on
        # from where it was: the records produced now are handed out once each
        produce(broker.bootstrap, topic, [b"b%03d" % i for i in range(RECORDS)])
        got: dict[int, list[int]] = {}
        _consume(client, RECORDS, got, JOIN_S)
        tp0 = TopicPartition(topic, 0)
        client.pause([tp0])
        client.resume([tp0])
        for p, offsets in got.items():
            assert offsets == sorted(set(offsets)), f"partition {p}: records repeated or out of order"
        assert sum(map(len, got.values())) == RECORDS
        assert client.committed([tp0], 10_000)[tp0] is not None
    finally:
        client.close(CLOSE_MS)
