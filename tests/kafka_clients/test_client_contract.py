"""The KafkaClient contract, run against both implementations on the shared broker.

Every test takes ``kind`` (kafka-python, librdkafka) and asserts the same
outcome for both: the records and their fields, the assignment callbacks,
pause/resume, seek/position, commit/committed, offsets, a commit refused after
a rebalance, leaving the group on close, cooperative rebalancing.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

import pytest

from cr_consumer.kafka.client import (
    ClientKind,
    CommitRefused,
    KafkaClient,
    KafkaRecord,
    MemberFenced,
    RebalanceProtocol,
    TimestampType,
    TopicPartition,
)
from cr_consumer.kafka.factory import make_client
from cr_consumer.testing.kafka_util import create_topic, produce, producer

from support.group_timeouts import TEST_HEARTBEAT_INTERVAL_MS, TEST_SESSION_TIMEOUT_MS

KINDS = [ClientKind.KAFKA_PYTHON, ClientKind.LIBRDKAFKA]
#: Bound on a group join plus the first fetch (a first join takes ~session/2 on tansu).
JOIN_S = 30.0
#: Bound on fetching what a test produced once the partitions are assigned.
FETCH_S = 20.0
CLOSE_MS = 10000
LOOKUP_MS = 10000


@pytest.fixture(params=KINDS, ids=lambda k: k.value)
def kind(request) -> ClientKind:
    return request.param


class Recorder:
    """A RebalanceListener that records the callbacks (they may run on the client's
    IO thread) and runs ``on_assign(partitions)`` inside the assignment callback."""

    def __init__(self, on_assign: Callable[[frozenset[TopicPartition]], None] | None = None) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, frozenset[TopicPartition]]] = []
        self._on_assign = on_assign

    def on_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        with self.lock:
            self.events.append(("assigned", partitions))
        if self._on_assign is not None:
            self._on_assign(partitions)

    def on_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        with self.lock:
            self.events.append(("revoked", partitions))

    def on_lost(self, partitions: frozenset[TopicPartition]) -> None:
        with self.lock:
            self.events.append(("lost", partitions))

    def of(self, what: str) -> list[frozenset[TopicPartition]]:
        with self.lock:
            return [tps for name, tps in self.events if name == what]


def props(bootstrap: str, group: str, **extra: object) -> dict[str, object]:
    out: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": group,
        "session.timeout.ms": TEST_SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": TEST_HEARTBEAT_INTERVAL_MS,
        "auto.offset.reset": "earliest",
        "fetch.max.wait.ms": 100,
    }
    out.update({k.replace("_", "."): v for k, v in extra.items()})
    return out


def poll_until(
    client: KafkaClient, done: Callable[[list[KafkaRecord]], bool], timeout: float, what: str, max_records: int = 500
) -> list[KafkaRecord]:
    """Poll (100 ms polls) until ``done(records so far)``; AssertionError naming ``what`` after ``timeout``."""
    got: list[KafkaRecord] = []
    end = time.monotonic() + timeout
    while not done(got):
        assert time.monotonic() < end, f"{what}: not done within {timeout}s (got {len(got)} records)"
        for records in client.poll(100, max_records).values():
            got.extend(records)
    return got


def offsets_of(records: list[KafkaRecord], tp: TopicPartition) -> list[int]:
    return [r.offset for r in records if (r.topic, r.partition) == tp]


class Poller:
    """Polls another member on a thread of the test's own (stopped and joined at the end)."""

    def __init__(self, client: KafkaClient) -> None:
        self.client = client
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="contract-poller", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.client.poll(100, 100)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        assert not self._thread.is_alive(), "poller thread did not stop"
        assert self.error is None, f"poller failed: {self.error!r}"


@pytest.fixture
def clients():
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


