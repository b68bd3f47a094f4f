"""The one spelling of a partition, ``topic[partition]``, for single names, label maps and offset maps."""

from __future__ import annotations

from kafka import TopicPartition

from coordinator.protocol.common.partitions import by_label, offsets_text, partition_label


def test_partition_label():
    assert partition_label("orders", 3) == "orders[3]"


def test_by_label_sorts_by_topic_then_partition_number():
    offsets = {TopicPartition("b", 0): 1, TopicPartition("a", 10): 2, TopicPartition("a", 9): 3}
    assert list(by_label(offsets).items()) == [("a[9]", 3), ("a[10]", 2), ("b[0]", 1)]


def test_offsets_text():
    assert offsets_text({TopicPartition("t", 1): 9, TopicPartition("t", 0): 5}) == "{t[0]=5, t[1]=9}"
    assert offsets_text({}) == "{}"
