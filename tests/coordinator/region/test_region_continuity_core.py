"""The region state machine (no I/O) with the continuity fence: a checkpoint whose answers do not
continue the last consistent one fails (a failure reset, nothing persisted or announced)."""

from __future__ import annotations

from coordinator.protocol.region.commands import CommandKind
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.replies import RegionPhase
from coordinator.region.events import ContinuityRefused, RegionEvent, ResetStarted
from coordinator.region.machine import RegionCore
from coordinator.region.model import ResetKind


class Harness:
    def __init__(self, doc=None, **cfg):
        self.sent: list[tuple[str, dict]] = []
        self.docs: list[dict] = []
        self.events: list[RegionEvent] = []
        self.now = 0.0
        cfg.setdefault("member_timeout_s", 600.0)
        self.core = RegionCore(
            RegionConfig(name="r", **cfg),
            lambda m, c: self.sent.append((m, c.to_body())),
            self.docs.append,
            doc,
            on_event=self.events.append,
        )

    def take(self) -> list[dict]:
        out, self.sent = self.sent, []
        return [b for _, b in out]

    def start(self, n: int = 2) -> None:
        for i in range(n):
            self.core.join(f"m{i}", b"id%d" % i, "inc1", self.now)
        self.answer_reset()

    def answer_reset(self) -> None:
        assert self.core.phase is RegionPhase.RESETTING
        for name in sorted(self.core.waiting):
            self.core.ack(
                name,
                CommandKind.RESET,
                self.core.checkpoints.last_consistent,
                self.core.resets.attempt,
                True,
                None,
                self.now,
            )
        if self.core.phase is RegionPhase.BACKOFF:  # a repeated failure: the RESUME waits (timing.py, the backoff)
            self.now = self.core.wake_at or self.now
            self.core.tick(self.now)
        assert self.core.phase is RegionPhase.RUNNING
        self.take()

    def cycle(self, **offsets: list[list]) -> int:
        """One periodic cycle: drains, then checkpoint answers with ``offsets`` per member."""
        self.now += 1.5
        self.core.tick(self.now)
        assert self.core.phase is RegionPhase.DRAINING
        seq = self.core.cycles.seq
        for name in sorted(self.core.waiting):
            self.core.ack(name, CommandKind.DRAIN, seq, None, True, None, self.now)
        for name in sorted(self.core.waiting):
            self.core.ack(name, CommandKind.CHECKPOINT, seq, None, True, None, self.now, offsets.get(name))
        return seq


def test_a_checkpoint_in_which_two_members_processed_one_partition_fails_and_resets():
    """The deferred-commit zombie m0 and the partition's new owner m1 answer the same checkpoint."""
    h = Harness()
    h.start()
    h.cycle(m0=[["t", 0, 0, 10], ["t", 1, 0, 4]])
    h.take()
    docs = len(h.docs)
    seq = h.cycle(m0=[["t", 0, 10, 17], ["t", 1, 4, 6]], m1=[["t", 0, 10, 14]])
    assert h.core.phase is RegionPhase.RESETTING
    assert h.core.checkpoints.last_consistent == seq - 1
    assert all(d["last_consistent"] == seq - 1 for d in h.docs[docs:])  # nothing of seq persisted
    sent = h.take()
    assert not [b for b in sent if b["cmd"] in ("resume", "retire")]
    resets = [b for b in sent if b["cmd"] == "reset"]
    assert len(resets) == 2
    assert all(b["seq"] == seq - 1 for b in resets)
    assert resets[0]["offsets"] == [["t", 0, 10], ["t", 1, 4]]
    assert h.core.cycles.failures == 1
    assert h.core.resets.consecutive == 1
    [event] = [e for e in h.events if isinstance(e, ContinuityRefused)]
    assert event.seq == seq
    assert event.violations == 1
    assert event.partitions == [
        {
            "kind": "two_progressed",
            "topic": "t",
            "partition": 0,
            "expected": 10,
            "claims": [{"member": "m0", "from": 10, "to": 17}, {"member": "m1", "from": 10, "to": 14}],
            "n_claims": 2,
        }
    ]
    [reset] = [e for e in h.events if isinstance(e, ResetStarted) and "continuity" in e.why]
    assert reset.cause is ResetKind.FAILURE
    assert "t[0]" in reset.why
    # after the reset both start at the last consistent offsets again: the next checkpoint passes
    h.answer_reset()
    h.cycle(m0=[["t", 1, 4, 9]], m1=[["t", 0, 10, 12]])
    assert h.core.phase is RegionPhase.RUNNING
    assert h.core.checkpoints.offsets == [["t", 0, 12], ["t", 1, 9]]