def test_records_and_assignment_are_the_same_for_both_clients(kind, bootstrap, names, clients):
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    sent = []
    p = producer(bootstrap)
    try:
        for i in range(10):
            for part in (0, 1):
                key = None if i == 3 else f"k{i}".encode()
                value = None if i == 4 else f"v{part}-{i}".encode()
                headers = [("h", f"{i}".encode()), ("empty", b"")] if i % 2 == 0 else []
                ts = 1_700_000_000_000 + 1000 * i + part
                p.send(topic, key=key, value=value, partition=part, headers=headers, timestamp_ms=ts)
                sent.append((part, i, ts, key, value, tuple(headers)))
        p.flush()
    finally:
        p.close()
    recorder = Recorder()
    client = clients(kind, props(bootstrap, names.group()))
    client.subscribe([topic], listener=recorder)
    got = poll_until(client, lambda rs: len(rs) >= 20, JOIN_S, "consume 20 records")
    assert recorder.of("assigned") == [frozenset({TopicPartition(topic, 0), TopicPartition(topic, 1)})]
    assert client.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
    assert client.rebalance_protocol is RebalanceProtocol.EAGER
    expected = [
        KafkaRecord(topic, part, i, ts, TimestampType.CREATE_TIME, key, value, headers)
        for part, i, ts, key, value, headers in sent
    ]
    assert sorted(got, key=lambda r: (r.partition, r.offset)) == sorted(expected, key=lambda r: (r.partition, r.offset))
    membership = client.group()
    assert membership.member_id
    assert not membership.rebalancing


def test_pause_resume_fetches_every_record_once(kind, bootstrap, names, clients):
    topic = create_topic(bootstrap, names.topic(), partitions=1)
    produce(bootstrap, topic, [b"x%03d" % i for i in range(300)])
    tp = TopicPartition(topic, 0)
    client = clients(kind, props(bootstrap, names.group()))
    client.subscribe([topic], listener=Recorder())
    got = poll_until(client, lambda rs: len(rs) >= 1, JOIN_S, "first records", max_records=10)
    client.pause([tp])
    assert client.paused() == {tp}
    end = time.monotonic() + 1.0
    while time.monotonic() < end:  # a paused partition yields nothing
        assert client.poll(100, 10) == {}
    client.resume([tp])
    assert client.paused() == set()
    got += poll_until(client, lambda rs: len(got) + len(rs) >= 300, FETCH_S, "the rest after resume", max_records=10)
    assert offsets_of(got, tp) == list(range(300))


def test_seek_in_the_assignment_callback_and_after(kind, bootstrap, names, clients):
    topic = create_topic(bootstrap, names.topic(), partitions=1)
    produce(bootstrap, topic, [b"s%02d" % i for i in range(40)])
    tp = TopicPartition(topic, 0)
    holder: list[KafkaClient] = []

    def seek_on_assign(partitions: frozenset[TopicPartition]) -> None:
        for p in partitions:
            holder[0].seek(p, 25)

    client = clients(kind, props(bootstrap, names.group()))
    holder.append(client)
    client.subscribe([topic], listener=Recorder(seek_on_assign))
    got = poll_until(client, lambda rs: len(rs) >= 15, JOIN_S, "records from offset 25")
    assert offsets_of(got, tp) == list(range(25, 40))
    assert client.position(tp, LOOKUP_MS) == 40
    client.seek(tp, 10)
    assert client.position(tp, LOOKUP_MS) == 10
    again = poll_until(client, lambda rs: len(rs) >= 30, FETCH_S, "records from offset 10")
    assert offsets_of(again, tp) == list(range(10, 40))


def test_sync_commit_and_committed(kind, bootstrap, names, clients):
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    produce(bootstrap, topic, [b"c%02d" % i for i in range(20)])
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    client = clients(kind, props(bootstrap, names.group()))
    client.subscribe([topic], listener=Recorder())
    poll_until(client, lambda rs: len(rs) >= 20, JOIN_S, "all records")
    assert client.committed(tps, LOOKUP_MS) == {tps[0]: None, tps[1]: None}
    client.commit({tps[0]: 7, tps[1]: 3}, LOOKUP_MS)
    assert client.committed(tps, LOOKUP_MS) == {tps[0]: 7, tps[1]: 3}
    client.commit({tps[0]: 10}, LOOKUP_MS)
    assert client.committed(tps, LOOKUP_MS) == {tps[0]: 10, tps[1]: 3}


