"""Rebalancer without a broker: a fake consumer with the offsets a broker
would answer, an in-memory control plane, and injected epoch/reset callables.
The tests assert where each partition was seeked, which partitions stayed
paused, what was saved as control variables, the state, and the resets asked for."""

from __future__ import annotations

from cr_consumer.kafka.client import TopicPartition
from cr_consumer.operator.config import OperatorConfig, StartKind
from cr_consumer.operator.control_plane import LocalControl
from cr_consumer.operator.offset_manager import OffsetManager
from cr_consumer.operator.rebalance import Rebalancer
from cr_consumer.operator.restore_hold import StateRestorer
from cr_consumer.operator.seek_targets import SeekTargets
from cr_consumer.operator.states import ClientState, ClientStateMachine

S = ClientState
GROUP = "g"
T0, T1, T2 = (TopicPartition("t", p) for p in range(3))
U0 = TopicPartition("u", 0)


class FakeConsumer:
    """Answers offset lookups from fixed tables; records seeks and pauses."""

    def __init__(self, *, begin: dict, end: dict, committed: dict | None = None, topics=None) -> None:
        self.begin, self.end, self.committed_offsets = begin, end, committed or {}
        self.topics = topics if topics is not None else {"t": 3}
        self.seeks: dict[TopicPartition, int] = {}
        self.paused_set: set[TopicPartition] = set()
        self.assigned: set[TopicPartition] = set()

    # seeks and positions
    def seek(self, tp, offset) -> None:
        self.seeks[tp] = offset

    def position(self, tp, timeout_ms) -> int:
        return self.seeks[tp]

    # offset lookups
    def committed(self, tps, timeout_ms) -> dict:
        return {tp: self.committed_offsets.get(tp) for tp in tps}

    def beginning_offsets(self, tps, timeout_ms) -> dict:
        return {tp: self.begin[tp] for tp in tps}

    def end_offsets(self, tps, timeout_ms) -> dict:
        return {tp: self.end[tp] for tp in tps}

    # subscription and assignment
    def subscribed_partitions(self, timeout_ms) -> set[TopicPartition]:
        return {TopicPartition(topic, p) for topic, n in self.topics.items() for p in range(n)}

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def pause(self, tps) -> None:
        self.paused_set.update(tps)

    def resume(self, tps) -> None:
        self.paused_set.difference_update(tps)


class Gate:
    """The event thread's side (PartitionGate), holding the fake consumer."""

    def __init__(self, consumer: FakeConsumer) -> None:
        self.consumer = consumer
        self.resumed: list[set[TopicPartition]] = []

    def pause_partitions(self, partitions) -> None:
        if partitions:
            self.consumer.pause(partitions)

    def resume_partitions(self, consumer, partitions) -> None:
        self.resumed.append(set(partitions))
        if partitions:
            consumer.resume(partitions)


class Harness:
    def __init__(
        self,
        consumer: FakeConsumer,
        *,
        state=S.SUBSCRIBED,
        standalone=False,
        start=StartKind.EARLIEST,
        control: LocalControl | None = None,
        cooperative: bool = False,
        restorer: StateRestorer | None = None,
    ) -> None:
        props = {"partition.assignment.strategy": "cooperative-sticky"} if cooperative else {}
        self.config = OperatorConfig(
            bootstrap_servers="unused:9092",
            group_id=GROUP,
            operator_name="m0",
            topics=["t"],
            start_position=start,
            consumer_properties=props,
        )
        self.sm = ClientStateMachine("m0")
        self.sm.to(S.SUBSCRIBED)
        if state is not S.SUBSCRIBED:
            self.sm.to(state)
        self.offsets = OffsetManager()
        self.control = control or LocalControl()
        self.targets = SeekTargets(self.control, GROUP)
        self.consumer = consumer
        self.gate = Gate(consumer)
        self.epochs: list[str] = []
        self.resets: list[str] = []
        self.r = Rebalancer(
            "m0",
            self.config,
            sm=self.sm,
            offsets=self.offsets,
            targets=self.targets,
            events=self.gate,
            new_epoch=self.epochs.append,
            request_reset=self.resets.append,
            standalone=standalone,
            restorer=restorer,
        )

    def assign(self, *tps) -> None:
        """What kafka-python does: the listener on its IO thread, then the event thread after the poll."""
        self.consumer.assigned = set(tps)
        self.r.on_assigned(tps)

    def after_poll(self) -> None:
        self.r.after_poll(self.consumer)

    def cooperative_revoke(self, *tps) -> None:
        """kafka-python's incremental step: the assignment shrinks, then the listener names the revoked."""
        self.consumer.assigned -= set(tps)
        self.r.on_revoked(set(tps), lost=False)

    def cooperative_add(self, *tps) -> None:
        """kafka-python's incremental step: the assignment grows, the listener names only the added."""
        self.consumer.assigned |= set(tps)
        self.r.on_assigned(set(tps))


