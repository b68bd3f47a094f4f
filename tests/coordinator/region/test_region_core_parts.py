"""The parts the region core composes, tested directly (no I/O): the member table,
the running cycle's bookkeeping, the consistent checkpoints, the reset drive and
the status reply."""

from __future__ import annotations

from coordinator.protocol.region.commands import Reset, ResetToInitial
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.kafka_report import KafkaReport
from coordinator.protocol.region.replies import Predecessor
from coordinator.protocol.region.status import RegionStatus
from coordinator.region.checkpoints import ConsistentCheckpoints
from coordinator.region.cycle import CycleRound
from coordinator.region.machine import RegionCore
from coordinator.region.membership import JoinKind, MemberTable
from coordinator.region.model import AbsentCheckpoints, ResetKind
from coordinator.region.reset import ResetDrive, RoundRefused, RoundStart
from coordinator.region.timing import CheckpointPacing


def _admit(table: MemberTable, name: str, incarnation: str, now: float, replace: bool = False):
    return table.admit(
        name,
        name.encode(),
        incarnation,
        now,
        pid=1,
        host="h",
        replace=replace,
        region_failed=False,
        eviction_blocked=lambda: None,
    )


def test_member_table_admits_retries_refuses_and_restarts():
    table = MemberTable("r", member_timeout_s=5.0)
    assert _admit(table, "m0", "i1", 0.0).kind is JoinKind.NEW
    assert _admit(table, "m0", "i1", 1.0).kind is JoinKind.RETRY
    assert table["m0"].last_seen == 1.0
    refused = _admit(table, "m0", "i2", 2.0)
    assert refused.kind is JoinKind.REFUSED
    assert refused.holder is not None
    assert table["m0"].incarnation == "i1"  # a refusal changes nothing
    assert table.heartbeat("m0", b"m0", "i1", 2.5, KafkaReport("k0", 3))
    restart = _admit(table, "m0", "i2", 9.0)  # the holder is silent past member_timeout_s
    assert restart.kind is JoinKind.RESTART
    assert restart.predecessor == Predecessor("i1", 1, "k0")
    assert table["m0"].incarnation == "i2"
    assert table["m0"].predecessor == restart.predecessor


def test_member_table_heartbeats_silence_and_removal():
    table = MemberTable("r", member_timeout_s=5.0)
    _admit(table, "m0", "i1", 0.0)
    _admit(table, "m1", "i1", 0.0)
    assert not table.heartbeat("m0", b"m0", "other", 1.0)  # another incarnation must join again
    assert table.heartbeat("m0", b"m0", "i1", 4.0, None, "kafka.generation must be an int32 or null")
    assert table["m0"].kafka_invalid is not None
    assert table.silent(6.0) == [("m1", 6.0)]
    assert table.remove("m1")
    assert not table.remove("m1")
    assert list(table.status(6.0)) == ["m0"]
    assert table.status(6.0)["m0"].silent_s == 2.0


def test_cycle_round_tracks_answers_joiners_and_leavers():
    cycle = CycleRound()
    cycle.start(["m0", "m1", "m2"], now=10.0, slot=9.5)
    assert cycle.slot == 9.5
    assert cycle.elapsed_s(10.25) == 0.25
    assert cycle.checkpoint_started() == {"m0", "m1", "m2"}
    cycle.checkpoint_answered("m0", [["t", 0, 0, 5]])
    cycle.checkpoint_answered("m1", [["t", 1, 3, 3]])
    assert cycle.member_joined("m2", restarted=True)  # its predecessor had not answered: out of the cycle
    assert not cycle.member_joined("m0", restarted=True)  # its predecessor answered: it stays
    assert cycle.is_joiner("m2")
    assert cycle.has_checkpointed("m0")
    assert not cycle.has_checkpointed("m2")
    cycle.member_left("m0")
    assert cycle.take_joiners() == ["m2"]
    assert cycle.take_joiners() == []
    assert cycle.answered({"m0", "m1", "m2"}) == ["m0", "m1"]
    assert cycle.check([["t", 0, 0]]).ok