def test_offsets_and_high_watermark(kind, bootstrap, names, clients):
    topic = create_topic(bootstrap, names.topic(), partitions=1)
    tp = TopicPartition(topic, 0)
    # single-record batches: ListOffsets(latest) is exact on every broker then
    produce(bootstrap, topic, [b"e%d" % i for i in range(5)], single_record_batches=True)
    client = clients(kind, props(bootstrap, names.group()))
    client.subscribe([topic], listener=Recorder())
    assert client.highwater(tp) is None
    assert client.beginning_offsets([tp], LOOKUP_MS) == {tp: 0}
    assert client.end_offsets([tp], LOOKUP_MS) == {tp: 5}
    produce(bootstrap, topic, [b"m%d" % i for i in range(50)])  # multi-record batches
    poll_until(client, lambda rs: len(rs) >= 55, JOIN_S, "all 55 records")
    assert client.highwater(tp) == 55  # from the fetch response, right on every broker
    assert client.subscribed_partitions(LOOKUP_MS) == {tp}


def test_commit_refused_after_a_rebalance_raises_commit_refused(kind, bootstrap, names, clients):
    """Member A stops polling while B joins; the group rebalances without A (its
    poll interval runs out) and A's commit is refused with CommitRefused. (Whether
    B then forms the group is the broker's business: tansu may name the departed A
    its leader and never finish the join.) A was removed from the group, so the
    refusal is MemberFenced: its partitions may be another member's now."""
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    produce(bootstrap, topic, [b"r%d" % i for i in range(10)])
    group = names.group()
    settings = props(bootstrap, group, **{"max.poll.interval.ms": TEST_SESSION_TIMEOUT_MS})
    a = clients(kind, settings)
    a.subscribe([topic], listener=Recorder())
    poll_until(a, lambda rs: len(rs) >= 10, JOIN_S, "A's records")
    a.commit({TopicPartition(topic, 0): 1}, LOOKUP_MS)
    b = clients(kind, settings)
    b.subscribe([topic], listener=Recorder())
    refused: CommitRefused | None = None
    with Poller(b):
        end = time.monotonic() + JOIN_S
        while refused is None and time.monotonic() < end:
            time.sleep(0.2)
            try:
                a.commit({TopicPartition(topic, 0): 2}, LOOKUP_MS)
            except CommitRefused as exc:
                refused = exc
        assert refused is not None, "A's commits were never refused"
    assert isinstance(refused, MemberFenced), refused


def test_close_leaves_the_group(kind, bootstrap, names, clients):
    """After A closes, B owns every partition well before A's session would expire."""
    session_ms = 12000
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    settings = props(bootstrap, names.group(), **{"session.timeout.ms": session_ms})
    a = clients(kind, settings)
    a.subscribe([topic], listener=Recorder())
    b = clients(kind, settings)
    b.subscribe([topic], listener=Recorder())
    both = {TopicPartition(topic, 0), TopicPartition(topic, 1)}
    with Poller(b):
        end = time.monotonic() + 2 * JOIN_S
        while not (a.assignment() and b.assignment() and a.assignment() | b.assignment() == both):
            assert time.monotonic() < end, "the two members never shared the partitions"
            a.poll(100, 100)
        started = time.monotonic()
        a.close(CLOSE_MS)
        while b.assignment() != both:
            assert time.monotonic() - started < session_ms / 1000 * 0.75, (
                "B did not take over before A's session ran out"
            )
            time.sleep(0.1)
    a.close(CLOSE_MS)  # a second close does nothing


def test_cooperative_rebalance_revokes_only_what_moves(kind, bootstrap, names, clients):
    topic = create_topic(bootstrap, names.topic(), partitions=4)
    settings = props(bootstrap, names.group(), **{"partition.assignment.strategy": "cooperative-sticky"})
    all4 = {TopicPartition(topic, p) for p in range(4)}
    a_events = Recorder()
    a = clients(kind, settings)
    assert a.rebalance_protocol is RebalanceProtocol.COOPERATIVE
    a.subscribe([topic], listener=a_events)
    end = time.monotonic() + JOIN_S
    while a.assignment() != all4:
        assert time.monotonic() < end, "A never owned the 4 partitions"
        a.poll(100, 100)
    b = clients(kind, settings)
    b.subscribe([topic], listener=Recorder())
    with Poller(b):
        end = time.monotonic() + 2 * JOIN_S
        while not (len(a.assignment()) == 2 and len(b.assignment()) == 2):
            assert time.monotonic() < end, f"the partitions were never split 2/2: {a_events.events}"
            a.poll(100, 100)
    assert a.assignment() | b.assignment() == all4
    revoked = a_events.of("revoked")
    assert revoked, a_events.events
    assert all(len(r) < 4 for r in revoked), a_events.events
    assert set().union(*revoked) == all4 - a.assignment()


