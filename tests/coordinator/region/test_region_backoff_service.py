"""The backoff between consecutive failure resets inside a real coordinator
process, over real ZeroMQ (scripted members, no Kafka): the RESUME after the
second failure in a row leaves at least ``reset_backoff_s`` after that failure."""

from __future__ import annotations

from coordinator.protocol.common.waiting import wait_until
from coordinator.protocol.region.status import RegionReport

from support import scripted_member
from support.scripted_member import ScriptedMember

BACKOFF_S = 0.6
#: The hold counts from the failing answer's receipt; the ``reset`` event is
#: stamped (wall clock) when the round starts, a few ms later.
STAMP_SLACK_S = 0.05
REGION = {
    "period_s": 0.3,
    "drain_timeout_s": 2.0,
    "reset_timeout_s": 2.0,
    "member_timeout_s": 3.0,
    "max_consecutive_resets": 3,
    "min_members": 1,
    "join_grace_s": 1.0,
    "reset_backoff_s": BACKOFF_S,
    "reset_backoff_max_s": 5.0,
}


def region_reply(endpoint: str, region: str) -> RegionReport:
    return scripted_member.region_status(endpoint, region)


def test_resume_after_the_second_failure_waits_for_the_backoff(coordinator, names):
    region = names.group("backoff")
    m0 = ScriptedMember(coordinator.endpoint, region, "m0", REGION, fail_drain=True).start()
    try:
        held = wait_until(
            lambda: (s := region_reply(coordinator.endpoint, region).region).phase == "BACKOFF" and s,
            20,
            "a backoff hold",
        )
        assert held.reset.backoff_s in (BACKOFF_S, 2 * BACKOFF_S)
        assert 0 < held.reset.backoff_left_s <= held.reset.backoff_s
        reply = wait_until(
            lambda: (r := region_reply(coordinator.endpoint, region)).region.phase == "FAILED" and r,
            30,
            "the region to fail",
        )
        events = [e.to_body() for e in reply.events]
        failures = [e for e in events if e["kind"] == "reset" and e["cause"] == "failure"]
        resumes = {e["attempt"]: e for e in events if e["kind"] == "resume"}
        assert len(failures) == REGION["max_consecutive_resets"]
        first, second, third = failures
        # the first failure resumes at once, the second after BACKOFF_S, the third after twice that
        assert resumes[first["attempt"]]["t"] - first["t"] < BACKOFF_S
        assert resumes[second["attempt"]]["t"] - second["t"] >= BACKOFF_S - STAMP_SLACK_S
        assert resumes[second["attempt"]]["held_s"] == BACKOFF_S
        assert resumes[third["attempt"]]["t"] - third["t"] >= 2 * BACKOFF_S - STAMP_SLACK_S
        # the member heard no RESUME while held: after each reset of a held round the next command is the RESUME
        assert [c["cmd"] for c in m0.seen].count("resume") == 1 + len(failures)  # the start + each round
        assert "sink refused the batch" in (reply.region.failed_reason or "")
    finally:
        m0.stop()