def consumer(**kw) -> FakeConsumer:
    return FakeConsumer(begin={T0: 3, T1: 4, T2: 5, U0: 0}, end={T0: 30, T1: 40, T2: 50, U0: 9}, **kw)


def test_first_assignment_holds_then_seeks_to_the_start_position_and_saves_every_subscribed_partition():
    h = Harness(consumer())
    h.assign(T0, T1)
    assert h.consumer.paused_set == {T0, T1}  # held: nothing fetched before the seek
    assert h.consumer.seeks == {}
    assert h.r.held == {T0, T1}
    assert not h.r.joining
    assert h.r.n_partition_rebalances == 1
    h.after_poll()
    assert h.consumer.seeks == {T0: 3, T1: 4}
    assert h.offsets.snapshot() == {T0: 3, T1: 4}
    assert h.consumer.paused_set == set()
    assert h.r.held == set()
    # the job's first start: every partition of the subscription gets its control variable
    assert h.control.get_initial_offsets(GROUP) == {("t", 0): 3, ("t", 1): 4, ("t", 2): 5}
    assert h.sm.state is S.SUBSCRIBED
    assert h.resets == []


def test_a_partition_first_seen_after_the_first_start_begins_at_its_earliest_offset():
    control = LocalControl()
    control.put_initial_offsets(GROUP, {("t", 0): 20})
    h = Harness(consumer(), start=StartKind.LATEST, control=control)
    h.assign(T0, T1)
    # T0's control variable was not cached yet: held like T1, both seeked after the poll
    h.after_poll()
    assert h.consumer.seeks == {T0: 20, T1: 4}  # T1: earliest, not END (40)
    assert control.get_initial_offsets(GROUP) == {("t", 0): 20, ("t", 1): 4}


def test_known_targets_are_seeked_in_the_listener_and_not_held():
    h = Harness(consumer())
    h.targets.set_merged(7, {T0: 11})
    h.targets.save_control_variables({T1: 12})  # cached once written
    h.assign(T0, T1, T2)
    assert h.consumer.seeks == {T0: 11, T1: 12}
    assert h.r.held == {T2}
    assert h.consumer.paused_set == {T2}
    h.after_poll()
    assert h.consumer.seeks[T2] == 5
    assert h.offsets.snapshot() == {T0: 11, T1: 12, T2: 5}
    assert h.gate.resumed == [{T2}]


def test_revocation_after_records_were_fetched_asks_for_one_reset():
    h = Harness(consumer(), state=S.RECORDS_FETCHED)
    h.r.joining = False
    h.r.on_revoked([T0, T1], lost=False)
    assert h.epochs == ["partitions revoked"]
    assert h.sm.state is S.CR_RESET_PENDING
    assert h.r.joining
    assert h.resets == []  # the request needs the control plane: deferred to the event thread
    h.after_poll()
    h.after_poll()
    assert h.resets == ["revoked 2 partitions"]


def test_revocation_before_any_record_only_drops_the_queue():
    h = Harness(consumer())
    h.r.on_revoked([T0], lost=False)
    h.after_poll()
    assert h.epochs == ["partitions revoked"]
    assert h.sm.state is S.SUBSCRIBED
    assert h.resets == []


