"""RegionHandlers without a broker: a real event thread around a fake consumer,
the real rebalancer, offset manager and in-memory control plane. The tests
assert what the drain committed, what the checkpoint holds, where a reset
seeked, and the state afterwards."""

from __future__ import annotations

import threading

import pytest

from cr_consumer.kafka.client import CommitRefused, GroupMembership, MemberFenced, TopicPartition
from cr_consumer.operator.checkpoint import OperatorCheckpoint
from cr_consumer.operator.config import OperatorConfig, StartKind
from cr_consumer.operator.control_plane import LocalControl
from cr_consumer.operator.drain_commit import commit_deferred
from cr_consumer.operator.event_thread import EventThread
from cr_consumer.operator.handlers import DrainSignal, RegionHandlers
from cr_consumer.operator.message_queue import BatchQueue
from cr_consumer.operator.metrics import OperatorMetrics
from cr_consumer.operator.offset_manager import OffsetManager
from cr_consumer.operator.process_thread import ProcessThread
from cr_consumer.operator.rebalance import Rebalancer
from cr_consumer.operator.region import ContinuityError, DrainError, RegionPermit
from cr_consumer.operator.seek_targets import SeekTargets
from cr_consumer.operator.states import ClientState, ClientStateMachine

S = ClientState
GROUP = "g"
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
WAIT_S = 5.0


class FakeConsumer:
    """What the event thread, the drain and the reset's seek call."""

    def __init__(self) -> None:
        self.assigned = {T0, T1}
        self.paused_set: set[TopicPartition] = set()
        self.seeks: dict[TopicPartition, int] = {}
        self.commits: list[dict[TopicPartition, int]] = []
        self.commit_error: BaseException | None = None
        self.n_polls = 0
        self.membership: GroupMembership | None = None
        self._idle = threading.Event()

    def poll(self, timeout_ms, max_records):
        self.n_polls += 1
        self._idle.wait(timeout_ms / 1000)
        return {}

    def group(self):
        return self.membership

    def assignment(self):
        return set(self.assigned)

    def paused(self):
        return set(self.paused_set)

    def pause(self, tps):
        self.paused_set.update(tps)

    def resume(self, tps):
        self.paused_set.difference_update(tps)

    def close(self, timeout_ms):
        pass

    def commit(self, offsets, timeout_ms):
        if self.commit_error is not None:
            raise self.commit_error
        self.commits.append(dict(offsets))

    def seek(self, tp, offset):
        self.seeks[tp] = offset

    def position(self, tp, timeout_ms):
        return self.seeks[tp]

    def beginning_offsets(self, tps, timeout_ms):
        return {tp: 100 + tp.partition for tp in tps}

    def subscribed_partitions(self, timeout_ms):
        return {T0, T1}


class Parts:
    def __init__(self, cooperative: bool = False) -> None:
        props = {"partition.assignment.strategy": "cooperative-sticky"} if cooperative else {}
        self.config = OperatorConfig(
            bootstrap_servers="unused:9092",
            group_id=GROUP,
            operator_name="m0",
            topics=["t"],
            start_position=StartKind.EARLIEST,
            drain_timeout_s=WAIT_S,
            reset_timeout_s=WAIT_S,
            consumer_properties=props,
        )
        self.consumer = FakeConsumer()
        self.sm = ClientStateMachine("m0")
        self.sm.to(S.SUBSCRIBED)
        self.permit = RegionPermit()
        self.offsets = OffsetManager()
        self.offsets.set_assignment([T0, T1])
        self.control = LocalControl()
        self.control.register(GROUP, 0, "m0")
        self.targets = SeekTargets(self.control, GROUP)
        self.epochs: list[str] = []
        self.resets: list[str] = []
        self.events = EventThread(
            "m0",
            lambda: self.consumer,
            on_records=lambda c, r: None,
            after_poll=lambda c: None,
            should_pause=lambda: False,
            blocked=lambda: self.permit.blocked,
            held=lambda: self.rebalancer.held,
            joining=lambda: False,
            on_failure=lambda exc: None,
            max_poll_records=500,
        )
        self.rebalancer = Rebalancer(
            "m0",
            self.config,
            sm=self.sm,
            offsets=self.offsets,
            targets=self.targets,
            events=self.events,
            new_epoch=self.epochs.append,
            request_reset=self.resets.append,
            standalone=False,
        )
        process = ProcessThread(
            "m0",
            queue=BatchQueue(10),
            permit=self.permit,
            offsets=self.offsets,
            epoch=lambda: 0,
            submit_batch=lambda records: None,
            decoder=None,
            trigger_count=None,
            on_trigger=lambda: None,
            on_failure=lambda exc: None,
        )
        self.stats = OperatorMetrics("m0", self.offsets, lambda: {})
        self.handlers = RegionHandlers(
            self.config,
            sm=self.sm,
            permit=self.permit,
            events=self.events,
            process=process,
            offsets=self.offsets,
            rebalancer=self.rebalancer,
            targets=self.targets,
            control=self.control,
            stats=self.stats,
            drains=DrainSignal(),
            new_epoch=self.epochs.append,
            check_alive=lambda: None,
            standalone=False,
        )
        self.handlers.set_members(["m0"])


