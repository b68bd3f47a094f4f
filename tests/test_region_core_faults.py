"""The region controller's state machine under untimely faults (no I/O): a
member silent while the region waits, every way to FAILED carrying its reason,
a dropped member's checkpoint remembered for its return, and triggers that
cannot be served now answered at once."""

from __future__ import annotations

from coordinator.region_state import Phase, RegionConfig, RegionCore


class Harness:
    def __init__(self, doc=None, **cfg):
        self.sent: list[tuple[str, dict]] = []
        self.docs: list[dict] = []
        config = RegionConfig(name="r", **cfg)
        self.core = RegionCore(config, lambda m, b: self.sent.append((m, b)), self.docs.append, doc)

    def take(self):
        out, self.sent = self.sent, []
        return out

    def ack_all(self, cmd, now, **kw):
        for name in sorted(self.core.waiting):
            self.core.ack(name, cmd, kw.get("seq"), kw.get("attempt"), True, None, now,
                          kw.get("offsets", {}).get(name))


def started(n=2, **cfg) -> Harness:
    h = Harness(min_members=n, **cfg)
    for i in range(n):
        h.core.join(f"m{i}", b"id%d" % i, "inc1", 0.0)
    h.ack_all("reset", 0.1, attempt=h.core.attempt)
    assert h.core.phase is Phase.RUNNING
    h.take()
    return h


def checkpoint(h: Harness, now: float, offsets=None) -> int:
    h.core.tick(now)
    assert h.core.phase is Phase.DRAINING
    seq = h.core.seq
    h.ack_all("drain", now + 0.01, seq=seq)
    h.ack_all("checkpoint", now + 0.02, seq=seq, offsets=offsets or {})
    assert h.core.phase is Phase.RUNNING and h.core.last_consistent == seq
    return seq


def test_only_waiting_member_going_silent_keeps_the_region_waiting():
    h = Harness(min_members=2, member_timeout_s=2.0, join_grace_s=60.0)
    h.core.join("m0", b"a", "i", 0.0)
    assert h.core.phase is Phase.WAITING
    h.core.tick(2.5)  # m0 silent past member_timeout_s: dropped, the region still waits
    assert h.core.phase is Phase.WAITING and h.core.members == {}
    h.core.join("m0", b"a", "i2", 3.0)
    h.core.join("m1", b"b", "i", 3.1)
    assert h.core.phase is Phase.RESETTING
    assert {m for m, _ in h.take()} == {"m0", "m1"}


def test_restored_region_whose_rejoined_member_goes_silent_keeps_waiting():
    h = started(2)
    checkpoint(h, 1.1)
    again = Harness(doc=h.docs[-1], min_members=2, member_timeout_s=2.0, join_grace_s=60.0)
    again.core.join("m0", b"a", "inc1", 5.0)
    again.core.tick(7.5)
    assert again.core.phase is Phase.WAITING and again.core.members == {}


def test_every_way_to_failed_says_why():
    # too many consecutive resets
    h = started(1, max_consecutive_resets=1)
    h.core.request_reset("m0", False, "sink raises", 1.0)
    h.ack_all("reset", 1.1, attempt=h.core.attempt)
    h.core.request_reset("m0", False, "sink raises again", 2.0)
    status = h.core.status(2.0)
    assert status["phase"] == "FAILED" and "sink raises again" in status["failed_reason"]
    # an internal error the service turns into FAILED (a tick that raised)
    h = started(2)
    h.take()
    h.core.fail("tick raised ValueError: boom", 3.0)
    status = h.core.status(3.0)
    assert status["phase"] == "FAILED" and status["failed_reason"] == "tick raised ValueError: boom"
    assert h.docs[-1]["failed"] is True and h.docs[-1]["failed_reason"] == "tick raised ValueError: boom"
    assert sorted(m for m, b in h.take() if b == {"cmd": "failed", "reason": "tick raised ValueError: boom"}) \
        == ["m0", "m1"]
    h.core.fail("a second cause", 3.1)  # terminal: the first reason stays
    assert h.core.status(3.1)["failed_reason"] == "tick raised ValueError: boom"
    # restored from a document that lost its reason
    doc = dict(h.docs[-1], failed_reason=None)
    again = Harness(doc=doc)
    assert again.core.phase is Phase.FAILED and again.core.status(4.0)["failed_reason"]
    # a FAILED region tells a joiner why
    reply = again.core.join("m5", b"x", "i", 4.0)
    assert reply["phase"] == "FAILED" and reply["failed_reason"]
