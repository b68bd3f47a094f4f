"""A model-based test (hypothesis stateful) of the partitioned aggregate on the real broker:
random interleavings of batches, completed checkpoints, checkpoints prepared and never completed,
resets, a member killed between its checkpoint answer and the commit (the region commits for
it), the partitions moving to another member while the old owner holds a prepared checkpoint
that never completes (a zombie, its ids fenced by the region), with bases written as often as
possible. Every emitted state equals a sequential run over the records the region kept: those up
to the last completed checkpoint, then the ones since.

Driven as the member runtime drives an operator (``runtime/member/executor.py``): the region's
resolver (``coordinator/kafka/transactions.resolve``) commits a completed checkpoint's prepared
transactions and fences every id of a member that is gone before the new owner resets."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from coordinator.kafka.transactions import resolve
from coordinator.protocol.region.transactions import Resolve, Transactions
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.runtime.pipeline.partitioned_aggregate import PartitionedAggregate
from cr_consumer.runtime.pipeline.records import Record
from cr_consumer.testing.kafka_util import create_topic, unique_name

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PARTITIONS = 2
KEYS = ("a", "b", "c")
RUNS = itertools.count()


class PartitionedAggregateMachine(RuleBasedStateMachine):
    #: The cluster, set by the test (a fixture's).
    bootstrap = ""

    def __init__(self) -> None:
        super().__init__()
        bootstrap = self.bootstrap
        run = next(RUNS)
        self.topic = create_topic(bootstrap, unique_name(f"model-{run}"), partitions=PARTITIONS)
        self.group = unique_name(f"model-group-{run}")
        self.members = itertools.count()
        self.op = self._member()
        self.op.reset_to_initial_state()
        self.seq = 0  # the last checkpoint started
        self.completed = 0  # the last checkpoint completed
        self.kept: dict[int, dict[str, int]] = {p: {} for p in range(PARTITIONS)}  # state at `completed`
        self.live: dict[int, dict[str, int]] = {p: {} for p in range(PARTITIONS)}
        self.offsets = [0] * PARTITIONS

    def _member(self, name: str | None = None) -> PartitionedAggregate:
        """A member process with no local state: ``name`` (a restart), else a new member."""
        self.name = name or f"m{next(self.members)}"
        op = PartitionedAggregate(
            lambda r: r.key,
            lambda s, r: s + r.value,
            0,
            topic=self.topic,
            bootstrap=self.bootstrap,
            group=self.group,
            member=self.name,
            # a base (and its pointer) as soon as a partition's changes outnumber its keys: the
            # restores below read from bases of every kind (committed or not, pointed to or not)
            materialize_after=1,
        )
        return op

    def _resolver(self) -> dict:
        return admin_settings(self.bootstrap, {}, request_timeout_ms=10_000, client_id="test-model-resolve")

    def _back_to_completed(self) -> None:
        self.live = {p: dict(t) for p, t in self.kept.items()}

    @rule(partition=st.integers(0, PARTITIONS - 1), keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=4))
    def batch(self, partition: int, keys: list[str]) -> None:
        first = self.offsets[partition]
        records = [Record(self.topic, partition, first + i, key=k, value=i + 1) for i, k in enumerate(keys)]
        self.offsets[partition] += len(keys)
        expected = []
        table = self.live[partition]
        for r in records:
            table[r.key] = table.get(r.key, 0) + r.value
            expected.append((r.key, table[r.key]))
        assert [(r.key, r.value) for r in self.op.process_batch(records)] == expected

    @rule()
    def checkpoint_completes(self) -> None:
        self.seq += 1
        self.op.drain()
        self.op.checkpoint(self.seq)
        self.op.notify_checkpoint_complete(self.seq)
        self.completed = self.seq
        self.kept = {p: dict(t) for p, t in self.live.items()}

    @rule()
    def checkpoint_fails_and_the_region_resets(self) -> None:
        self.seq += 1
        self.op.drain()
        self.op.checkpoint(self.seq)  # prepared, never completed
        self.op.reset(self.completed, b"")
        self._back_to_completed()

    @rule()
    def reset_mid_interval(self) -> None:
        self.op.reset(self.completed, b"")
        self._back_to_completed()

    @rule()
    def killed_after_its_answer_and_restarted(self) -> None:
        """The checkpoint completes while the member is dead: the region's reset commits the
        prepared transaction, then the restarted member (same name, no local state) resets."""
        self.seq += 1
        self.op.checkpoint(self.seq)
        resolve(self._resolver(), (Resolve(self.name, self.seq, self.op.transactions()),))
        self.completed = self.seq
        self.kept = {p: dict(t) for p, t in self.live.items()}
        self.op = self._member(self.name)
        self.op.reset(self.completed, b"")

    @rule()
    def partitions_move_and_the_old_owner_is_a_zombie(self) -> None:
        """The owner prepares a checkpoint and stops answering before the checkpoint completes;
        the region fences its ids and another member takes its partitions: what the zombie
        prepared is never restored."""
        self.seq += 1
        zombie = self.op
        zombie.checkpoint(self.seq)
        ids = zombie.transactions().fence
        resolve(self._resolver(), (Resolve("zombie", self.completed, Transactions((), ids)),))
        self.op = self._member()
        self.op.reset(self.completed, b"")
        self._back_to_completed()
        zombie.close()

    @precondition(lambda self: self.completed > 0)
    @rule()
    def every_table_is_restored_by_a_fresh_member(self) -> None:
        self.op.close()
        self.op = self._member()
        self.op.reset(self.completed, b"")
        self._back_to_completed()

    @invariant()
    def every_table_equals_the_model(self) -> None:
        """After every step, every partition's table (restored from the changelog after a reset)."""
        for partition in range(PARTITIONS):
            assert self.op.store.table(partition) == self.live[partition], partition

    def teardown(self) -> None:
        self.op.close()


def test_emitted_states_equal_a_sequential_run_over_the_kept_records(bootstrap, monkeypatch):
    monkeypatch.setattr(PartitionedAggregateMachine, "bootstrap", bootstrap)
    run_state_machine_as_test(
        PartitionedAggregateMachine,
        settings=settings(
            max_examples=10,
            stateful_step_count=15,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
