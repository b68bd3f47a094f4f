"""A member's standing in its region as the controller's answers tell it
(cr_consumer/runtime/member/join_state.py), without sockets."""

from __future__ import annotations

import os
import socket

from coordinator.protocol.region.commands import Failed
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.replies import (
    ErrorReply,
    JoinRefusal,
    NameHolder,
    Predecessor,
    RegionJoinReply,
    RegionLeaveReply,
    RegionPhase,
)
from coordinator.protocol.wire.errors import ErrorCode
from cr_consumer.runtime.member.join_state import JoinState, RegionFatal

CONFIG = RegionConfig(name="r1")


def _state(predecessors=None, failed=None, timeout_s=5.0) -> JoinState:
    return JoinState(
        "r1",
        "m0",
        timeout_s,
        (failed if failed is not None else []).append,
        (predecessors if predecessors is not None else []).append,
    )


def _joined(phase: RegionPhase = RegionPhase.RUNNING, **kw) -> RegionJoinReply:
    return RegionJoinReply("r1", phase, None, CONFIG, **kw)


def _refused(holder: NameHolder) -> RegionJoinReply:
    return _joined(refused=JoinRefusal("in use", holder))


def test_join_reply_joins_and_hands_over_the_predecessor_once():
    seen: list = []
    state = _state(predecessors=seen)
    predecessor = Predecessor("i0", None, "k")
    reply = RegionJoinReply("r1", RegionPhase.RUNNING, 3, CONFIG, predecessor)
    state.on_join_reply(reply)
    state.on_join_reply(reply)
    assert state.wait_settled(0)
    assert state.joins == 2
    assert state.region_phase() is RegionPhase.RUNNING
    assert seen == [predecessor]


def test_join_to_a_failed_region_tells_the_member():
    failed: list = []
    state = _state(failed=failed)
    state.on_join_reply(_joined(RegionPhase.FAILED, failed_reason="too many resets"))
    assert len(failed) == 1
    assert isinstance(failed[0], Failed)
    assert "too many resets" in failed[0].reason


def test_not_registered_and_lost_mean_join_again():
    state = _state()
    state.on_join_reply(_joined())
    state.on_error("region_heartbeat", ErrorReply(ErrorCode.NOT_REGISTERED, "unknown"))
    assert not state.joined.is_set()
    assert state.region_phase() is None
    assert state.failure is None
    state.on_join_reply(_joined())
    state.lost()
    assert not state.joined.is_set()
    assert state.failure is None


def test_invalid_join_is_fatal_and_settles():
    state = _state()
    state.on_error("region_join", ErrorReply(ErrorCode.INVALID, "period_s differs"))
    assert not state.wait_settled(0)
    assert isinstance(state.failure, RegionFatal)
    assert "period_s differs" in str(state.failure)


def test_refused_by_a_gone_local_holder_joins_again_at_once_with_replace():
    state = _state()
    gone = os.getpid()
    while True:  # a pid nobody runs
        gone += 7919
        try:
            os.kill(gone, 0)
        except ProcessLookupError:
            break
        except PermissionError:
            continue
    state.on_join_reply(_refused(NameHolder("i9", gone, socket.gethostname(), 0.5)))
    assert state.join_now
    assert not state.joined.is_set()
    assert state.join_replaces() is True
    assert not state.join_now


def test_refused_by_a_live_holder_past_the_grace_is_fatal():
    state = _state(timeout_s=-2.0)  # no grace left: the first refusal past the limit gives up
    state.on_join_reply(_refused(NameHolder("i9", 1, "elsewhere", 0.5)))
    assert isinstance(state.failure, RegionFatal)
    assert "elsewhere" in str(state.failure)
    assert not state.wait_settled(0)


def test_leave_reply_ends_the_membership():
    state = _state()
    state.on_join_reply(_joined())
    state.begin_leave()
    assert state.leaving
    assert not state.wait_left(0)
    state.on_leave_reply(RegionLeaveReply(4, 4))
    assert state.wait_left(0)
    assert state.leave_reply == RegionLeaveReply(4, 4)
    assert not state.joined.is_set()
