"""The seam's calls the Spark source needs, on the shared broker: the cluster's
topics (both clients), reading without a group (kafka-python), a rebalance held
until released with commits sent meanwhile (kafka-python), and librdkafka's
refusal of the kafka-python-only calls. (``OffsetOutOfRange`` is not here: tansu
deletes no records and answers a fetch past the end with no records.)"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from coordinator.protocol.common.waiting import wait_until
from cr_consumer.kafka.client import (
    ClientKind,
    ClientUnavailable,
    HeldCommit,
    KafkaClient,
    KafkaClientError,
    KafkaRecord,
    TopicPartition,
)
from cr_consumer.kafka.factory import make_client
from cr_consumer.testing.kafka_util import create_topic, produce

from support.group_timeouts import TEST_HEARTBEAT_INTERVAL_MS, TEST_SESSION_TIMEOUT_MS

JOIN_S = 60.0
CLOSE_MS = 10000
LOOKUP_MS = 10000


def group_properties(bootstrap: str, group: str) -> dict[str, object]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": group,
        "session.timeout.ms": TEST_SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": TEST_HEARTBEAT_INTERVAL_MS,
        "auto.offset.reset": "earliest",
        "fetch.max.wait.ms": 100,
    }


@pytest.fixture
def clients() -> Iterator[Callable[[ClientKind, dict[str, object]], KafkaClient]]:
    """Every client a test makes; closed at the end."""
    made: list[KafkaClient] = []

    def make(kind: ClientKind, properties: dict[str, object]) -> KafkaClient:
        client = make_client(kind, properties)
        made.append(client)
        return client

    yield make
    for client in made:
        with contextlib.suppress(Exception):  # already closed by the test
            client.close(CLOSE_MS)


@pytest.mark.parametrize("kind", list(ClientKind), ids=lambda k: k.value)
def test_topics_lists_every_topic_with_its_partitions(kind, bootstrap, names, clients):
    topic = create_topic(bootstrap, names.topic(), partitions=3)
    client = clients(kind, group_properties(bootstrap, names.group()))
    assert client.topics(LOOKUP_MS)[topic] == {0, 1, 2}


def test_a_client_without_a_group_reads_what_it_assigns_from_its_seek(bootstrap, names, clients):
    topic = create_topic(bootstrap, names.topic(), partitions=1)
    produce(bootstrap, topic, [b"v%d" % i for i in range(5)], partition=0)
    tp = TopicPartition(topic, 0)
    client = clients(
        ClientKind.KAFKA_PYTHON,
        {"bootstrap.servers": bootstrap, "group.id": None, "auto.offset.reset": "none", "fetch.max.wait.ms": 100},
    )
    client.assign([tp])
    client.seek(tp, 2)
    got: list[KafkaRecord] = []
    end = time.monotonic() + JOIN_S
    while len(got) < 3:
        assert time.monotonic() < end, f"read {got} of offsets 2-4"
        got.extend(client.poll(100, 100).get(tp, []))
    assert [r.value for r in got] == [b"v2", b"v3", b"v4"]
    assert client.position(tp, LOOKUP_MS) == 5


class Hold:
    """A RebalanceHold the test releases, with commits it hands over on demand."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.held: list[frozenset[TopicPartition]] = []
        self._pending: list[HeldCommit] = []
        self._lock = threading.Lock()

    @property
    def poll_s(self) -> float:
        return 0.01

    @property
    def commit_timeout_ms(self) -> int:
        return 5000

    def released(self, partitions: frozenset[TopicPartition]) -> bool:
        with self._lock:
            if not self.held or self.held[-1] != partitions:
                self.held.append(partitions)
        return self.release.is_set()

    def commits(self) -> list[HeldCommit]:
        with self._lock:
            pending, self._pending = self._pending, []
        return pending

    def commit(self, offsets: dict[TopicPartition, int], done: Callable[[KafkaClientError | None], None]) -> None:
        with self._lock:
            self._pending.append(HeldCommit(offsets, done))


class Assignments:
    """A RebalanceListener keeping the partitions held now."""

    def __init__(self) -> None:
        self.held: frozenset[TopicPartition] = frozenset()

    def on_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self.held = self.held | partitions

    def on_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        self.held = self.held - partitions

    def on_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self.on_revoked(partitions)


@contextlib.contextmanager
def polled(client: KafkaClient) -> Iterator[None]:
    """Poll ``client`` on a thread of its own until the block ends."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def run() -> None:
        try:
            while not stop.is_set():
                client.poll(50, 10)
        except BaseException as exc:  # noqa: BLE001 - reported at the end of the block
            errors.append(exc)

    thread = threading.Thread(target=run, name="spark-calls-poller", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(20)
    assert not thread.is_alive()
    assert not errors, errors


def test_a_held_rebalance_completes_only_when_released_and_sends_the_commits_handed_to_it(bootstrap, names, clients):
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    both = frozenset({TopicPartition(topic, 0), TopicPartition(topic, 1)})
    group = names.group()
    hold, held_by_a, held_by_b = Hold(), Assignments(), Assignments()
    a = clients(ClientKind.KAFKA_PYTHON, group_properties(bootstrap, group))
    a.subscribe([topic], listener=held_by_a, hold=hold)
    b = clients(ClientKind.KAFKA_PYTHON, group_properties(bootstrap, group))
    b.subscribe([topic], listener=held_by_b)
    with polled(a):
        wait_until(lambda: held_by_a.held == both, JOIN_S, "A to hold both partitions")
        with polled(b):
            wait_until(lambda: hold.held == [both], JOIN_S, "B's join to revoke A's partitions, held")
            outcome: list[KafkaClientError | None] = []
            hold.commit({TopicPartition(topic, 0): 3}, outcome.append)
            wait_until(lambda: outcome, 10, "the commit handed to the hold")
            assert outcome == [None]
            assert held_by_b.held == frozenset()  # the rebalance waits for the hold
            hold.release.set()
            wait_until(lambda: held_by_b.held, JOIN_S, "B's assignment once the hold is released")
    lookup = clients(ClientKind.KAFKA_PYTHON, {"bootstrap.servers": bootstrap, "group.id": group})
    assert lookup.committed([TopicPartition(topic, 0)], LOOKUP_MS) == {TopicPartition(topic, 0): 3}


def test_librdkafka_refuses_the_kafka_python_only_calls(bootstrap, names, clients):
    client = clients(ClientKind.LIBRDKAFKA, group_properties(bootstrap, names.group()))
    with pytest.raises(ClientUnavailable, match="kafka-python"):
        client.subscribe(["t"], listener=Assignments(), hold=Hold())
    with pytest.raises(ClientUnavailable, match="kafka-python"):
        client.assign([TopicPartition("t", 0)])
