"""Operator-driven region: a drain is requested every trigger-count tuples and
each checkpoint holds exactly a multiple of trigger-count tuples."""

from __future__ import annotations

import threading

import pytest

from cr_consumer import StartKind
from cr_consumer.operator.checkpoint import OperatorCheckpoint
from cr_consumer.operator.region import RegionPermit
from cr_consumer.testing.kafka_util import create_topic, produce

from support.operator import Sink, make


class DrivingRegion:
    """Runs drain + checkpoint when the operator asks (as the runtime would)."""

    def __init__(self) -> None:
        self.op = None
        self.checkpoints: list[int] = []
        self.errors: list[BaseException] = []
        self.resets: list[str] = []

    def request_reset(self, *, force: bool, reason: str) -> None:
        self.resets.append(reason)

    def request_drain(self, *, reason: str) -> None:
        threading.Thread(target=self._cycle, daemon=True).start()

    def _cycle(self) -> None:
        op = self.op
        try:
            op.permit.block(10)
            op.drain()
            ckpt = OperatorCheckpoint.decode(op.checkpoint(len(self.checkpoints) + 1))
            self.checkpoints.append(sum(ckpt.offsets.values()))
        except BaseException as exc:  # noqa: BLE001 - asserted by the test
            self.errors.append(exc)
        finally:
            op.permit.unblock()


@pytest.mark.usefixtures("kafka_client")  # runs with both Kafka clients
def test_operator_driven_drains_every_trigger_count_tuples(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    produce(bootstrap, topic, (b"v%d" % i for i in range(1000)))
    sink = Sink()
    region = DrivingRegion()
    op = make(
        bootstrap,
        names.group(),
        "m0",
        sink,
        topics=[topic],
        start_position=StartKind.EARLIEST,
        region_mode="operator_driven",
        trigger_count=100,
        permit=RegionPermit(),
        region=region,
        max_poll_records=64,
    )
    region.op = op
    with op:
        sink.wait_count(1000, 30)
        from coordinator.protocol.common.waiting import wait_until

        wait_until(lambda: len(region.checkpoints) >= 10, 20, "10 checkpoints")
        assert region.errors == []
        # Each checkpoint holds exactly k x 100 tuples (offsets are dense from 0).
        assert region.checkpoints[:10] == [100 * (k + 1) for k in range(10)]
        assert len(sink) == 1000
