"""The embedded broker and the Kafka helpers work end to end."""

import pytest
from kafka import KafkaConsumer, TopicPartition

from cr_consumer.testing.broker import BrokerStartError, EmbeddedBroker
from cr_consumer.testing.kafka_util import create_topic, produce


def test_produce_and_consume_dense_offsets(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    produce(bootstrap, topic, [f"v{i}".encode() for i in range(10)])
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    seen = {0: [], 1: []}
    import time

    deadline = time.monotonic() + 20
    while sum(map(len, seen.values())) < 10 and time.monotonic() < deadline:
        for tp, recs in consumer.poll(timeout_ms=200).items():
            seen[tp.partition].extend(r.offset for r in recs)
    consumer.close()
    assert seen == {0: [0, 1, 2, 3, 4], 1: [0, 1, 2, 3, 4]}


def test_committed_offsets_as_an_admin_client_sees_them(bootstrap, names):
    from kafka.structs import OffsetAndMetadata

    from cr_consumer.testing.kafka_util import committed_offsets

    topic = create_topic(bootstrap, names.topic(), partitions=2)
    group = names.group()
    assert committed_offsets(bootstrap, group, topic) == {}
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        consumer.commit({TopicPartition(topic, 1): OffsetAndMetadata(7, "", -1)})
    finally:
        consumer.close()
    assert committed_offsets(bootstrap, group, topic) == {1: 7}


def test_a_missing_broker_binary_is_a_start_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TANSU_BIN", str(tmp_path / "no-such-tansu"))
    broker = EmbeddedBroker(log_path=tmp_path / "tansu.log")
    with pytest.raises(BrokerStartError, match="no-such-tansu"):
        broker.start()
    assert not broker.running
