"""ProcessThread without a broker: a real queue, permit and offset manager,
injected submit/epoch/trigger/failure callables. The tests assert what was
submitted (and in which order), the offsets recorded, and what was dropped."""

from __future__ import annotations

import threading
from collections import namedtuple

import pytest
from kafka import TopicPartition

from coordinator.protocol.common.waiting import wait_until
from cr_consumer.operator.config import MalformedPolicy, OperatorConfig
from cr_consumer.operator.consumer import ConsumerOperator
from cr_consumer.operator.message_queue import Batch, BatchQueue
from cr_consumer.operator.offset_manager import OffsetManager
from cr_consumer.operator.process_thread import Decoder, MalformedRecord, ProcessThread
from cr_consumer.operator.process_thread import per_record as each_record
from cr_consumer.operator.region import RegionPermit

Rec = namedtuple("Rec", "topic partition offset key value")
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
WAIT_S = 5.0
POLL_S = 0.005  # polling a condition another thread makes true


def recs(tp: TopicPartition, first: int, n: int, value=b"v") -> list[Rec]:
    return [Rec(tp.topic, tp.partition, o, None, value) for o in range(first, first + n)]


class Harness:
    def __init__(
        self,
        *,
        per_record: bool = False,
        trigger_count: int | None = None,
        decoder=None,
        submit_error: BaseException | None = None,
        on_trigger=None,
    ) -> None:
        self.queue = BatchQueue(10_000)
        self.permit = RegionPermit()
        self.offsets = OffsetManager()
        self.offsets.set_assignment([T0, T1])
        self.epoch = 0
        self.submitted: list[list[Rec]] = []
        self.triggers = 0
        self.failures: list[BaseException] = []
        self._submit_error = submit_error
        self.thread = ProcessThread(
            "unit",
            queue=self.queue,
            permit=self.permit,
            offsets=self.offsets,
            epoch=lambda: self.epoch,
            submit_batch=each_record(self._submit_one) if per_record else self._submit_batch,
            decoder=decoder,
            trigger_count=trigger_count,
            on_trigger=on_trigger or self._on_trigger,
            on_failure=self.failures.append,
        )

    def _submit_batch(self, records: list[Rec]) -> None:
        if self._submit_error is not None:
            raise self._submit_error
        self.submitted.append(list(records))

    def _submit_one(self, record: Rec) -> None:
        self.submitted.append([record])

    def _on_trigger(self) -> None:
        self.triggers += 1
        self.thread.reset_trigger()  # what a drain does

    def flat(self) -> list[tuple[int, int]]:
        return [(r.partition, r.offset) for batch in self.submitted for r in batch]

    def __enter__(self) -> Harness:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.permit.unblock()
        self.thread.stop(WAIT_S)


def test_batches_are_submitted_in_queue_order_and_offsets_recorded_once_per_batch():
    with Harness() as h:
        h.queue.put_many([Batch(0, T0, recs(T0, 0, 3)), Batch(0, T1, recs(T1, 10, 2)), Batch(0, T0, recs(T0, 3, 2))])
        wait_until(lambda: h.thread.n_submitted == 7, WAIT_S, "seven records submitted", interval=POLL_S)
        assert h.flat() == [(0, 0), (0, 1), (0, 2), (1, 10), (1, 11), (0, 3), (0, 4)]
        assert h.offsets.snapshot() == {T0: 5, T1: 12}


def test_a_batch_s_end_past_its_records_is_recorded_and_a_batch_of_none_moves_the_offset_only():
    """The source's filter of aborted records gives each batch its end: past the aborted records
    and markers it dropped after the last record, or with no record left at all."""
    with Harness(trigger_count=2) as h:
        h.queue.put_many([Batch(0, T0, recs(T0, 0, 3), end=9)])
        wait_until(lambda: h.offsets.get(T0) == 9, WAIT_S, "the batch's end recorded", interval=POLL_S)
        assert h.flat() == [(0, 0), (0, 1), (0, 2)]  # cut at the trigger count, the end on the rest
        h.queue.put_many([Batch(0, T0, [], end=12), Batch(0, T1, recs(T1, 4, 1), end=6)])
        wait_until(lambda: h.offsets.snapshot() == {T0: 12, T1: 6}, WAIT_S, "both ends", interval=POLL_S)
        assert h.flat() == [(0, 0), (0, 1), (0, 2), (1, 4)]
    with pytest.raises(ValueError, match="needs its end"):
        Batch(0, T0, [])


def test_submit_per_record_when_no_batch_callable_is_given():
    with Harness(per_record=True) as h:
        h.queue.put_many([Batch(0, T0, recs(T0, 7, 3))])
        wait_until(lambda: h.thread.n_submitted == 3, WAIT_S, "three records", interval=POLL_S)
        assert [len(b) for b in h.submitted] == [1, 1, 1]
        assert h.offsets.get(T0) == 10


def test_a_batch_of_an_older_epoch_is_dropped_not_submitted():
    with Harness() as h:
        h.epoch = 1
        h.queue.put_many([Batch(0, T0, recs(T0, 0, 4)), Batch(1, T1, recs(T1, 0, 2))])
        wait_until(lambda: h.thread.n_submitted == 2, WAIT_S, "the current batch", interval=POLL_S)
        assert h.flat() == [(1, 0), (1, 1)]
        assert h.thread.n_dropped_stale == 4
        assert h.offsets.snapshot() == {T1: 2}


