"""The operator standalone and with a permit: consume everything, drain commits exactly what was submitted."""

from __future__ import annotations

import pytest

from coordinator.protocol.common.waiting import wait_until
from cr_consumer import StartKind
from cr_consumer.operator.checkpoint import OperatorCheckpoint
from cr_consumer.operator.region import RegionPermit
from cr_consumer.testing.kafka_util import create_topic, produce

from support.operator import Sink, committed, make


@pytest.mark.usefixtures("kafka_client")  # runs with both Kafka clients
def test_standalone_consumes_everything_and_commits(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=4)
    produce(bootstrap, topic, (b"v%d" % i for i in range(4000)))
    sink = Sink()
    op = make(
        bootstrap, names.group(), "m0", sink, topics=[topic], start_position=StartKind.EARLIEST, commit_period_s=0.3
    )
    with op:
        sink.wait_count(4000, 30)
        offsets = sink.offsets()
        assert {k: sorted(v) for k, v in offsets.items()} == {(topic, p): list(range(1000)) for p in range(4)}
        wait_until(
            lambda: committed(bootstrap, op.config.group_id, topic) == {p: 1000 for p in range(4)},
            15,
            "commit of all offsets",
        )
        wait_until(lambda: op.metrics()["nSubmittedMessages"] == 4000, 5, "the submit counter")
        m = op.metrics()
        assert m["nAssignedPartitions"] == 4
        assert m["nConsumedTopics"] == 1
        assert m["nDrains"] >= 1
        wait_until(lambda: op.metrics()["consumerLag"] == {f"{topic}[{p}]": 0 for p in range(4)}, 10, "lag 0")
        from prometheus_client import generate_latest

        text = generate_latest(op.prometheus_registry).decode()
        assert 'crkafka_consumer_records_submitted_total{operator="m0"} 4000.0' in text
        assert f'crkafka_consumer_lag{{operator="m0",partition="3",topic="{topic}"}} 0.0' in text
    assert op.state.value == "CLOSED"


@pytest.mark.usefixtures("kafka_client")  # runs with both Kafka clients
def test_drain_commits_exactly_the_submitted_offsets(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    produce(bootstrap, topic, (b"x" * 10 for _ in range(3000)))
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
        max_poll_records=50,
    )
    with op:
        sink.wait_count(200, 30)
        permit.block(5)
        op.drain()
        submitted = {p: max(offs) + 1 for (_t, p), offs in sink.offsets().items()}
        n_at_drain = len(sink)
        assert (
            committed(bootstrap, op.config.group_id, topic) == {p: submitted.get(p, 0) for p in range(2)}
            or committed(bootstrap, op.config.group_id, topic) == submitted
        )
        ckpt = OperatorCheckpoint.decode(op.checkpoint(1))
        assert ckpt.operator == "m0"
        assert ckpt.members == ("m0",)
        assert {tp.partition: o for tp, o in ckpt.offsets.items()} == {
            p: submitted.get(p, 0) for p in range(2)
        } | submitted
        assert len(sink) == n_at_drain  # nothing submitted while the permit is blocked
        permit.unblock()
        sink.wait_count(3000, 30)
        assert sorted(o for offs in sink.offsets().values() for o in offs) == sorted(list(range(1500)) * 2)
