"""The exactly-once Kafka sink on the broker, called as the member runtime calls it: records
invisible until the region completes their checkpoint, a reset aborting the open interval, the
two transactional ids alternating, what a checkpoint reports. The output is read from the log's
own markers (``raw_batches.read_committed``): the test broker's consumers cannot hide aborted
records."""

from __future__ import annotations

import json

import pytest

from coordinator.kafka.raw_batches import CommittedRead, read_committed
from coordinator.kafka.transactions import resolve
from coordinator.protocol.region.transactions import Resolve, Transactions
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.kafka.property_rules import PropertyError
from cr_consumer.operator.region import TransactionalOperator
from cr_consumer.runtime import Record
from cr_consumer.runtime.pipeline.kafka_sink import KafkaSink, transactional_ids
from cr_consumer.testing.kafka_util import create_topic, unique_name


def recs(start: int, n: int) -> list[Record]:
    return [Record("in", 0, o, 1000 + o, f"k{o}", f"v{o}".encode()) for o in range(start, start + n)]


def _read(bootstrap: str, topic: str, partition: int = 0) -> CommittedRead:
    return read_committed(
        admin_settings(bootstrap, {}, request_timeout_ms=5_000, client_id="test-sink"), topic, partition
    )


def _values(bootstrap: str, topic: str, partitions: int = 1) -> list[bytes | None]:
    return [r.value for p in range(partitions) for r in _read(bootstrap, topic, p).records]


@pytest.fixture(params=["kafka-python", "librdkafka"])
def sink_factory(bootstrap, request):
    """Sinks on either client's producer: every test of the protocol runs with both."""
    made: list[KafkaSink] = []

    def make(topic: str, **kwargs: object) -> KafkaSink:
        options: dict[str, object] = {
            "bootstrap": bootstrap,
            "group": unique_name("g"),
            "member": "member-0",
            "client": request.param,
        }
        options.update(kwargs)
        sink = KafkaSink(topic, **options)  # type: ignore[arg-type]
        made.append(sink)
        return sink

    yield make
    for sink in made:
        sink.close()


def test_records_become_visible_only_when_their_checkpoint_completes(bootstrap, sink_factory):
    topic = create_topic(bootstrap, unique_name("sink"), 1)
    sink = sink_factory(topic)
    assert isinstance(sink, TransactionalOperator)
    sink.process_batch(recs(0, 3))
    sink.drain()
    sink.checkpoint(1)
    read = _read(bootstrap, topic)
    assert read.records == ()  # flushed, prepared, not committed
    assert [(t.records, t.first_offset) for t in read.open_transactions] == [(3, 0)]
    txns = sink.transactions()
    assert [p.to_wire() for t in txns.prepared for p in t.partitions] == [[topic, 0, 0]]
    assert txns.fence == sink.ids
    sink.process_batch(recs(3, 2))  # the next interval, written while checkpoint 1 commits
    sink.notify_checkpoint_complete(1)
    assert _values(bootstrap, topic) == [b"v0", b"v1", b"v2"]
    sink.checkpoint(2)
    sink.retire_checkpoint(2)
    read = _read(bootstrap, topic)
    assert [r.value for r in read.records] == [b"v0", b"v1", b"v2", b"v3", b"v4"]
    assert [r.key for r in read.records] == [b"k0", b"k1", b"k2", b"k3", b"k4"]
    assert read.open_transactions == ()


def test_the_two_ids_alternate_per_prepared_interval(bootstrap, sink_factory):
    topic = create_topic(bootstrap, unique_name("sink"), 1)
    sink = sink_factory(topic, name="out")
    used = []
    for seq in range(1, 5):
        sink.process_batch(recs(seq * 10, 1))
        sink.checkpoint(seq)
        used.append(sink.transactions().prepared[0].transactional_id)
        sink.notify_checkpoint_complete(seq)
    assert used == [sink.ids[0], sink.ids[1], sink.ids[0], sink.ids[1]]
    sink.checkpoint(5)  # an interval without records prepares nothing and keeps its id
    assert sink.transactions() == Transactions((), sink.ids, bootstrap)
    sink.process_batch(recs(60, 1))
    sink.checkpoint(6)
    assert sink.transactions().prepared[0].transactional_id == sink.ids[0]
    sink.notify_checkpoint_complete(6)
    assert len(_values(bootstrap, topic)) == 5


def test_a_reset_aborts_the_open_interval_and_keeps_the_completed_checkpoint(bootstrap, sink_factory):
    topic = create_topic(bootstrap, unique_name("sink"), 1)
    sink = sink_factory(topic)
    sink.process_batch(recs(0, 2))
    data = sink.checkpoint(1)
    # The member dies before RESUME(1); checkpoint 1 completed in the region meanwhile.
    entry = Resolve("member-0", 1, sink.transactions())
    sink.process_batch(recs(2, 3))  # the next interval, open, never checkpointed
    sink.drain()
    settings = admin_settings(bootstrap, {}, request_timeout_ms=5_000, client_id="test-sink")
    resolve(settings, (entry,))  # the reset command's entry, resolved by the member runtime first
    sink.reset(1, data)  # fences both ids: the open interval is aborted
    read = _read(bootstrap, topic)
    assert [r.value for r in read.records] == [b"v0", b"v1"]
    assert (read.open_transactions, read.aborted_records) == ((), 3)
    sink.process_batch(recs(2, 3))  # replayed after the reset, by a fresh producer
    sink.checkpoint(2)
    sink.notify_checkpoint_complete(2)
    assert _values(bootstrap, topic) == [b"v0", b"v1", b"v2", b"v3", b"v4"]


