"""Drains of the librdkafka operator under a backlog hand out every record
exactly once, in order, and each checkpoint holds exactly what was submitted.

The operator polls in small batches (``max_poll_records``) while librdkafka has
the backlog fetched ahead in the background: every drain commits while records
fetched ahead are not handed out yet, so a commit or position that counted
them would skip records, and one behind them would repeat them.
"""

from __future__ import annotations

import time

from coordinator.protocol.common.waiting import wait_until
from cr_consumer import ConsumerOperator, StartKind
from cr_consumer.kafka.librdkafka.client import LibrdkafkaClient
from cr_consumer.operator.checkpoint import OperatorCheckpoint
from cr_consumer.operator.region import RegionPermit
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


def _start(bootstrap: str, names) -> tuple[str, Sink, RegionPermit, ConsumerOperator]:
    topic = create_topic(bootstrap, names.topic(), partitions=PARTITIONS)
    produce(bootstrap, topic, (b"r%d" % i for i in range(PARTITIONS * PER_PARTITION)))
    sink = Sink()
    permit = RegionPermit()
    op = make(
        bootstrap,
        names.group(),
        "m0",
        submit_batch=sink.batch,
        topics=[topic],
        client="librdkafka",
        start_position=StartKind.EARLIEST,
        permit=permit,
        max_poll_records=50,
    )
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


def test_drains_under_a_backlog_hand_out_every_record_once(bootstrap, names):
    topic, sink, permit, op = _start(bootstrap, names)
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
                f"(first break at index {next((i for i, o in enumerate(offs) if o != i), None)})"
            )
        assert committed(bootstrap, op.config.group_id, topic) == {p: PER_PARTITION for p in range(PARTITIONS)}
        assert seq >= 5, f"only {seq} drain cycles: the test did not exercise drains under a backlog"