def test_a_stale_start_in_the_checkpoint_after_the_new_owner_completed_one_fails():
    """The new owner m1 completed a checkpoint with t[0] while the zombie m0 had processed nothing of it;
    the zombie's claim in the next checkpoint starts behind the region's offset."""
    h = Harness()
    h.start()
    h.cycle(m0=[["t", 0, 0, 10]])
    h.cycle(m0=[["t", 0, 10, 10]], m1=[["t", 0, 10, 14]])  # the zombie's claim is empty: passes
    assert h.core.phase is RegionPhase.RUNNING
    assert h.core.checkpoints.offsets == [["t", 0, 14]]
    h.take()
    h.cycle(m0=[["t", 0, 10, 17]], m1=[["t", 0, 14, 20]])
    assert h.core.phase is RegionPhase.RESETTING
    assert h.core.checkpoints.offsets == [["t", 0, 14]]
    [event] = [e for e in h.events if isinstance(e, ContinuityRefused)]
    assert event.partitions[0]["kind"] == "stale_start"
    assert event.partitions[0]["expected"] == 14
    assert not [b for b in h.take() if b["cmd"] == "resume"]


def test_an_empty_claim_beside_the_progressing_one_keeps_the_progressing_offset():
    """Before the fence the minimum won: the region went back to 10 and replayed 10..13, which m1
    published (a duplicate). An empty claim (a revoked partition the old owner had not processed)
    is harmless."""
    h = Harness()
    h.start()
    h.cycle(m0=[["t", 0, 0, 10]])
    h.cycle(m0=[["t", 0, 10, 10]], m1=[["t", 0, 10, 14]])
    assert h.core.phase is RegionPhase.RUNNING
    assert h.core.checkpoints.offsets == [["t", 0, 14]]
    assert h.docs[-1]["checkpoint_offsets"] == [["t", 0, 14]]
    assert {"cmd": "resume", "complete": h.core.checkpoints.last_consistent, "offsets": [["t", 0, 14]]} in h.take()


def test_a_partition_moving_through_a_carried_forward_gap_passes():
    """m0 owns t[0]; then nobody (its owner left, carried forward); then m1 from the carried offset."""
    h = Harness()
    h.start()
    h.cycle(m0=[["t", 0, 0, 5], ["t", 1, 0, 3]])
    h.cycle(m1=[["t", 1, 3, 8]])
    assert h.core.checkpoints.offsets == [["t", 0, 5], ["t", 1, 8]]
    h.cycle(m1=[["t", 0, 5, 9], ["t", 1, 8, 8]])
    assert h.core.phase is RegionPhase.RUNNING
    assert h.core.checkpoints.offsets == [["t", 0, 9], ["t", 1, 8]]
    assert not [e for e in h.events if isinstance(e, ContinuityRefused)]


def test_fresh_partitions_pass():
    h = Harness()
    h.start()
    h.cycle(m0=[["t", 0, 3, 5]], m1=[["t", 1, 7, 7]])  # partitions the region has no offset for
    h.cycle(m0=[["t", 0, 5, 6], ["u", 0, 0, 2]], m1=[["t", 1, 7, 9]])
    assert h.core.phase is RegionPhase.RUNNING
    assert h.core.checkpoints.offsets == [["t", 0, 6], ["t", 1, 9], ["u", 0, 2]]


def test_after_a_coordinator_restart_the_stored_offsets_are_the_reference():
    h = Harness()
    h.start()
    h.cycle(m0=[["t", 0, 0, 10]])
    doc = h.docs[-1]
    h2 = Harness(doc=doc)
    h2.now = h.now
    h2.start()  # the members rejoin; the reset rewinds them to checkpoint 1
    assert h2.core.checkpoints.last_consistent == 1
    h2.cycle(m0=[["t", 0, 0, 12]])  # a member that did not seek to the checkpoint's offset
    assert h2.core.phase is RegionPhase.RESETTING
    assert h2.core.checkpoints.last_consistent == 1
    h2.answer_reset()
    h2.cycle(m0=[["t", 0, 10, 12]])
    assert h2.core.phase is RegionPhase.RUNNING
    assert h2.core.checkpoints.offsets == [["t", 0, 12]]


def test_continuity_failures_count_towards_max_consecutive_resets():
    h = Harness(max_consecutive_resets=2)
    h.start()
    h.cycle(m0=[["t", 0, 0, 10]])
    for _ in range(2):
        h.cycle(m0=[["t", 0, 10, 11]], m1=[["t", 0, 10, 12]])
        h.answer_reset()
    h.cycle(m0=[["t", 0, 10, 11]], m1=[["t", 0, 10, 12]])
    assert h.core.phase is RegionPhase.FAILED
    assert "continuity" in (h.core.failed_reason or "")
