"""The librdkafka adapter's fetch hold (``cr.fetch.hold``): drains under a
backlog hand out every record exactly once, in order.

A hold pauses the assigned partitions around the drain's commit; librdkafka
then drops what it fetched ahead and, after the resume, fetches again from the
position the operator consumed to. The operator polls in small batches
(``max_poll_records``) while librdkafka has the whole backlog fetched ahead, so
every drain drops a queue of records not handed out yet: a wrong resume
position would skip or repeat them.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
from kafka_clients.test_client_contract import CLOSE_MS, JOIN_S, Recorder, props

from coordinator.common.waiting import wait_until
from cr_consumer import ConsumerOperator, StartPosition
from cr_consumer.kafka.client import ClientKind, ClientTimeout, KafkaClientError, KafkaRecord, TopicPartition
from cr_consumer.kafka.factory import make_client
from cr_consumer.kafka.librdkafka_client import LibrdkafkaClient
from cr_consumer.operator.checkpoint import OperatorCheckpoint
from cr_consumer.operator.region import RegionPermit
from cr_consumer.testing.broker import EmbeddedBroker
from cr_consumer.testing.kafka_util import create_topic, produce

from support.operator import Sink, committed, make

PARTITIONS = 4
PER_PARTITION = 10000
#: Bound on the cycling phase (a healthy run needs a few seconds).
CYCLE_DEADLINE_S = 60.0
WAIT_S = 10.0


def _next_offsets(sink: Sink) -> dict[int, int]:
    return {p: max(offs) + 1 for (_t, p), offs in sink.offsets().items()}


def _client(op: ConsumerOperator) -> LibrdkafkaClient:
    client = op.events.consumer
    assert isinstance(client, LibrdkafkaClient)
    return client


def _start(bootstrap: str, names, hold: str) -> tuple[str, Sink, RegionPermit, ConsumerOperator]:
    topic = create_topic(bootstrap, names.topic(), partitions=PARTITIONS)
    produce(bootstrap, topic, (b"r%d" % i for i in range(PARTITIONS * PER_PARTITION)))
    sink = Sink()
    permit = RegionPermit()
    op = make(bootstrap, names.group(), "m0", submit_batch=sink.batch, topics=[topic], client="librdkafka",
              start_position=StartPosition.BEGINNING, permit=permit, max_poll_records=50,
              consumer_properties={"cr.fetch.hold": hold})
    permit.block(0.0)  # as the runtime: nothing is submitted before the first resume
    return topic, sink, permit, op


def _cycle(op: ConsumerOperator, sink: Sink, permit: RegionPermit, seq: int) -> None:
    """Resume until a few batches went through, then drain and checkpoint; the
    checkpoint holds exactly what was submitted."""
    permit.unblock()
    n = len(sink)
    wait_until(lambda: len(sink) > n, WAIT_S, "records after a resume", interval=0.002)
    assert permit.block(WAIT_S), "the in-flight batch did not finish"
    op.drain()
    ckpt = OperatorCheckpoint.decode(op.checkpoint(seq))
    submitted = _next_offsets(sink)
    in_ckpt = {tp.partition: o for tp, o in ckpt.offsets.items() if tp.partition in submitted}
    assert in_ckpt == submitted, f"drain {seq}: checkpointed {in_ckpt}, submitted up to {submitted}"
    assert _client(op).fetch_held == frozenset(), "the hold outlived the drain's commit"


@pytest.mark.parametrize("hold", ["commit", "drain"])
def test_drains_under_a_backlog_hand_out_every_record_once(bootstrap, names, hold):
    topic, sink, permit, op = _start(bootstrap, names, hold)
    total = PARTITIONS * PER_PARTITION
    with op:
        wait_until(lambda: len(op.queue) > 0, 30, "the first records fetched")
        seq = 0
        deadline = time.monotonic() + CYCLE_DEADLINE_S
        while len(sink) < total:
            assert time.monotonic() < deadline, f"only {len(sink)} of {total} records after {CYCLE_DEADLINE_S}s"
            seq += 1
            _cycle(op, sink, permit, seq)
        for (_t, p), offs in sink.offsets().items():
            assert offs == list(range(PER_PARTITION)), (
                f"partition {p} skipped or repeated records "
                f"(first break at index {next((i for i, o in enumerate(offs) if o != i), None)})")
        assert committed(bootstrap, op.config.group_id, topic) == {p: PER_PARTITION for p in range(PARTITIONS)}
        assert seq >= 5, f"only {seq} drain cycles: the test did not exercise holds under a backlog"


def test_a_reset_during_the_hold_replays_from_the_checkpoint(bootstrap, names):
    """``drain``: the hold starts as the permit is blocked; a reset's seeks of
    held partitions apply when the hold ends (the permit given back), and the
    records after the checkpoint are handed out again, each once, in order."""
    topic, sink, permit, op = _start(bootstrap, names, "drain")
    with op:
        wait_until(lambda: len(op.queue) > 0, 30, "the first records fetched")
        for seq in (1, 2, 3):
            _cycle(op, sink, permit, seq)
        ckpt = op.checkpoint(4)  # the drain of cycle 3: what the reset returns to
        at_ckpt = {tp.partition: o for tp, o in OperatorCheckpoint.decode(ckpt).offsets.items()}
        permit.unblock()
        n = len(sink)
        wait_until(lambda: len(sink) > n + 200, WAIT_S, "records past the checkpoint", interval=0.002)
        assert permit.block(WAIT_S)
        client = _client(op)
        wait_until(lambda: client.fetch_held == client.assignment(), WAIT_S, "the hold as the permit is blocked",
                   interval=0.002)
        before = sink.offsets()
        op.reset(4, ckpt)
        permit.unblock()
        total_after = sum(PER_PARTITION - at_ckpt.get(p, 0) for p in range(PARTITIONS))
        sink.wait_count(sum(len(v) for v in before.values()) + total_after, 60)
        assert client.fetch_held == frozenset()
        for (t, p), offs in sink.offsets().items():
            replay, start = offs[len(before.get((t, p), [])):], at_ckpt.get(p, 0)
            assert replay == list(range(start, PER_PARTITION)), (
                f"partition {p} after the reset: starts at {replay[:1]}, {len(replay)} records "
                f"(expected {start}..{PER_PARTITION - 1})")


@pytest.fixture
def own_broker(tmp_path) -> Iterator[EmbeddedBroker]:
    """A broker of this test's own, which it stops (SIGSTOP) and continues."""
    with EmbeddedBroker(log_path=tmp_path / "tansu.log") as own:
        try:
            yield own
        finally:
            if own.pid is not None:
                os.kill(own.pid, signal.SIGCONT)


