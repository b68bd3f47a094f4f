"""The driver's watermark probe on the broker: end offsets right, and a client whose fetches
get no answer is replaced within the probe's bound instead of failing the trigger."""

from __future__ import annotations

import time

from cr_consumer.kafka.client import KafkaClient, TopicPartition
from cr_consumer.spark.options.parse import parse_options
from cr_consumer.spark.watermarks import PROBE_RESTART_S, PROBE_TIMEOUT_S, WatermarkProbe
from cr_consumer.testing.kafka_util import create_topic, produce, unique_name


class _FirstClientStuck(WatermarkProbe):
    """The first client's partitions are paused after positioning: its fetches never answer."""

    stuck = 0

    def _start_fetch(self, tps: list[TopicPartition], listed: dict[TopicPartition, int]) -> KafkaClient:
        consumer = super()._start_fetch(tps, listed)
        if self.stuck == 0:
            consumer.pause(tps)
        self.stuck += 1
        return consumer


def test_a_probe_whose_client_gets_no_fetch_answer_starts_a_new_client_and_answers(bootstrap):
    topic = create_topic(bootstrap, unique_name("probe"), 2)
    produce(bootstrap, topic, [f"r{i}".encode() for i in range(30)], partition=0)
    produce(bootstrap, topic, [f"s{i}".encode() for i in range(12)], partition=1)
    probe = _FirstClientStuck(
        parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "coordinator": "tcp://127.0.0.1:1"})
    )
    try:
        started = time.monotonic()
        ends = probe.ends([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        took = time.monotonic() - started
    finally:
        probe.close()
    assert ends == {TopicPartition(topic, 0): 30, TopicPartition(topic, 1): 12}
    assert probe.stuck == 2  # the stuck client, then one new client
    assert PROBE_RESTART_S <= took < PROBE_TIMEOUT_S
