"""The continuity fence inside a real coordinator process, over real ZeroMQ, with scripted members
(no Kafka): a zombie (a member that still processes a partition the broker gave to another member)
makes the checkpoint fail, in the same checkpoint as the new owner or in the next one; the region
resets and then goes on, each partition's offsets continuing without a gap or an overlap."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest

from coordinator.protocol.common.waiting import wait_until

from support import scripted_member
from support.scripted_member import ScriptedMember

REGION = {
    "period_s": 0.3,
    "drain_timeout_s": 3.0,
    "reset_timeout_s": 3.0,
    "member_timeout_s": 3.0,
    "max_consecutive_resets": 3,
    "min_members": 2,
    "join_grace_s": 3.0,
}
#: Records a scripted source processes per partition per interval.
STEP = 5
#: The first checkpoint at which member m1 is given partition t[0] while m0 still processes it.
STEAL_AT = 3

Key = tuple[str, int]


class ScriptedSource:
    """A member's source as the runtime keeps it (cr_consumer/operator/offset_manager.py): per owned
    partition where its interval began and its position; a reset seeks every owned partition to the
    reset's offsets (0 when the region has none); a checkpoint answer ends the interval."""

    def __init__(self, parts: set[Key]) -> None:
        self.parts = set(parts)
        self.start: dict[Key, int] = {}
        self.pos: dict[Key, int] = {}
        self.consistent: dict[Key, int] = {}  # the offsets of the last RESUME or reset
        self.member: ScriptedMember | None = None
        self._applied = 0
        self.idle: set[Key] = set()  # partitions not processed in the next interval
        #: Called at each reset with this source (a zombie learns there that it lost its partition).
        self.on_reset = lambda source: None

    def _sync(self) -> None:
        assert self.member is not None
        seen = self.member.seen  # appended by the member's thread, which calls us
        for cmd in seen[self._applied :]:
            if cmd["cmd"] in ("reset", "reset_to_initial"):
                self.consistent = {(t, p): o for t, p, o in cmd.get("offsets", [])}
                self.on_reset(self)
                for key in self.parts:
                    self.start[key] = self.pos[key] = self.consistent.get(key, 0)
            elif cmd["cmd"] == "resume" and cmd.get("offsets") is not None:
                self.consistent = {(t, p): o for t, p, o in cmd["offsets"]}
        self._applied = len(seen)

    def take(self, key: Key) -> None:
        """Assigned ``key`` without a reset: seeked to the last consistent offset it knows."""
        self.parts.add(key)
        self.start[key] = self.pos[key] = self.consistent.get(key, 0)

    def checkpoint(self, seq: int, before: Any = None) -> list[list[Any]]:
        self._sync()
        if before is not None:
            before(self, seq)
        entries = []
        for key in sorted(self.parts):
            if key not in self.idle:
                self.pos[key] += STEP
            entries.append([key[0], key[1], self.start[key], self.pos[key]])
            self.start[key] = self.pos[key]
        self.idle = set()
        return entries


@pytest.mark.parametrize("zombie_idle_first", [False, True], ids=["same-checkpoint", "next-checkpoint"])
def test_a_zombie_and_the_new_owner_of_its_partition_fail_the_checkpoint(coordinator, names, zombie_idle_first):
    """m0 owns t[0] and t[1], m1 owns t[2]. At checkpoint STEAL_AT the broker has given t[0] to m1
    (seeked to the last consistent offset) while m0 (its commit deferred: no member-side fence)
    still processes it. Same checkpoint: both claim progress on t[0]. Next checkpoint: m0 was idle
    for one interval (an empty claim, which passes: m1's progress is the partition's offset), then
    claims progress from its old start, behind the region's offset. Either way the checkpoint fails
    and the region resets; m0 learns of its loss at the reset (its rebalance listener), and later
    checkpoints continue t[0] from m1's offsets."""
    region = names.group("region")
    lock = threading.Lock()
    sources = {"m0": ScriptedSource({("t", 0), ("t", 1)}), "m1": ScriptedSource({("t", 2)})}
    stolen: dict[str, int] = {}

    def steal(source: ScriptedSource, seq: int) -> None:
        with lock:
            if seq >= STEAL_AT and "seq" not in stolen:
                stolen["seq"] = seq
                source.take(("t", 0))

    def zombie(source: ScriptedSource, seq: int) -> None:
        with lock:
            if zombie_idle_first and seq >= STEAL_AT and "idled" not in stolen:  # the steal's checkpoint
                stolen["idled"] = seq
                source.idle.add(("t", 0))

    def learns(source: ScriptedSource) -> None:
        with lock:
            if "seq" in stolen:
                source.parts.discard(("t", 0))

    sources["m0"].on_reset = learns
    hooks = {"m0": zombie, "m1": steal}
    members = []
    for name in ("m0", "m1"):
        source = sources[name]
        m = ScriptedMember(
            coordinator.endpoint,
            region,
            name,
            REGION,
            checkpoint_claims=lambda seq, s=source, h=hooks[name]: s.checkpoint(seq, h),
        )
        source.member = m
        members.append(m)
    events: list[dict] = []

    def progressed() -> bool:
        reply = scripted_member.region_status(coordinator.endpoint, region)
        events.extend(b for b in (e.to_body() for e in reply.events) if b not in events)
        return "seq" in stolen and (reply.region.last_consistent or 0) >= stolen["seq"] + 3

    try:
        for m in members:
            m.start()
        wait_until(progressed, 30, "checkpoints after the steal")
    finally:
        for m in members:
            m.stop()
    failed = stolen["seq"] + (1 if zombie_idle_first else 0)
    [continuity] = [e for e in events if e["kind"] == "continuity"]
    assert continuity["seq"] == failed
    [violation] = continuity["partitions"]
    assert (violation["topic"], violation["partition"]) == ("t", 0)
    assert violation["kind"] == ("stale_start" if zombie_idle_first else "two_progressed")
    assert [c["member"] for c in violation["claims"]] == ["m0", "m1"]
    m0_claim, m1_claim = violation["claims"]
    if zombie_idle_first:
        assert m0_claim["from"] < violation["expected"] == m1_claim["from"]
    else:
        assert m0_claim["from"] == m1_claim["from"] == violation["expected"]
    assert any(e["kind"] == "reset" and "continuity" in e["why"] for e in events)
    # the failed checkpoint was never announced; t[0]'s offsets go up one interval at a time
    completes = [c for c in members[1].seen if c["cmd"] == "resume" and c.get("complete")]
    assert failed not in [c["complete"] for c in completes]
    t0 = [o for c in completes for t, p, o in c["offsets"] if (t, p) == ("t", 0)]
    assert all(b - a in (0, STEP) for a, b in itertools.pairwise(t0)), t0
    assert t0 == sorted(t0)
    assert t0[-1] > (violation["expected"] or 0)