def _poll(client: LibrdkafkaClient, want: int, max_records: int) -> list[KafkaRecord]:
    out: list[KafkaRecord] = []
    end = time.monotonic() + JOIN_S
    while len(out) < want:
        assert time.monotonic() < end, f"only {len(out)} of {want} records within {JOIN_S}s"
        for records in client.poll(100, min(max_records, want - len(out))).values():
            out.extend(records)
    return out


def test_a_commit_without_an_answer_fails_and_then_every_poll(own_broker, names):
    """The commit's outcome is unknown (the broker stopped): ClientTimeout, as
    without the hold. The commit is still outstanding in librdkafka, whose
    resume would wait for it (a stopped broker held it for minutes), so the
    hold is not ended on the polling thread: every later poll fails, naming why,
    and none returns a record; the client still closes."""
    topic = create_topic(own_broker.bootstrap, names.topic(), partitions=1)
    produce(own_broker.bootstrap, topic, [b"r%03d" % i for i in range(300)])
    tp = TopicPartition(topic, 0)
    client = make_client(ClientKind.LIBRDKAFKA, {**props(own_broker.bootstrap, names.group()),
                                                 "cr.fetch.hold": "commit"})
    assert isinstance(client, LibrdkafkaClient)
    try:
        client.subscribe([topic], listener=Recorder())
        _poll(client, 100, max_records=20)  # librdkafka has fetched the rest ahead
        assert own_broker.pid is not None
        os.kill(own_broker.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(ClientTimeout):
            client.commit({tp: 100}, 500)
        assert time.monotonic() - started < 5, "the commit's caller waited past the commit's bound"
        client.hold_fetch()  # the next drain: nothing is paused or resumed now
        client.release_fetch()
        for _ in range(3):
            with pytest.raises(KafkaClientError, match="the fetch hold .* cannot end"):
                client.poll(100, 500)
    finally:
        assert own_broker.pid is not None
        os.kill(own_broker.pid, signal.SIGCONT)
        client.close(CLOSE_MS)
