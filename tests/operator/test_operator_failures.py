"""Bad input and lost dependencies: malformed records, a failing commit, a lost coordinator."""

from __future__ import annotations

import json
import time

import pytest

from coordinator.protocol.common.waiting import wait_until
from cr_consumer import StartKind
from cr_consumer.operator.checkpoint import OperatorCheckpoint
from cr_consumer.operator.event_thread import OperatorFailed
from cr_consumer.operator.process_thread import MalformedRecord
from cr_consumer.operator.region import DrainError, RegionPermit, ResetError
from cr_consumer.testing.broker import EmbeddedBroker
from cr_consumer.testing.kafka_util import create_topic, produce

from support.operator import Sink, committed, make


def _mixed(n):
    for i in range(n):
        yield b"{not json" if i % 10 == 3 else json.dumps({"i": i}).encode()


@pytest.mark.usefixtures("kafka_client")  # runs with both Kafka clients
def test_malformed_records_are_counted_and_skipped(bootstrap, names):
    topic = create_topic(bootstrap, names.topic())
    produce(bootstrap, topic, _mixed(100))
    sink = Sink()
    group = names.group()
    with make(
        bootstrap,
        group,
        "m0",
        sink,
        topics=[topic],
        start_position=StartKind.EARLIEST,
        value_deserializer=json.loads,
        on_malformed="skip",
        commit_period_s=0.2,
    ) as op:
        sink.wait_count(90, 20)
        assert sorted(r.value["i"] for r in sink.records) == [i for i in range(100) if i % 10 != 3]
        assert [r.offset for r in sink.records if r.value["i"] != r.offset] == []
        assert op.metrics()["nDroppedMalformedMessages"] == 10
        # The skipped records count as consumed: the commit moves past them.
        wait_until(lambda: committed(bootstrap, group, topic) == {0: 100}, 10, "commit past the bad records")


@pytest.mark.usefixtures("kafka_client")  # runs with both Kafka clients
def test_malformed_record_fails_the_operator_naming_it(bootstrap, names):
    topic = create_topic(bootstrap, names.topic())
    produce(bootstrap, topic, _mixed(10))
    sink = Sink()
    with make(
        bootstrap,
        names.group(),
        "m0",
        sink,
        topics=[topic],
        start_position=StartKind.EARLIEST,
        value_deserializer=json.loads,
        on_malformed="fail",
        permit=RegionPermit(),
    ) as op:
        wait_until(lambda: op.failure is not None, 20, "the operator to fail")
        assert isinstance(op.failure, MalformedRecord)
        assert f"topic {topic} partition 0 offset 3" in str(op.failure)
        assert op.state.value == "FAILED"
        assert all(r.offset < 3 for r in sink.records)  # nothing at or after the bad record
        with pytest.raises(OperatorFailed):
            op.drain()


def test_drain_whose_commit_fails_raises(names, tmp_path):
    """The broker goes away: the drain's synchronous commit fails within the
    drain timeout and raises (the region then resets), instead of hanging."""
    broker = EmbeddedBroker(log_path=tmp_path / "tansu.log").start()
    try:
        bootstrap = broker.bootstrap
        topic = create_topic(bootstrap, names.topic())
        produce(bootstrap, topic, (b"v" for _ in range(10)))
        sink = Sink()
        permit = RegionPermit()
        op = make(
            bootstrap,
            names.group(),
            "m0",
            sink,
            topics=[topic],
            start_position=StartKind.EARLIEST,
            permit=permit,
            drain_timeout_s=3.0,
            consumer_properties={"request.timeout.ms": 2000},
        )
        with op:
            sink.wait_count(10, 20)
            broker.stop()
            permit.block(5)
            t0 = time.monotonic()
            with pytest.raises(DrainError, match="committing offsets"):
                op.drain()
            assert time.monotonic() - t0 < 10
    finally:
        broker.stop()


def test_lost_coordinator_fails_the_reset_clearly(bootstrap, names, coordinator):
    topic = create_topic(bootstrap, names.topic())
    produce(bootstrap, topic, (b"v" for _ in range(5)))
    sink = Sink()
    permit = RegionPermit()
    with make(
        bootstrap,
        names.group(),
        "m0",
        sink,
        topics=[topic],
        start_position=StartKind.EARLIEST,
        coordinator=coordinator.endpoint,
        permit=permit,
        reset_timeout_s=4.0,
        coordinator_timeout_s=2.0,
    ) as op:
        sink.wait_count(5, 20)
        permit.block(5)
        op.drain()
        own = OperatorCheckpoint.decode(op.checkpoint(1))
        # A checkpoint of two members: the reset must merge through the coordinator.
        data = OperatorCheckpoint("m0", ("m0", "m1"), own.offsets).encode()
        coordinator.kill()
        t0 = time.monotonic()
        with pytest.raises(ResetError, match="merging checkpoint 1"):
            op.reset(1, data)
        assert time.monotonic() - t0 < 10
        assert op.state.value == "CR_RESET_PENDING"