def test_a_partition_paused_in_the_assignment_callback_yields_nothing_until_resumed(kind, bootstrap, names, clients):
    """What the operator does with partitions it cannot seek yet (held): paused
    in on_assigned, nothing of them is fetched; resumed, every record comes once."""
    topic = create_topic(bootstrap, names.topic(), partitions=1)
    produce(bootstrap, topic, [b"h%02d" % i for i in range(30)])
    tp = TopicPartition(topic, 0)
    holder: list[KafkaClient] = []
    recorder = Recorder(lambda partitions: holder[0].pause(partitions))
    client = clients(kind, props(bootstrap, names.group()))
    holder.append(client)
    client.subscribe([topic], listener=recorder)
    end = time.monotonic() + JOIN_S
    while not recorder.of("assigned"):
        assert time.monotonic() < end, "never assigned"
        assert client.poll(100, 100) == {}
    assert client.paused() == {tp}
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        assert client.poll(100, 100) == {}
    client.resume([tp])
    got = poll_until(client, lambda rs: len(rs) >= 30, FETCH_S, "records after resume")
    assert offsets_of(got, tp) == list(range(30))


def test_pattern_subscription_matches_from_the_start_of_the_name(kind, bootstrap, names, clients):
    prefix = names.topic("pat")
    matching = [create_topic(bootstrap, f"{prefix}-a"), create_topic(bootstrap, f"{prefix}-b")]
    other = create_topic(bootstrap, f"x-{prefix}-a")  # holds the pattern, but not at the start
    for topic in [*matching, other]:
        produce(bootstrap, topic, [topic.encode()] * 3)
    client = clients(kind, props(bootstrap, names.group(), **{"metadata.max.age.ms": 1000}))
    client.subscribe(pattern=f"{prefix}-.*", listener=Recorder())
    got = poll_until(client, lambda rs: len(rs) >= 6, JOIN_S, "the matching topics' records")
    end = time.monotonic() + 1.0
    while time.monotonic() < end:  # nothing more arrives (the other topic is not subscribed)
        for records in client.poll(100, 100).values():
            got.extend(records)
    assert sorted(r.topic for r in got) == sorted(matching * 3)
    assert client.subscribed_partitions(LOOKUP_MS) == {TopicPartition(t, 0) for t in matching}


def test_a_seek_of_a_paused_partition_applies_when_it_is_resumed(kind, bootstrap, names, clients):
    """The operator's held partition: paused in on_assigned, seeked after the poll
    while still paused, then resumed: it starts at the seek, not at the committed
    offset or auto.offset.reset (latest here, which would start it at the log end)."""
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    produce(bootstrap, topic, [b"s%02d" % i for i in range(40)])
    tps = {TopicPartition(topic, 0), TopicPartition(topic, 1)}
    holder: list[KafkaClient] = []
    recorder = Recorder(lambda partitions: holder[0].pause(partitions))
    client = clients(kind, props(bootstrap, names.group(), auto_offset_reset="latest"))
    holder.append(client)
    client.subscribe([topic], listener=recorder)
    end = time.monotonic() + JOIN_S
    while not recorder.of("assigned"):
        assert time.monotonic() < end, "never assigned"
        assert client.poll(100, 100) == {}
    for tp in sorted(tps):  # right after the poll that assigned them, as the operator's after-poll seek
        client.seek(tp, 5)
        assert client.position(tp, LOOKUP_MS) == 5
    client.resume(tps)
    got = poll_until(client, lambda rs: len(rs) >= 30, FETCH_S, "records after the seek and resume")
    for tp in tps:
        assert offsets_of(got, tp) == list(range(5, 20))
