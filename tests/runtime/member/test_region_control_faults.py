"""The member's control channel against a real coordinator process over real
ZeroMQ (no Kafka): a trigger the region cannot serve now is answered at once,
and a reset request made while the channel is not joined is held and sent once
it is joined again, so no source is left waiting in CR_RESET_PENDING."""

from __future__ import annotations

import os
import queue
import signal
import time

from coordinator.protocol.common.waiting import wait_until
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.replies import RegionTriggerReply, TriggerAnswer
from cr_consumer.runtime.member.control import ControlChannel
from cr_consumer.runtime.member.coordinator_link import LOST_AFTER_S

from support.scripted_member import ScriptedMember, region_status

REGION = {
    "period_s": 0.3,
    "drain_timeout_s": 20.0,
    "reset_timeout_s": 20.0,
    "member_timeout_s": 30.0,
    "max_consecutive_resets": 5,
    "min_members": 1,
    "join_grace_s": 1.0,
}


def test_trigger_while_resetting_is_answered_not_now_at_once(coordinator, names):
    region = names.group("region")
    config = {**REGION, "mode": "operator_driven", "min_members": 2}
    m0 = ScriptedMember(coordinator.endpoint, region, "m0", config).start()
    m1 = ScriptedMember(coordinator.endpoint, region, "m1", config, answer_resets=False).start()  # stuck in its reset
    try:
        wait_until(lambda: region_status(coordinator.endpoint, region).region.phase == "RESETTING", 10, "RESETTING")
        # the answer itself, not_now (trigger() also says False for no answer within
        # its 2 s), long before the drain timeout (a fixed second bounded the scheduling
        # of two processes on a loaded machine more than the controller's answer)
        t0 = time.monotonic()
        reply = m0.channel.trigger_reply(config["drain_timeout_s"])
        assert isinstance(reply, RegionTriggerReply), reply
        assert reply.trigger is TriggerAnswer.NOT_NOW, reply
        assert time.monotonic() - t0 < config["drain_timeout_s"] / 2
        assert m0.channel.trigger() is False
    finally:
        m0.stop()
        m1.stop()


def test_trigger_while_running_starts_a_cycle(coordinator, names):
    region = names.group("region")
    m0 = ScriptedMember(coordinator.endpoint, region, "m0", {**REGION, "mode": "operator_driven"}).start()
    try:
        wait_until(lambda: region_status(coordinator.endpoint, region).region.phase == "RUNNING", 10, "RUNNING")
        assert m0.channel.trigger() is True
        wait_until(
            lambda: (region_status(coordinator.endpoint, region).region.last_consistent or 0) >= 1,
            10,
            "a checkpoint",
        )
    finally:
        m0.stop()


def test_reset_request_made_while_not_joined_is_sent_once_joined_again(coordinator, names):
    """The coordinator is paused past LOST_AFTER_S: the channel counts itself not
    joined; a forced reset request made then (a revocation) must reach the
    controller after the pause, although the rejoin (same incarnation) does not
    reset the region by itself."""
    region = names.group("region")
    m0 = ScriptedMember(coordinator.endpoint, region, "m0", {**REGION, "mode": "operator_driven"}).start()
    try:
        wait_until(lambda: region_status(coordinator.endpoint, region).region.phase == "RUNNING", 10, "RUNNING")
        resets_before = region_status(coordinator.endpoint, region).region.reset.resets
        os.kill(coordinator.pid, signal.SIGSTOP)
        try:
            wait_until(lambda: not m0.channel.joined.is_set(), LOST_AFTER_S + 5, "the channel to count itself lost")
            m0.channel.request_reset(force=True, reason="m0: revoked 2 partitions (test)")
            time.sleep(0.3)  # the I/O thread has taken it from its queue while not joined
        finally:
            os.kill(coordinator.pid, signal.SIGCONT)
        wait_until(lambda: m0.channel.joined.is_set(), 10, "the rejoin")
        reply = wait_until(
            lambda: [
                e
                for e in region_status(coordinator.endpoint, region).events
                if e.kind == "reset" and "revoked 2 partitions (test)" in str(e.fields["why"])
            ],
            10,
            "the held reset request to reach the controller",
        )
        assert reply
        assert region_status(coordinator.endpoint, region).region.reset.resets == resets_before + 1
    finally:
        m0.stop()


def test_unusable_stored_region_document_fails_the_region_with_its_reason(tmp_path):
    """A region document the coordinator cannot read (a newer version, a damaged
    field) must not start the region afresh (that forgets its last consistent
    checkpoint and repeats published output): FAILED, saying why, to status
    and to a joining member."""
    from coordinator.launcher import CoordinatorProcess
    from coordinator.store.state_store import StateStore

    state = tmp_path / "state"
    store = StateStore(state)
    store.load()
    store.put_document("region", "r1", {"version": 99, "config": {"name": "r1"}, "last_consistent": 7})
    store.sync()
    store.close()
    coordinator = CoordinatorProcess(state)
    coordinator.start()
    try:
        region = region_status(coordinator.endpoint, "r1").region
        assert region.phase == "FAILED"
        assert "unusable" in (region.failed_reason or "")
        seen: queue.SimpleQueue = queue.SimpleQueue()
        channel = ControlChannel(
            coordinator.endpoint,
            "r1",
            "m0",
            "inc-m0",
            RegionConfig.from_dict({**REGION, "name": "r1"}),
            lambda c: seen.put(c.to_body()),
        )
        channel.start()
        try:
            cmd = seen.get(timeout=10)
            assert cmd["cmd"] == "failed"
            assert "unusable" in cmd["reason"]
        finally:
            channel.stop()
    finally:
        coordinator.terminate()
    again = StateStore(state)
    again.load()
    assert again.documents("region")["r1"]["version"] == 99  # kept as it was
    again.close()


def test_leave_reply_names_the_leavers_own_checkpoint(coordinator, names):
    region = names.group("region")
    m0 = ScriptedMember(coordinator.endpoint, region, "m0", REGION).start()
    try:
        wait_until(
            lambda: (region_status(coordinator.endpoint, region).region.last_consistent or 0) >= 2,
            15,
            "two checkpoints",
        )
        answer = m0.channel.leave()
        assert answer is not None
        assert answer.complete is not None
        assert answer.last_consistent is not None
        assert answer.complete <= answer.last_consistent
        assert answer.complete >= 2
    finally:
        m0.stop()