@pytest.fixture
def parts():
    yield from _started(Parts())


@pytest.fixture
def coop():
    yield from _started(Parts(cooperative=True))


def _started(p):
    p.events.start(WAIT_S)
    p.events.set_polling(True, WAIT_S)
    yield p
    p.permit.unblock()
    p.events.stop(WAIT_S)


def test_drain_commits_what_was_submitted_and_the_checkpoint_holds_it(parts):
    parts.offsets.set_many({T0: 0, T1: 0})  # seeked (a reset): the intervals begin here
    parts.offsets.update(T0, 7)
    parts.offsets.update(T1, 3)
    assert parts.permit.block(WAIT_S)  # the runtime holds the permit for the cycle
    parts.handlers.drain()
    assert parts.consumer.commits == [{T0: 7, T1: 3}]
    polls = parts.consumer.n_polls
    parts.events.call(lambda c: None, WAIT_S, "a round trip")
    assert parts.consumer.n_polls == polls  # the drain stopped polling
    parts.offsets.update(T0, 9)  # submitted after the drain: not in this checkpoint
    ckpt = OperatorCheckpoint.decode(parts.handlers.checkpoint(1))
    assert ckpt.offsets == {T0: 7, T1: 3}
    assert ckpt.members == ("m0",)
    assert parts.stats.n_drains == 1


def test_drain_refuses_while_a_reset_is_pending(parts):
    parts.offsets.update(T0, 7)
    parts.sm.to(S.CR_RESET_PENDING, "revoked")
    with pytest.raises(DrainError, match="reset necessary"):
        parts.handlers.drain()
    assert parts.consumer.commits == []


def test_a_failed_commit_fails_the_drain_naming_the_offsets(parts):
    parts.offsets.update(T0, 7)
    parts.consumer.commit_error = RuntimeError("rebalance in progress")
    with pytest.raises(DrainError, match=r"t\[0\]=7"):
        parts.handlers.drain()
    assert parts.stats.n_drains == 0


def test_reset_seeks_to_the_checkpoint_and_keeps_it_for_later_assignments(parts):
    parts.sm.to(S.RECORDS_FETCHED)
    data = OperatorCheckpoint("m0", ("m0",), {T0: 40, T1: 41}).encode()
    parts.handlers.reset(5, data, attempt=0)
    assert parts.consumer.seeks == {T0: 40, T1: 41}
    assert parts.offsets.snapshot() == {T0: 40, T1: 41}
    assert parts.sm.state is S.RESET_COMPLETE
    assert parts.epochs == ["reset to checkpoint 5"]
    assert parts.targets.merged() == {T0: 40, T1: 41}
    assert parts.control.set_reset_pending(GROUP, True) is False  # the reset cleared the flag
    parts.handlers.retire_checkpoint(4)
    assert parts.targets.merged() is not None
    parts.handlers.retire_checkpoint(5)
    assert parts.targets.merged() is None


def test_reset_to_initial_state_seeks_to_the_control_variables_else_the_start_position(parts):
    parts.control.put_initial_offsets(GROUP, {("t", 0): 12})
    parts.targets.set_merged(3, {T0: 50, T1: 51})  # ignored: back to the state before any tuple
    parts.handlers.reset_to_initial_state(attempt=1)
    assert parts.consumer.seeks == {T0: 12, T1: 101}
    assert parts.targets.merged() is None
    assert parts.sm.state is S.RESET_COMPLETE


# -- cooperative rebalancing: the checkpoint, not the Kafka commit, holds the offsets ------


def _stable(generation: int = 3) -> GroupMembership:
    return GroupMembership(member_id="member-a", generation=generation, rebalancing=False)


def _rebalancing(generation: int = 3) -> GroupMembership:
    return GroupMembership(member_id="member-a", generation=generation, rebalancing=True)