def test_lost_partitions_always_ask_for_a_reset():
    h = Harness(consumer())
    h.r.on_revoked([T0], lost=True)
    h.after_poll()
    assert h.epochs == ["partitions lost"]
    assert h.sm.state is S.CR_RESET_PENDING
    assert h.resets == ["lost 1 partitions"]


def test_assignment_while_a_reset_is_pending_is_left_to_the_reset():
    h = Harness(consumer(), state=S.RECORDS_FETCHED)
    h.r.on_revoked([T0], lost=False)
    h.assign(T0, T1)
    h.after_poll()
    assert h.consumer.seeks == {}
    assert h.consumer.paused_set == {T0, T1}  # stay paused until the reset seeks them
    assert h.sm.state is S.CR_RESET_PENDING
    # the reset: clear the held set, seek everything (what handlers._reset_to does on the event thread)
    h.r.clear_held()
    positions = h.r.seek(h.consumer, h.consumer.assignment(), merged={T0: 8, T1: 9})
    assert positions == {T0: 8, T1: 9}
    assert h.offsets.snapshot() == {T0: 8, T1: 9}
    assert h.r.held == set()


def test_standalone_seeks_committed_offsets_first_and_that_is_the_reset():
    h = Harness(consumer(committed={T0: 17}), state=S.RECORDS_FETCHED, standalone=True)
    h.targets.set_merged(1, {T1: 99})  # known in memory, but standalone asks the broker first
    h.r.on_revoked([T0, T1], lost=False)
    h.assign(T0, T1)
    assert h.consumer.seeks == {}  # no fast path
    h.after_poll()
    assert h.consumer.seeks == {T0: 17, T1: 99}
    assert h.sm.state is S.RESET_COMPLETE
    assert h.resets == ["revoked 2 partitions"]  # handed to the operator, which logs it in standalone mode


def test_a_reset_to_the_initial_state_ignores_the_merged_offsets():
    control = LocalControl()
    control.put_initial_offsets(GROUP, {("t", 0): 2, ("t", 1): 4})
    h = Harness(consumer(), control=control)
    positions = h.r.seek(h.consumer, {T0, T1}, merged={T0: 50, T1: 60}, initial_only=True)
    assert positions == {T0: 2, T1: 4}


def test_nothing_happens_after_close():
    h = Harness(consumer())
    h.sm.to(S.CLOSED)
    h.r.on_revoked([T0], lost=True)
    assert h.epochs == []
    assert h.resets == []
    h.assign(T0)
    h.after_poll()
    assert h.consumer.seeks == {}


# -- cooperative (incremental) rebalancing ------------------------------------------


def test_cooperative_revocation_without_records_keeps_the_rest_and_asks_for_no_reset():
    h = Harness(consumer(), cooperative=True)
    h.targets.set_merged(3, {T0: 10, T1: 20, T2: 30})
    h.assign(T0, T1, T2)
    h.after_poll()
    h.cooperative_revoke(T1)
    h.after_poll()
    assert h.offsets.snapshot() == {T0: 10, T2: 30}  # T1 is never reported or committed again
    assert h.epochs == []
    assert h.resets == []
    assert h.sm.state is S.SUBSCRIBED
    assert h.r.joining is False  # it keeps fetching T0 and T2


def test_cooperative_revocation_after_records_were_fetched_drops_the_partition_and_asks_for_one_reset():
    h = Harness(consumer(), cooperative=True)
    h.targets.set_merged(3, {T0: 10, T1: 20, T2: 30})
    h.assign(T0, T1, T2)
    h.sm.to(S.RECORDS_FETCHED)
    h.offsets.update(T1, 25)
    h.cooperative_revoke(T1)
    h.offsets.update(T1, 26)  # a batch the process thread still held: ignored
    h.after_poll()
    assert h.offsets.snapshot() == {T0: 10, T2: 30}
    assert h.epochs == ["partitions revoked"]
    assert h.resets == ["revoked 1 partitions"]
    assert h.sm.state is S.CR_RESET_PENDING