def test_nothing_is_submitted_while_the_permit_is_blocked_and_the_batch_waits_for_it():
    with Harness() as h:
        assert h.permit.block(WAIT_S)
        h.queue.put_many([Batch(0, T0, recs(T0, 0, 2))])
        wait_until(lambda: len(h.queue) == 0, WAIT_S, "the batch taken from the queue", interval=POLL_S)
        assert h.submitted == []
        assert h.offsets.get(T0) is None
        h.permit.unblock()
        wait_until(lambda: h.thread.n_submitted == 2, WAIT_S, "submitted after the unblock", interval=POLL_S)
        assert h.offsets.get(T0) == 2


def test_a_reset_while_the_batch_waits_for_the_permit_drops_it():
    with Harness() as h:
        assert h.permit.block(WAIT_S)
        h.queue.put_many([Batch(0, T0, recs(T0, 0, 2))])
        wait_until(lambda: len(h.queue) == 0, WAIT_S, "the batch taken from the queue", interval=POLL_S)
        h.epoch = 1  # the reset's new epoch, set while the runtime holds the permit
        h.permit.unblock()
        wait_until(lambda: h.thread.n_dropped_stale == 2, WAIT_S, "the stale batch dropped", interval=POLL_S)
        h.queue.put_many([Batch(1, T0, recs(T0, 5, 1))])
        wait_until(lambda: h.thread.n_submitted == 1, WAIT_S, "the new epoch's batch", interval=POLL_S)
        assert h.flat() == [(0, 5)]
        assert h.offsets.get(T0) == 6


def test_operator_driven_batches_are_cut_at_the_trigger_count():
    with Harness(trigger_count=100) as h:
        h.queue.put_many([Batch(0, T0, recs(T0, 0, 250))])
        wait_until(lambda: h.thread.n_submitted == 250, WAIT_S, "every record", interval=POLL_S)
        assert [len(b) for b in h.submitted] == [100, 100, 50]
        assert h.triggers == 2
        assert h.offsets.get(T0) == 250
        h.queue.put_many([Batch(0, T0, recs(T0, 250, 50))])  # 50 + 50 reaches the count again
        wait_until(lambda: h.thread.n_submitted == 300, WAIT_S, "the next batch", interval=POLL_S)
        assert h.triggers == 3


def test_trigger_waits_until_the_permit_is_released():
    """on_trigger (which waits for a drain) runs after the permit is released,
    so the drain it asks for can block the permit."""
    seen: list[bool] = []
    permit: list[RegionPermit] = []

    def on_trigger():
        seen.append(permit[0].block(WAIT_S))
        permit[0].unblock()

    with Harness(trigger_count=2, on_trigger=on_trigger) as h:
        permit.append(h.permit)
        h.queue.put_many([Batch(0, T0, recs(T0, 0, 2))])
        wait_until(lambda: seen, WAIT_S, "the trigger", interval=POLL_S)
        assert seen == [True]


def test_malformed_records_are_skipped_and_counted():
    def value(v: bytes) -> int:
        return int(v)

    decoder = Decoder(None, value, MalformedPolicy.SKIP)
    with Harness(decoder=decoder) as h:
        batch = [Rec("t", 0, 0, None, b"1"), Rec("t", 0, 1, None, b"x"), Rec("t", 0, 2, None, b"3")]
        h.queue.put_many([Batch(0, T0, batch)])
        wait_until(lambda: h.offsets.get(T0) == 3, WAIT_S, "the batch done", interval=POLL_S)
        assert [r.value for b in h.submitted for r in b] == [1, 3]
        assert decoder.n_dropped == 1


def test_a_malformed_record_under_fail_fails_the_thread_naming_it():
    decoder = Decoder(None, int, MalformedPolicy.FAIL)
    with Harness(decoder=decoder) as h:
        h.queue.put_many([Batch(0, T0, [Rec("t", 0, 41, None, b"x")])])
        wait_until(lambda: h.failures, WAIT_S, "on_failure", interval=POLL_S)
        assert isinstance(h.failures[0], MalformedRecord)
        assert "topic t partition 0 offset 41" in str(h.failures[0])
        assert h.thread.failure is h.failures[0]
        assert h.submitted == []
        assert h.offsets.get(T0) is None


def test_an_exception_from_submit_is_fatal_and_reported():
    error = RuntimeError("sink down")
    with Harness(submit_error=error) as h:
        h.queue.put_many([Batch(0, T0, recs(T0, 0, 1))])
        wait_until(lambda: h.failures, WAIT_S, "on_failure", interval=POLL_S)
        assert h.failures == [error]
        assert h.offsets.get(T0) is None  # the batch's offsets are not recorded
        assert h.permit.block(WAIT_S)  # the permit was released


def test_the_operator_needs_a_submit_callable():
    config = OperatorConfig(bootstrap_servers="127.0.0.1:1", group_id="g", operator_name="op", topics=("t",))
    with pytest.raises(ValueError, match="submit"):
        ConsumerOperator(config)


def test_stop_ends_the_thread_while_it_waits():
    h = Harness()
    h.thread.start()
    h.thread.stop(WAIT_S)
    assert not any(t.name == "cr-process-unit" and t.is_alive() for t in threading.enumerate())