def test_cooperative_drain_during_a_rebalance_commits_nothing_and_the_checkpoint_holds_the_offsets(coop):
    coop.rebalancer.joining = False  # assigned
    coop.offsets.set_many({T0: 0, T1: 0})  # seeked at the assignment
    coop.offsets.update(T0, 7)
    coop.offsets.update(T1, 3)
    coop.consumer.membership = _rebalancing()
    assert coop.permit.block(WAIT_S)
    coop.handlers.drain()  # no DrainError: the survivors' output must keep flowing
    assert coop.consumer.commits == []
    assert OperatorCheckpoint.decode(coop.handlers.checkpoint(1)).offsets == {T0: 7, T1: 3}
    coop.consumer.membership = _stable(4)  # once stable, the deferred commit is done after a poll
    coop.consumer.assigned = {T0}  # T1 was revoked meanwhile: not committed by this member
    coop.events.call(coop.handlers.drain_commit.after_poll, WAIT_S, "after poll")
    assert coop.consumer.commits == [{T0: 7}]
    coop.events.call(coop.handlers.drain_commit.after_poll, WAIT_S, "after poll")
    assert coop.consumer.commits == [{T0: 7}]  # once
    coop.offsets.update(T0, 9)
    coop.handlers.drain()  # the next drain in a stable generation commits at once
    assert coop.consumer.commits == [{T0: 7}, {T0: 9, T1: 3}]


def test_cooperative_deferred_commit_is_dropped_by_a_reset(coop):
    coop.rebalancer.joining = False
    coop.offsets.update(T0, 7)
    coop.consumer.membership = _rebalancing()
    coop.handlers.drain()
    coop.handlers.reset(5, OperatorCheckpoint("m0", ("m0",), {T0: 4, T1: 2}).encode(), attempt=0)
    coop.consumer.membership = _stable(4)
    coop.events.call(coop.handlers.drain_commit.after_poll, WAIT_S, "after poll")
    assert coop.consumer.commits == []  # never ahead of the checkpoint the region rewound to


def test_cooperative_drain_survives_a_refused_commit(coop):
    coop.rebalancer.joining = False  # assigned
    coop.offsets.set(T0, 0)  # seeked at the assignment
    coop.offsets.update(T0, 7)
    coop.consumer.membership = _stable()
    coop.consumer.commit_error = CommitRefused("rebalance in progress")
    coop.handlers.drain()
    assert coop.stats.n_drains == 1
    assert OperatorCheckpoint.decode(coop.handlers.checkpoint(1)).offsets == {T0: 7}


def test_cooperative_drain_fails_when_the_group_no_longer_knows_the_consumer(coop):
    """A consumer away longer than its session timeout (paused, stalled) may see
    its partitions given to another member, which processes them from the
    checkpoint too: its drain must fail, or its checkpoint answer publishes the
    same records a second time (seen in a soak: a member paused at a fault
    point, 1,188 records twice)."""
    coop.rebalancer.joining = False
    coop.offsets.update(T0, 7)
    coop.consumer.membership = _stable()
    coop.consumer.commit_error = MemberFenced("UnknownMemberIdError")
    with pytest.raises(DrainError, match="no longer knows this consumer"):
        coop.handlers.drain()
    assert coop.stats.n_drains == 0  # the member answers the drain with a failure: the region resets


def test_cooperative_drain_fails_while_the_consumer_has_no_member_id_but_holds_offsets(coop):
    coop.rebalancer.joining = False
    coop.offsets.update(T0, 7)
    coop.consumer.membership = GroupMembership(member_id=None, generation=None, rebalancing=True)
    with pytest.raises(DrainError, match="not a member of its group"):
        coop.handlers.drain()
    assert coop.consumer.commits == []


def test_a_fenced_deferred_commit_after_a_poll_is_logged_not_raised(coop):
    coop.rebalancer.joining = False
    coop.offsets.update(T0, 7)
    coop.consumer.membership = _rebalancing()
    coop.handlers.drain()  # deferred
    coop.consumer.membership = _stable(4)
    coop.consumer.commit_error = MemberFenced("IllegalGenerationError")
    coop.events.call(coop.handlers.drain_commit.after_poll, WAIT_S, "after poll")  # no exception
    assert coop.consumer.commits == []
    assert coop.events.failure is None


def test_commit_deferred_names_the_reason():
    assert commit_deferred(None, False) == "no group membership yet"
    assert "rebalancing" in commit_deferred(_rebalancing(), False)
    assert commit_deferred(_stable(), True) == "waiting for an assignment"
    assert commit_deferred(_stable(), False) is None