def test_cooperative_assignment_adds_to_the_kept_partitions_at_the_consistent_offsets():
    h = Harness(consumer(), cooperative=True)
    h.targets.set_merged(3, {T0: 10})
    h.assign(T0)
    h.sm.to(S.RECORDS_FETCHED)
    h.offsets.update(T0, 14)
    # the runtime announced checkpoint 4 (T2 unreported there: its offset of checkpoint 3 carried over)
    h.targets.set_merged(4, {T0: 14, T2: 33})
    h.cooperative_add(T2)
    assert h.r.held == {T2}
    assert h.consumer.paused_set == {T2}  # fetched records: seeked after the poll
    h.after_poll()
    assert h.consumer.seeks[T2] == 33
    assert h.offsets.snapshot() == {T0: 14, T2: 33}  # T0 kept its progress
    assert h.consumer.paused_set == set()
    assert h.sm.state is S.RECORDS_FETCHED
    assert h.resets == []


# -- state restore (a pipeline with partition-scoped state) ---------------------------------


class Restorer:
    """The pipeline's side (StateRestorer): restores finish when the test says so."""

    def __init__(self) -> None:
        self.started: list[set[TopicPartition]] = []
        self.pending: set[TopicPartition] = set()
        self.forgotten: set[TopicPartition] = set()

    def restore(self, partitions) -> None:
        self.started.append(set(partitions))
        self.pending |= set(partitions)

    def restoring(self) -> set[TopicPartition]:
        return set(self.pending)

    def forget(self, partitions) -> None:
        self.forgotten |= set(partitions)
        self.pending -= set(partitions)


def restoring_harness(*, cooperative: bool = False) -> tuple[Harness, Restorer]:
    restorer = Restorer()
    return Harness(consumer(), cooperative=cooperative, restorer=restorer), restorer


def test_a_seeked_partition_stays_paused_until_its_state_is_restored_while_the_others_flow():
    h, restorer = restoring_harness()
    h.assign(T0, T1)
    h.after_poll()
    assert restorer.started == [{T0, T1}]
    assert h.consumer.seeks == {T0: 3, T1: 4}
    assert h.consumer.paused_set == {T0, T1}  # seeked, both restoring
    assert h.r.held == set()
    assert h.r.restoring == {T0, T1}
    restorer.pending = {T0}  # T1's restore finished
    h.after_poll()
    assert h.consumer.paused_set == {T0}
    assert h.r.restoring == {T0}
    restorer.pending = set()
    h.after_poll()
    assert h.consumer.paused_set == set()
    assert h.r.restoring == set()


def test_a_partition_seeked_in_the_listener_is_held_for_its_restore_too():
    h, restorer = restoring_harness()
    h.targets.set_merged(3, {T0: 10, T1: 20})
    h.assign(T0, T1)
    assert h.consumer.seeks == {T0: 10, T1: 20}
    assert restorer.started == [{T0, T1}]
    assert h.consumer.paused_set == {T0, T1}
    restorer.pending = set()
    h.after_poll()
    assert h.consumer.paused_set == set()


def test_a_revoked_partition_is_no_longer_held_and_its_restore_forgotten():
    h, restorer = restoring_harness(cooperative=True)
    h.assign(T0, T1)
    h.after_poll()
    h.cooperative_revoke(T1)
    assert restorer.forgotten == {T1}
    assert h.r.restoring == {T0}
    restorer.pending = set()
    h.after_poll()
    assert h.gate.resumed[-1] == {T0}  # never a resume of a partition no longer assigned


def test_a_reset_drops_the_holds_its_seeks_establish_again():
    h, restorer = restoring_harness()
    h.assign(T0, T1)
    h.after_poll()
    assert h.r.restoring == {T0, T1}
    h.r.clear_held()
    assert h.r.restoring == set()
    assert h.r.hold_for_restore(h.consumer, {T0, T1}) == {T0, T1}
    assert restorer.started[-1] == {T0, T1}
    assert h.r.restoring == {T0, T1}
