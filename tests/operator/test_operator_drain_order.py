"""Periodic drains never reorder a partition's records (the drill's committed_behind).

A drain that finds records queued (fetched, not yet submitted) leaves them to
be submitted after the drain. They must be submitted before anything fetched
later: otherwise a partition's newer batch is submitted first, the older one
after it, the offset manager ends at the older batch's end, and the drain
commits (and checkpoints) an offset below records already published. This
happened in the remove-member drill when the process thread, idle waiting on
the message queue, was overtaken by the drain taking the queued batches: it
kept waiting on the queue and took the first batch polled after the drain.

The test runs many short drain/checkpoint/resume cycles while records arrive
in small polls (the process thread is often idle waiting for the next one, the
window in which the race happened) and checks after every drain that the
checkpointed offsets are exactly what was submitted, and at the end that every
partition was submitted in order and the committed offsets match. The sink
itself asks for the permit after one to four batches of each resume (as the
runtime would, right after a batch): how many records pass between two drains
does not depend on how soon the test's thread is scheduled, which under load
was late enough for the process thread to submit a large share of the topic in
one resume (a handful of drain cycles in all).
"""

from __future__ import annotations

import time

import pytest

from coordinator.protocol.common.waiting import wait_until
from cr_consumer import StartKind
from cr_consumer.operator.checkpoint import OperatorCheckpoint
from cr_consumer.operator.region import RegionPermit
from cr_consumer.testing.kafka_util import create_topic, produce

from support.operator import Sink, committed, make

PARTITIONS = 4
PER_PARTITION = 1500
#: Bound on the whole cycling phase (a healthy run needs a few seconds).
CYCLE_DEADLINE_S = 60.0


def _next_offsets(sink: Sink) -> dict[int, int]:
    return {p: max(offs) + 1 for (_t, p), offs in sink.offsets().items()}


class BlockingSubmit:
    """``submit_batch`` that blocks the permit (``block(0)``: stops further
    acquisitions, waits for nothing) once ``quota`` batches passed since ``allow()``."""

    def __init__(self, sink: Sink, permit: RegionPermit) -> None:
        self._sink = sink
        self._permit = permit
        self._left = 0

    def allow(self, quota: int) -> None:
        """Called while the permit is blocked, before unblocking it."""
        self._left = quota

    def __call__(self, records) -> None:
        self._sink.batch(records)
        self._left -= 1
        if self._left <= 0:
            self._permit.block(0.0)


@pytest.mark.usefixtures("kafka_client")  # runs with both Kafka clients
def test_periodic_drains_keep_partition_order_and_commit_what_was_submitted(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=PARTITIONS)
    produce(bootstrap, topic, (b"r%d" % i for i in range(PARTITIONS * PER_PARTITION)))
    sink = Sink()
    permit = RegionPermit()
    submit = BlockingSubmit(sink, permit)
    op = make(
        bootstrap,
        names.group(),
        "m0",
        submit_batch=submit,
        topics=[topic],
        start_position=StartKind.EARLIEST,
        permit=permit,
        max_poll_records=10,
    )
    total = PARTITIONS * PER_PARTITION
    permit.block(0.0)  # as the runtime: nothing is submitted before the first resume
    with op:
        wait_until(lambda: len(op.queue) > 0, 30, "the first records fetched")
        seq = 0
        deadline = time.monotonic() + CYCLE_DEADLINE_S
        while len(sink) < total:
            assert time.monotonic() < deadline, f"only {len(sink)} of {total} records after {CYCLE_DEADLINE_S}s"
            n = len(sink)
            # Resume briefly: let a few batches through, then drain again.
            submit.allow(1 + seq % 4)
            permit.unblock()
            wait_until(lambda n=n: len(sink) > n, 10, "records after a resume", interval=0.002)
            assert permit.block(10), "the in-flight batch did not finish"
            op.drain()
            seq += 1
            ckpt = OperatorCheckpoint.decode(op.checkpoint(seq))
            submitted = _next_offsets(sink)
            in_ckpt = {tp.partition: o for tp, o in ckpt.offsets.items() if tp.partition in submitted}
            assert in_ckpt == submitted, f"drain {seq}: checkpointed {in_ckpt}, submitted up to {submitted}"
        offsets = sink.offsets()
        for (_t, p), offs in offsets.items():
            assert offs == list(range(PER_PARTITION)), (
                f"partition {p} submitted out of order or incomplete "
                f"(first break at index {next((i for i, o in enumerate(offs) if o != i), None)})"
            )
        assert committed(bootstrap, op.config.group_id, topic) == {p: PER_PARTITION for p in range(PARTITIONS)}
        assert seq >= 10, f"only {seq} drain cycles: the test did not exercise drains while records arrive"