def test_cooperative_close_commits_the_deferred_offsets_once_the_group_is_stable(coop):
    coop.rebalancer.joining = False
    coop.offsets.update(T0, 7)
    coop.consumer.membership = _rebalancing()
    coop.handlers.drain()
    # still rebalancing when the wait ends: nothing committed, the deferral kept
    coop.events.call(lambda c: coop.handlers.drain_commit.at_close(c, 0.2), WAIT_S, "close")
    assert coop.consumer.commits == []
    assert coop.handlers.drain_commit.pending
    threading.Timer(0.2, lambda: setattr(coop.consumer, "membership", _stable(4))).start()
    coop.events.call(lambda c: coop.handlers.drain_commit.at_close(c, WAIT_S), WAIT_S * 2, "close")
    assert coop.consumer.commits == [{T0: 7}]
    assert not coop.handlers.drain_commit.pending


# -- the checkpoint answer's intervals (the continuity fence, coordinator/region/continuity.py) ------


def _cycle(p: Parts, seq: int) -> OperatorCheckpoint:
    assert p.permit.block(WAIT_S)
    p.handlers.drain()
    ckpt = OperatorCheckpoint.decode(p.handlers.checkpoint(seq))
    p.permit.unblock()  # the RESUME
    return ckpt


def test_the_checkpoint_says_where_each_interval_began_and_the_next_one_starts_where_it_ended(parts):
    parts.handlers.reset(5, OperatorCheckpoint("m0", ("m0",), {T0: 10, T1: 20}).encode(), attempt=1)
    parts.offsets.update(T0, 14)
    first = _cycle(parts, 6)
    assert first.claims() == [["t", 0, 10, 14], ["t", 1, 20, 20]]
    parts.offsets.update(T1, 25)
    second = _cycle(parts, 7)
    assert second.claims() == [["t", 0, 14, 14], ["t", 1, 20, 25]]


def test_a_reset_starts_every_interval_at_the_reset_offsets(parts):
    parts.offsets.set_many({T0: 0, T1: 0})
    parts.offsets.update(T0, 9)
    _cycle(parts, 1)
    parts.offsets.update(T0, 12)  # processed, then the cycle failed: the region resets to checkpoint 1
    parts.handlers.reset(1, OperatorCheckpoint("m0", ("m0",), {T0: 9, T1: 0}).encode(), attempt=2)
    parts.offsets.update(T0, 11)
    assert _cycle(parts, 2).claims() == [["t", 0, 9, 11], ["t", 1, 0, 0]]


def test_a_partition_assigned_between_the_drain_and_the_checkpoint_starts_at_its_seek(parts):
    parts.offsets.set_assignment([T0])
    parts.offsets.set(T0, 5)
    assert parts.permit.block(WAIT_S)
    parts.handlers.drain()
    parts.offsets.set_assignment([T0, T1])  # assigned after the drain: not in this checkpoint
    parts.offsets.set(T1, 40)  # seeked to the last consistent offset it knows
    assert OperatorCheckpoint.decode(parts.handlers.checkpoint(1)).claims() == [["t", 0, 5, 5]]
    parts.permit.unblock()
    parts.offsets.update(T1, 44)
    assert _cycle(parts, 2).claims() == [["t", 0, 5, 5], ["t", 1, 40, 44]]


def test_records_submitted_from_a_position_no_seek_set_fail_the_checkpoint(parts):
    parts.offsets.set(T1, 3)
    parts.offsets.update(T0, 7)  # T0 was never seeked
    assert parts.permit.block(WAIT_S)
    parts.handlers.drain()
    with pytest.raises(ContinuityError, match="no seek set"):
        parts.handlers.checkpoint(1)


def test_a_partition_assigned_without_a_reset_claims_from_the_last_consistent_offset(coop):
    """Cooperative: T1 is added while the region runs; the rebalancer seeks it to the offset of the
    last RESUME (set_consistent_offsets), which its first claim starts from."""
    coop.rebalancer.joining = False
    coop.offsets.set_assignment([T0])
    coop.offsets.set(T0, 5)
    coop.targets.set_merged(3, {T0: 5, T1: 40})  # the RESUME of checkpoint 3
    coop.consumer.membership = _stable()
    coop.events.call(lambda c: coop.rebalancer.on_assigned({T1}), WAIT_S, "the listener, inside a poll")
    assert coop.consumer.seeks[T1] == 40
    coop.offsets.update(T1, 46)
    assert _cycle(coop, 4).claims() == [["t", 0, 5, 5], ["t", 1, 40, 46]]