def test_a_new_incarnation_commits_its_predecessors_prepared_transaction(bootstrap, sink_factory):
    topic = create_topic(bootstrap, unique_name("sink"), 2)
    group = unique_name("g")
    old = sink_factory(topic, group=group, partition_of=lambda r: r.offset % 2)
    old.process_batch(recs(0, 4))
    data = old.checkpoint(1)
    entry = Resolve("member-0", 1, old.transactions())
    new = sink_factory(topic, group=group)  # creates no producer: the prepared transaction stays open
    assert [len(_read(bootstrap, topic, p).open_transactions) for p in range(2)] == [1, 1]
    settings = admin_settings(bootstrap, {}, request_timeout_ms=5_000, client_id="test-sink")
    resolve(settings, (entry,))  # the region's resolver, then the operator's own reset
    new.reset(1, data)
    assert sorted(_values(bootstrap, topic, 2)) == [b"v0", b"v1", b"v2", b"v3"]
    new.process_batch(recs(4, 1))
    new.checkpoint(2)
    new.notify_checkpoint_complete(2)
    assert len(_values(bootstrap, topic, 2)) == 5


def test_records_name_their_partition_and_values_are_encoded(bootstrap, sink_factory):
    topic = create_topic(bootstrap, unique_name("sink"), 3)
    sink = sink_factory(topic, partition_of=lambda r: r.value["p"])
    records = [
        Record("in", 0, 0, None, None, {"p": 2, "n": 1}, (("h", "text"), ("b", b"\x00"))),
        Record("in", 0, 1, None, "key", {"p": 0, "n": 2}),
    ]
    sink.process_batch(records)
    sink.checkpoint(1)
    sink.notify_checkpoint_complete(1)
    (first,) = _read(bootstrap, topic, 2).records
    assert (first.key, json.loads(first.value or b""), first.headers) == (
        None,
        {"p": 2, "n": 1},
        (("h", b"text"), ("b", b"\x00")),
    )
    (second,) = _read(bootstrap, topic, 0).records
    assert (second.key, json.loads(second.value or b"")) == (b"key", {"p": 0, "n": 2})
    assert _read(bootstrap, topic, 1).records == ()


def test_a_batch_that_cannot_be_encoded_sends_nothing(bootstrap, sink_factory):
    topic = create_topic(bootstrap, unique_name("sink"), 1)
    sink = sink_factory(topic)
    with pytest.raises(TypeError, match="record in/0@1 cannot be written"):
        sink.process_batch([*recs(0, 1), Record("in", 0, 1, None, None, object())])
    sink.checkpoint(1)
    assert sink.transactions().prepared == ()


@pytest.mark.parametrize(
    ("properties", "match"),
    [
        ({"transactional.id": "x"}, "derives two transactional ids"),
        ({"enable.idempotence": False}, "idempotent"),
        ({"acks": 1}, "in-sync replica"),
        ({"value.serializer": "x"}, "encodes values itself"),
        ({"linger_ms": 5}, "dotted"),
        ({"no.such.setting": 1}, "unknown producer property"),
        ({"transaction.timeout.ms": 0}, "positive"),
    ],
)
def test_producer_properties_are_checked_before_anything_is_built(properties, match):
    with pytest.raises(PropertyError, match=match):
        KafkaSink("out", bootstrap="127.0.0.1:1", group="g", member="m", kafka=properties)


@pytest.mark.parametrize(
    ("properties", "match"),
    [
        ({"transactional.id": "x"}, "derives two transactional ids"),
        ({"acks": 1}, "in-sync replica"),
        ({"no.such.setting": 1}, "No such configuration property"),
        ({"linger.ms": "soon"}, "Invalid value"),
    ],
)
def test_a_librdkafka_sink_s_properties_are_checked_by_librdkafka_before_anything_is_built(properties, match):
    with pytest.raises(PropertyError, match=match):
        KafkaSink("out", bootstrap="127.0.0.1:1", group="g", member="m", kafka=properties, client="librdkafka")


def test_a_librdkafka_setting_is_taken_by_a_librdkafka_sink_only_and_the_client_is_checked():
    own = {"queue.buffering.max.messages": 10}
    sink = KafkaSink("out", bootstrap="127.0.0.1:1", group="g", member="m", kafka=own, client="librdkafka")
    sink.close()  # builds no producer before its first interval
    with pytest.raises(PropertyError, match="unknown producer property"):
        KafkaSink("out", bootstrap="127.0.0.1:1", group="g", member="m", kafka=own)
    with pytest.raises(ValueError, match="unknown client 'java'"):
        KafkaSink("out", bootstrap="127.0.0.1:1", group="g", member="m", client="java")