def test_consistent_checkpoints_remember_the_own_checkpoint_of_absent_members():
    cps = ConsistentCheckpoints()
    assert cps.own("m0") is None
    assert cps.completed(1, ["m0", "m1"], [["t", 0, 5]], {}) == []
    assert cps.completed(2, ["m0"], [["t", 0, 9]], {}) == []  # m1 is absent from 2: its own stays 1
    assert (cps.last_consistent, cps.members, cps.offsets) == (2, ["m0"], [["t", 0, 9]])
    assert cps.own("m0") == 2
    assert cps.own("m1") == 1
    assert cps.own("m9") is None
    cps.absent = AbsentCheckpoints(dict(cps.absent.seqs), kept=0)  # no absent member is kept
    assert cps.completed(3, ["m2"], [], {}) == [("m1", 1), ("m0", 2)]  # forgotten, oldest first
    assert cps.own("m0") is None
    assert cps.own("m2") == 3


def test_reset_drive_decides_each_rounds_commands_and_its_end():
    config = RegionConfig(name="r", max_consecutive_resets=2, reset_timeout_s=7.0)
    cps = ConsistentCheckpoints()
    drive = ResetDrive(config, CheckpointPacing(config, {}), cps)
    first = drive.start("boot", ResetKind.MEMBERSHIP, ["m1", "m0"], now=1.0, rejoin=True)
    assert isinstance(first, RoundStart)
    assert first.attempt == 1
    assert first.deadline == 8.0
    assert first.commands == ((("m0", ResetToInitial(1, rejoin=True)), ("m1", ResetToInitial(1, rejoin=True))))
    assert first.members == {"m0", "m1"}
    assert first.why == "attempt 1 (membership, consecutive 0, streak 0): boot"
    done = drive.answered(now=1.5, present={"m0", "m1"})
    assert (done.attempt, done.took_s, done.hold_left_s) == (1, 0.5, None)
    end = drive.resume()
    assert (end.attempt, end.took_s, end.held_s) == (1, 0.5, None)
    cps.completed(4, ["m0"], [["t", 0, 5]], {})
    second = drive.start("sink down", ResetKind.FAILURE, ["m0", "m1"], now=2.0, rejoin=False)
    assert isinstance(second, RoundStart)
    assert second.attempt == 2
    assert drive.consecutive == 1
    assert dict(second.commands) == {
        "m0": Reset(4, 2, ["m0"], [["t", 0, 5]], 4),
        "m1": Reset(4, 2, ["m0"], [["t", 0, 5]], None),
    }
    assert isinstance(drive.start("again", ResetKind.FAILURE, ["m0"], now=3.0, rejoin=False), RoundStart)
    refused = drive.start("and again", ResetKind.FAILURE, ["m0"], now=4.0, rejoin=False)
    assert isinstance(refused, RoundRefused)
    assert refused.reason.endswith("last cause: and again")
    assert drive.next_attempt == 4  # a refused round takes no attempt number


def test_status_reply_keeps_its_keys():
    core = RegionCore(RegionConfig(name="r"), lambda m, c: None, lambda d: None)
    body = core.status(0.0).to_body()
    assert sorted(body) == sorted(
        [
            "name",
            "index",
            "phase",
            "mode",
            "period_s",
            "members",
            "last_consistent",
            "seq",
            "waiting_for",
            "reset",
            "checkpoints",
            "failed_cycles",
            "failed_reason",
            "transactions",
            "recent_checkpoints",
            "recent_resets",
        ]
    )
    assert sorted(body["reset"]) == sorted(
        [
            "attempt",
            "consecutive_resets",
            "max_consecutive_resets",
            "resets",
            "backoff_s",
            "backoff_left_s",
            "failure_streak",
        ]
    )
    assert RegionStatus.from_body(body) == core.status(0.0)
