"""The member's Kafka group helpers on the real broker: the heartbeat's group
report, removing a (dead) predecessor's consumer from the group, the rejoin hint."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from coordinator.protocol.common.waiting import wait_until
from cr_consumer.kafka.client import KafkaClient, TopicPartition
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.kafka.kafka_python.client import KafkaPythonClient
from cr_consumer.runtime.member.group_state import evict_predecessor, group_report, request_rejoin
from cr_consumer.testing.kafka_util import create_topic

KAFKA = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}
#: The eviction test's session timeout: long enough that only the eviction can
#: explain a rebalance within EVICTION_WAIT_S (a rejoin can repeat when a metadata
#: refresh lands mid-join, so the wait has room for a second round).
EVICTION_SESSION_TIMEOUT_MS = 15000
EVICTION_WAIT_S = 10.0


class _Pump:
    """Polls one client on its own thread until stopped, with the event
    thread's contract: a group snapshot after every poll, and requests to
    rejoin served on the polling thread."""

    def __init__(self, consumer: KafkaClient):
        self.consumer = consumer
        self.group = consumer.group()
        self.stop = threading.Event()
        self._rejoin = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def request_rejoin(self):
        self._rejoin.set()
        return True

    def _run(self):
        while not self.stop.is_set():
            if self._rejoin.is_set():
                self._rejoin.clear()
                assert self.consumer.request_rejoin()
            self.consumer.poll(100, 500)
            self.group = self.consumer.group()

    def halt(self):
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive()


class _Count:
    def __init__(self):
        self.assigned = 0

    def on_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        pass

    def on_lost(self, partitions: frozenset[TopicPartition]) -> None:
        pass

    def on_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self.assigned += 1


class _Source:
    """The operator's group seam (GroupSource) over a pump; None: no consumer yet."""

    joining = False
    state = None
    cooperative = False

    def __init__(self, pump):
        self._pump = pump

    @property
    def group_metadata(self):
        return self._pump.group if self._pump is not None else None

    def request_rejoin(self):
        return self._pump.request_rejoin() if self._pump is not None else False


@pytest.mark.slow
def test_evicting_a_silent_member_rebalances_without_the_session_timeout(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=4)
    group = names.group()
    settings = {
        **KAFKA,
        "session.timeout.ms": EVICTION_SESSION_TIMEOUT_MS,
        "bootstrap.servers": bootstrap,
        "group.id": group,
    }
    a = KafkaPythonClient({**settings, "client.id": "a"})
    joins = _Count()
    a.subscribe([topic], listener=joins)
    b = KafkaPythonClient({**settings, "client.id": "b"})
    b.subscribe([topic], listener=_Count())
    pump_a, pump_b = _Pump(a), _Pump(b)
    try:
        wait_until(
            lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, 30, "both consumers to get two partitions"
        )
        # the snapshot is taken right after the poll that completed the join
        wait_until(
            lambda: (
                (ra := group_report(_Source(pump_a))) is not None
                and not ra.rebalancing
                and (rb := group_report(_Source(pump_b))) is not None
                and not rb.rebalancing
            ),
            5,
            "both reports out of rebalancing",
        )
        report = group_report(_Source(pump_a))
        assert report is not None
        assert report.member_id is not None
        assert report.member_id.startswith("a-")
        assert report.generation is not None
        assert report.generation >= 0
        assert report.rebalancing is False
        victim_report = group_report(_Source(pump_b))
        assert victim_report is not None
        victim = victim_report.member_id
        # b stands for a killed process: nobody polls it any more; the broker would
        # keep it in the group for the session timeout (15 s) and then rebalance.
        pump_b.halt()
        config = SimpleNamespace(
            bootstrap_servers=bootstrap,
            group_id=group,
            operator_name="b-restarted",
            consumer_properties={"request.timeout.ms": 5000, "fetch.min.bytes": 1},
        )
        settings = admin_settings(bootstrap, config.consumer_properties, request_timeout_ms=5000, client_id="evict")
        assert "fetch_min_bytes" not in settings  # consumer-only settings are left out
        t0 = time.monotonic()
        assert evict_predecessor(config, victim) is True
        wait_until(lambda: len(a.assignment()) == 4, EVICTION_WAIT_S, "the survivor to take all four partitions")
        # before the session timeout would have removed it
        assert time.monotonic() - t0 < EVICTION_WAIT_S < EVICTION_SESSION_TIMEOUT_MS / 1000
        # an unknown member id is reported, not raised
        assert evict_predecessor(config, "no-such-member") is False
        # the rejoin hint: the consumer rejoins at its next poll (tansu keeps the
        # generation id of a sole member that rejoins: count the assignments)
        before = joins.assigned
        assert request_rejoin(_Source(pump_a)) is True
        assert request_rejoin(_Source(None)) is False
        assert group_report(_Source(None)) is None
        wait_until(lambda: joins.assigned > before, 15, "a new assignment after the rejoin hint")
        assert len(a.assignment()) == 4
    finally:
        pump_a.halt()
        pump_b.halt()
        a.close(10000)
        b.close(10000)


def test_a_cooperative_source_ignores_the_rejoin_hint():
    """A cooperative survivor keeps its partitions through a rebalance; its
    rejoin would only race a restarted member's removal of its predecessor."""
    asked = []
    source = SimpleNamespace(
        group_metadata=None, joining=False, state=None, cooperative=True, request_rejoin=lambda: asked.append(1) or True
    )
    assert request_rejoin(source) is False
    assert asked == []
    assert request_rejoin(SimpleNamespace(**{**vars(source), "cooperative": False})) is True
    assert asked == [1]
