"""The source holds a partition whose state the pipeline is restoring, and only that one: the
member's other partitions flow meanwhile, and the held one flows from its seeked offset once its
restore is over (``rebalance.py``: state restore)."""

from __future__ import annotations

import threading

import pytest

from coordinator.protocol.common.waiting import wait_until
from cr_consumer import StartKind
from cr_consumer.kafka.client import TopicPartition
from cr_consumer.testing.kafka_util import create_topic, produce

from support.operator import Sink, make


class Restorer:
    """A pipeline whose restore of partition 0 lasts until the test releases it (StateRestorer)."""

    def __init__(self, slow: int) -> None:
        self.slow = slow
        self.release = threading.Event()
        self.started: list[set[TopicPartition]] = []
        self._lock = threading.Lock()

    def restore(self, partitions) -> None:
        with self._lock:
            self.started.append(set(partitions))

    def restoring(self) -> set[TopicPartition]:
        with self._lock:
            started = set().union(*self.started)
        return set() if self.release.is_set() else {tp for tp in started if tp.partition == self.slow}

    def forget(self, partitions) -> None:
        pass


@pytest.mark.usefixtures("kafka_client")  # runs with both Kafka clients
def test_a_partition_restoring_its_state_is_held_while_the_others_flow(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=3)
    produce(bootstrap, topic, (b"v%d" % i for i in range(600)))  # round robin: 200 per partition
    sink = Sink()
    restorer = Restorer(slow=0)
    op = make(
        bootstrap, names.group(), "m0", sink, topics=[topic], start_position=StartKind.EARLIEST, restorer=restorer
    )
    with op:
        sink.wait_count(400, 30)
        offsets = sink.offsets()
        assert {p for (_t, p) in offsets} == {1, 2}  # partitions 1 and 2 flowed, 0 is held
        assert {tp.partition for tp in set().union(*restorer.started)} == {0, 1, 2}
        assert op.metrics()["nRestoringPartitions"] == 1
        restorer.release.set()
        sink.wait_count(600, 30)
        wait_until(lambda: op.metrics()["nRestoringPartitions"] == 0, 10, "no partition held")
        offsets = sink.offsets()
        assert {p: sorted(v) for (_t, p), v in offsets.items()} == {p: list(range(200)) for p in range(3)}
