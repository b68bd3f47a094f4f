"""Several operators in one group with a real coordinator process: the revocation
rules, one reset per rebalance, reset to a merged checkpoint, reset to initial state."""

from __future__ import annotations

import threading

import pytest

from coordinator.protocol.common.waiting import wait_until
from cr_consumer import StartKind
from cr_consumer.operator.region import RegionPermit
from cr_consumer.testing.kafka_util import create_topic, produce

from support.operator import Members, Region, Sink, committed, make

PARTS = 6


def _start(bootstrap, coordinator, group, topic, name, sink, region):
    op = make(
        bootstrap,
        group,
        name,
        sink,
        topics=[topic],
        coordinator=coordinator.endpoint,
        start_position=StartKind.EARLIEST,
        permit=RegionPermit(),
        region=region,
        max_poll_records=20,
    )
    return op.start()


def _by_partition(records):
    out = {}
    for r in records:
        out.setdefault(r.partition, []).append(r.offset)
    return {p: sorted(v) for p, v in out.items()}


def test_three_members_merged_reset_replays_exactly_and_one_reset_per_rebalance(bootstrap, names, coordinator):
    topic = create_topic(bootstrap, names.topic(), partitions=PARTS)
    group = names.group()
    region = Region()
    sink = Sink()
    members = Members()
    try:
        for i in range(3):
            members.add(_start(bootstrap, coordinator, group, topic, f"m{i}", sink, region))
        # Three joins cause revocations, but nothing was fetched yet: all ignored.
        wait_until(
            lambda: (
                sum(op.metrics()["nAssignedPartitions"] for op in members.ops) == PARTS
                and all(op.metrics()["nAssignedPartitions"] == 2 for op in members.ops)
            ),
            40,
            "balanced group",
        )
        produce(bootstrap, topic, (b"a%d" % i for i in range(300)))
        sink.wait_count(300, 30)
        assert region.resets == []
        assert _by_partition(sink.records) == {p: list(range(50)) for p in range(PARTS)}

        data = members.drain_checkpoint(1)
        assert committed(bootstrap, group, topic) == {p: 50 for p in range(PARTS)}
        produce(bootstrap, topic, (b"b%d" % i for i in range(300)))
        sink.wait_count(600, 30)

        # Reset to checkpoint 1: every member contributes, the merge gives all offsets.
        sink.clear()
        members.reset(1, data)
        sink.wait_count(300, 30)
        assert _by_partition(sink.records) == {p: list(range(50, 100)) for p in range(PARTS)}
        assert all(op.state.value in ("RECORDS_FETCHED", "RESET_COMPLETE") for op in members.ops)

        # A fourth member joins: the three that fetched records revoke; exactly one reset request.
        sink.clear()
        members.add(_start(bootstrap, coordinator, group, topic, "m3", sink, region))
        wait_until(lambda: region.resets, 40, "a reset request after the rebalance")
        wait_until(
            lambda: (
                sum(op.metrics()["nAssignedPartitions"] for op in members.ops) == PARTS
                and all(op.metrics()["nAssignedPartitions"] >= 1 for op in members.ops)
            ),
            40,
            "4 members balanced",
        )
        assert len(region.resets) == 1, region.resets
        # Every member that had fetched records asked (the new one too if a second
        # rebalance round caught it after its first fetch), yet one reset request.
        assert sum(op.metrics()["nResetRequests"] for op in members.ops) >= 3
        assert all(op.state.value == "CR_RESET_PENDING" for op in members.ops[:3])

        # Reset to initial state: every partition back to its control variable (0).
        sink.clear()
        members.reset_initial()
        sink.wait_count(600, 30)
        assert _by_partition(sink.records) == {p: list(range(100)) for p in range(PARTS)}

        # The reset cleared the reset-pending flag: the next rebalance requests a reset again.
        leaving = members.ops.pop()
        leaving.close()
        wait_until(lambda: len(region.resets) == 2, 40, "a second reset request after a member left")
    finally:
        members.close()


class ResettingRegion(Region):
    """Resets every member when asked, the way the member runtime does: each
    gets the merged offsets as a one-member checkpoint."""

    def __init__(self, members: Members, merged, on_blocked) -> None:
        super().__init__()
        self.on_blocked = on_blocked
        self.members = members
        self.merged = merged
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.errors = []

    def request_reset(self, *, force: bool, reason: str) -> None:
        super().request_reset(force=force, reason=reason)
        threading.Thread(target=self._cycle, daemon=True).start()

    def _cycle(self) -> None:
        from cr_consumer.operator.checkpoint import OperatorCheckpoint

        with self.lock:  # requests during a reset do not stack: they run after it
            self._reset_all(OperatorCheckpoint)

    def _reset_all(self, OperatorCheckpoint) -> None:
        try:
            self.members._all(
                lambda op: op.reset(1, OperatorCheckpoint(op.name, (op.name,), self.merged).encode(), 0),
                self.on_blocked,
            )
        except BaseException as exc:  # noqa: BLE001 - asserted by the test
            self.errors.append(exc)
        self.done.set()


@pytest.mark.usefixtures("kafka_client")  # runs with both Kafka clients
def test_member_joins_region_resets_everyone_to_the_merged_offsets(bootstrap, names, coordinator):
    """A new member's partitions start at the merged checkpoint offsets, not at
    the control variables, and nothing after the checkpoint is lost or doubled."""
    from kafka import TopicPartition

    topic = create_topic(bootstrap, names.topic(), partitions=4)
    group = names.group()
    sink = Sink()
    members = Members()
    merged = {TopicPartition(topic, p): 30 for p in range(4)}
    # Tuples submitted before the reset are discarded by the region: count from the reset on.
    region = ResettingRegion(members, merged, on_blocked=sink.clear)
    try:
        for i in range(2):
            members.add(_start(bootstrap, coordinator, group, topic, f"m{i}", sink, region))
        wait_until(lambda: all(op.metrics()["nAssignedPartitions"] == 2 for op in members.ops), 40, "2 members")
        produce(bootstrap, topic, (b"v%d" % i for i in range(400)))
        sink.wait_count(400, 30)
        members.add(_start(bootstrap, coordinator, group, topic, "m2", sink, region))
        assert region.done.wait(60)
        # (A join can take more than one rebalance round: a member that fetched
        # after the first reset asks again; each reset restarts the count.)
        wait_until(
            lambda: _by_partition(list(sink.records)) == {p: list(range(30, 100)) for p in range(4)},
            40,
            "every record after the merged offsets exactly once",
        )
        wait_until(lambda: all(op.metrics()["nAssignedPartitions"] >= 1 for op in members.ops), 30, "3 members")
        assert region.errors == []
        assert _by_partition(list(sink.records)) == {p: list(range(30, 100)) for p in range(4)}
    finally:
        members.close()
