"""The drill's wait for the group's commits (drill/settle.py): which partitions
are behind the input's end, and the bounded wait against the session's broker."""

from __future__ import annotations

import time

from kafka import KafkaConsumer
from kafka.structs import OffsetAndMetadata, TopicPartition

from cr_consumer.drill.manifest import Manifest
from cr_consumer.drill.settle import behind, wait_for_commits
from cr_consumer.testing.kafka_util import create_topic


def _manifest(topic: str) -> Manifest:
    m = Manifest(group="g")
    for off in range(5):
        m.add(topic, 0, off, f"v{off}")
    m.add(topic, 1, 0, "a")
    m.add(topic, 1, 1, None, poison=True)  # the position passes a poison record: the end is 2
    return m


def test_behind_names_each_partition_below_the_input_end():
    m = _manifest("t")
    assert behind(m, {("t", 0): 5, ("t", 1): 2}) == {}
    assert behind(m, {("t", 0): 4, ("t", 1): 2}) == {("t", 0): (4, 5)}
    assert behind(m, {("t", 0): 5}) == {("t", 1): (None, 2)}


def test_wait_for_commits_returns_once_the_group_committed_the_end(bootstrap, names):
    topic, group = names.topic(), names.group()
    create_topic(bootstrap, topic, 2)
    m = _manifest(topic)
    t0 = time.monotonic()
    assert wait_for_commits(bootstrap, group, m, timeout_s=1.0) is False
    assert time.monotonic() - t0 < 10  # bounded
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit(
            {
                TopicPartition(topic, 0): OffsetAndMetadata(5, "", -1),
                TopicPartition(topic, 1): OffsetAndMetadata(2, "", -1),
            }
        )
    finally:
        consumer.close()
    assert wait_for_commits(bootstrap, group, m, timeout_s=10.0) is True