def test_transactional_ids_are_made_of_checked_names():
    assert transactional_ids("g", "member-0", "sink") == ("crkafka-g-member-0-sink-0", "crkafka-g-member-0-sink-1")
    with pytest.raises(ValueError, match="member"):
        transactional_ids("g", "", "sink")
    with pytest.raises(ValueError, match="longer than"):
        transactional_ids("g" * 1020, "m", "sink")


def test_close_aborts_the_open_interval_and_leaves_a_prepared_one_to_the_region(bootstrap, sink_factory):
    topic = create_topic(bootstrap, unique_name("sink"), 1)
    sink = sink_factory(topic)
    sink.process_batch(recs(0, 2))
    sink.checkpoint(1)
    sink.process_batch(recs(2, 3))
    sink.drain()
    sink.close()
    read = _read(bootstrap, topic)
    assert read.aborted_records == 3  # the open interval
    assert [(t.records, t.first_offset) for t in read.open_transactions] == [(2, 0)]  # checkpoint 1's


def test_a_reset_aborts_a_prepared_transaction_the_region_did_not_name(bootstrap, sink_factory):
    """Checkpoint 1 was prepared but never completed: only the region's entry commits, so the
    sink's own reset aborts it (its records are replayed) whatever its checkpoint data says."""
    topic = create_topic(bootstrap, unique_name("sink"), 1)
    sink = sink_factory(topic)
    sink.process_batch(recs(0, 3))
    data = sink.checkpoint(1)
    assert json.loads(data)["prepared"]
    sink.reset(0, data)
    read = _read(bootstrap, topic)
    assert (read.records, read.open_transactions, read.aborted_records) == ((), (), 3)


def test_two_sinks_of_one_pipeline_never_share_transactional_ids(bootstrap, sink_factory):
    from cr_consumer.runtime import KafkaSource, Pipeline

    group = unique_name("g")
    out, dlq = sink_factory("orders-out", group=group), sink_factory("orders-dlq", group=group)
    assert out.name == "kafka_sink-orders-out"
    assert set(out.transactions().fence).isdisjoint(dlq.transactions().fence)
    Pipeline(KafkaSource(topics=["in"]), dead_letter=dlq).sink(out)  # distinct ids: accepted
    twin = sink_factory("orders-out", group=group)
    with pytest.raises(ValueError, match="transactional id"):
        Pipeline(KafkaSource(topics=["in"])).sink(out).sink(twin)
    with pytest.raises(ValueError, match="transactional id"):
        Pipeline(KafkaSource(topics=["in"]), dead_letter=twin).sink(out)


def test_a_send_that_fails_fails_the_drain_and_the_checkpoint(bootstrap, sink_factory):
    """The sink adds no callback per send: the failure is read from the sends' results at the
    flush. A zombie's sends fail: another process fenced its transactional id."""
    topic = create_topic(bootstrap, unique_name("sink"), 1)
    sink = sink_factory(topic, kafka={"delivery.timeout.ms": 3_000, "request.timeout.ms": 1_000})
    sink.process_batch(recs(0, 2))
    sink.drain()  # the interval's producer exists and its sends succeeded
    settings = admin_settings(bootstrap, {}, request_timeout_ms=5_000, client_id="test-sink")
    resolve(settings, (Resolve("member-0", 0, Transactions((), sink.ids)),))  # the successor's fence
    sink.process_batch(recs(2, 2))
    with pytest.raises(RuntimeError, match="a send failed"):
        sink.drain()
    with pytest.raises(RuntimeError, match="a send failed"):
        sink.checkpoint(1)
    assert sink.transactions().prepared == ()
    assert _values(bootstrap, topic) == []


def test_a_librdkafka_producer_refuses_to_prepare_from_a_batch_that_is_not_its_transaction_s(bootstrap):
    """The producer id and epoch are read back from the transaction's first batch: a position
    holding no transactional batch (a wrong offset, a plain producer's record) fails the prepare,
    and with it the checkpoint, instead of recording ids the region could not end the
    transaction with."""
    from coordinator.kafka.raw_batches import RawReadError
    from coordinator.protocol.region.transactions import TxnPartition
    from cr_consumer.kafka.librdkafka.producer import LibrdkafkaTransactionalProducer
    from cr_consumer.testing.kafka_util import produce

    topic = create_topic(bootstrap, unique_name("sink"), 1)
    produce(bootstrap, topic, [b"plain"], partition=0)
    settings = admin_settings(bootstrap, {}, request_timeout_ms=5_000, client_id="test-sink")
    writer = LibrdkafkaTransactionalProducer(bootstrap, {"max.block.ms": 10_000}, unique_name("tid"), settings)
    try:
        with pytest.raises(RawReadError, match="no transactional batch"):
            writer.prepared((TxnPartition(topic, 0, 0),))
    finally:
        writer.close(5.0)
