"""The librdkafka adapter's assignment callback when its start-offset lookup or
the listener fails: the poll fails with an error naming the cause and no record
of the assigned partitions is handed out (never a silent skip, never a
lookup after a failed listener).

The broker "stops answering" for real: each test runs its own embedded broker
and stops its process (SIGSTOP) from inside the assignment callback, so the
lookup that follows (OffsetFetch) gets no answer; the broker is continued
before anything is closed.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator

import pytest
from kafka_clients.test_client_contract import CLOSE_MS, JOIN_S, Recorder, props

from cr_consumer.kafka.client import ClientKind, ClientTimeout, KafkaClient, KafkaClientError, TopicPartition
from cr_consumer.kafka.factory import make_client
from cr_consumer.kafka.librdkafka import rebalance as librdkafka_rebalance
from cr_consumer.testing.broker import EmbeddedBroker
from cr_consumer.testing.kafka_util import create_topic, produce

from support.own_broker import own_broker

#: The lookup's bound in these tests (the adapter's is 10 s).
LOOKUP_BOUND_MS = 1000


class ListenerFailed(Exception):
    """What the test's listener raises."""


@pytest.fixture
def broker(tmp_path) -> Iterator[EmbeddedBroker]:
    with own_broker(tmp_path) as own:
        yield own


def _stopper(broker: EmbeddedBroker, then: Callable[[], None] | None = None) -> Recorder:
    def stop_broker(_partitions: frozenset[TopicPartition]) -> None:
        assert broker.pid is not None
        os.kill(broker.pid, signal.SIGSTOP)
        if then is not None:
            then()

    return Recorder(stop_broker)


def _poll_until_it_fails(client: KafkaClient) -> None:
    """Poll until a poll raises; every poll before must return nothing."""
    end = time.monotonic() + JOIN_S
    while time.monotonic() < end:
        assert client.poll(100, 500) == {}, "records handed out although their start was never looked up"
    raise AssertionError(f"no poll failed within {JOIN_S}s")


def _later_polls_fail_too(client: KafkaClient, broker: EmbeddedBroker) -> None:
    """With the broker answering again, the next polls still fail (confluent-kafka
    assigned the partitions itself: their records must not be handed out)."""
    assert broker.pid is not None
    os.kill(broker.pid, signal.SIGCONT)
    for _ in range(3):
        with pytest.raises(KafkaClientError, match="an assignment failed earlier"):
            client.poll(100, 500)


def _topic_with_records(bootstrap: str, name: str) -> str:
    topic = create_topic(bootstrap, name, partitions=1)
    produce(bootstrap, topic, [b"a%02d" % i for i in range(20)])
    return topic


def _listener_fails() -> None:
    raise ListenerFailed("the listener failed")


@pytest.mark.parametrize(
    ("then", "error", "match"),
    [
        # the lookup after the listener gets no answer within its bound
        (None, ClientTimeout, r"assignment of .*cannot look up where the partitions start"),
        # the broker is stopped before the listener fails: a lookup after it would
        # wait out its bound and fail with ClientTimeout, hiding the listener's error
        (_listener_fails, ListenerFailed, "the listener failed"),
    ],
    ids=["lookup-without-an-answer", "failing-listener-no-lookup"],
)
def test_a_failed_assignment_fails_the_poll_with_its_cause(broker, names, monkeypatch, then, error, match):
    monkeypatch.setattr(librdkafka_rebalance, "ASSIGN_LOOKUP_TIMEOUT_MS", LOOKUP_BOUND_MS)
    topic = _topic_with_records(broker.bootstrap, names.topic())
    client = make_client(ClientKind.LIBRDKAFKA, props(broker.bootstrap, names.group()))
    try:
        client.subscribe([topic], listener=_stopper(broker, then=then))
        with pytest.raises(error, match=match):
            _poll_until_it_fails(client)
        _later_polls_fail_too(client, broker)
    finally:
        assert broker.pid is not None
        os.kill(broker.pid, signal.SIGCONT)
        client.close(CLOSE_MS)
