"""Epochs and redirects over real ZeroMQ: fake coordinators (ROUTER sockets) answer a real
member control channel and a real ``CoordinatorClient`` with frames of chosen epochs and
with NOT_LEADER redirects.

- a pushed command or a reply of a lower epoch than one seen is dropped and counted; one of
  the same or a higher epoch is acted on;
- NOT_LEADER naming another endpoint moves the channel's join and the client's request
  (the same request id) there; a redirect naming an unusable endpoint moves nothing.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

import zmq

from coordinator.client import CoordinatorClient
from coordinator.protocol.common.waiting import wait_until
from coordinator.protocol.region.commands import Drain, encode_command
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.replies import RegionJoinReply, RegionPhase
from coordinator.protocol.wire import envelope
from coordinator.protocol.wire.errors import ErrorCode
from cr_consumer.runtime.member.control import ControlChannel

REGION = RegionConfig(name="r", mode="periodic", period_s=1.0, member_timeout_s=5.0)
TIMEOUT_MS = 10_000


def _router() -> tuple[zmq.Socket, str]:
    router = zmq.Context.instance().socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    return router, f"tcp://127.0.0.1:{port}"


def _recv(router: zmq.Socket, msg_type: str) -> tuple[bytes, envelope.Envelope]:
    """The next request of ``msg_type`` (heartbeats and re-sent joins in between are skipped)."""
    while True:
        assert router.poll(TIMEOUT_MS), f"no {msg_type} arrived"
        identity, frame = router.recv_multipart()
        env = envelope.decode(frame)
        if env.type == msg_type:
            return identity, env


def _send(router: zmq.Socket, identity: bytes, msg_type: str, body: dict[str, Any], rid: Any, epoch: int) -> None:
    router.send_multipart([identity, envelope.encode(msg_type, body, rid, epoch)])


def _join_reply(router: zmq.Socket, epoch: int) -> bytes:
    identity, env = _recv(router, "region_join")
    reply = RegionJoinReply("r", RegionPhase.RUNNING, None, REGION).to_body()
    _send(router, identity, "region_join_reply", reply, env.id, epoch)
    return identity


def test_a_pushed_command_of_a_lower_epoch_is_dropped_and_counted():
    router, endpoint = _router()
    got: queue.SimpleQueue = queue.SimpleQueue()
    channel = ControlChannel(endpoint, "r", "m0", "inc", REGION, got.put)
    try:
        channel.start()
        identity = _join_reply(router, epoch=5)
        assert channel.wait_joined(10)

        def push(seq: int, epoch: int) -> None:
            _send(router, identity, "region_command", encode_command("r", Drain(seq)), None, epoch)

        push(1, 4)  # a deposed leader's late command
        push(2, 5)
        push(3, 7)  # a new leader's
        push(4, 5)  # the deposed one's again
        push(5, 7)
        assert [got.get(timeout=10) for _ in range(3)] == [Drain(2), Drain(3), Drain(5)]
        assert got.empty()
        assert (channel.fence.highest, channel.fence.dropped) == (7, 2)
    finally:
        channel.stop()
        router.close(0)


def test_a_not_leader_answer_moves_the_channel_to_the_named_leader_which_it_adds_to_its_list():
    standby, standby_endpoint = _router()
    leader, leader_endpoint = _router()
    got: queue.SimpleQueue = queue.SimpleQueue()
    channel = ControlChannel(standby_endpoint, "r", "m0", "inc", REGION, got.put)
    try:
        channel.start()
        identity, env = _recv(standby, "region_join")
        body = {"code": ErrorCode.NOT_LEADER.value, "message": "a standby", "leader": "tcp://a:1,tcp://b:2"}
        _send(standby, identity, envelope.ERROR_TYPE, body, env.id, 3)  # unusable: counts as loading
        identity, env = _recv(standby, "region_join")  # re-sent to the standby: nothing moved
        body["leader"] = leader_endpoint
        _send(standby, identity, envelope.ERROR_TYPE, body, env.id, 3)
        identity = _join_reply(leader, epoch=3)
        assert channel.wait_joined(10)
        _send(leader, identity, "region_command", encode_command("r", Drain(1)), None, 3)
        assert got.get(timeout=10) == Drain(1)
        assert channel.endpoints == (standby_endpoint, leader_endpoint)
    finally:
        channel.stop()
        standby.close(0)
        leader.close(0)


def test_the_client_drops_a_reply_of_a_lower_epoch_and_follows_a_redirect_with_the_same_request_id():
    standby, standby_endpoint = _router()
    leader, leader_endpoint = _router()
    answers: list[float] = []
    client = CoordinatorClient(standby_endpoint, timeout=10, try_timeout=5)

    def ping() -> None:
        answers.append(client.ping().time)

    try:
        caller = threading.Thread(target=ping)
        caller.start()
        identity, env = _recv(standby, "ping")
        body = {"code": ErrorCode.NOT_LEADER.value, "message": "a standby", "leader": leader_endpoint}
        _send(standby, identity, envelope.ERROR_TYPE, body, env.id, 4)
        identity, resent = _recv(leader, "ping")
        assert resent.id == env.id  # the same request, re-sent to the leader
        _send(leader, identity, "ping_reply", {"time": 1.0, "version": 1}, resent.id, 4)
        caller.join(10)
        assert answers == [1.0]
        assert client.fence.highest == 4

        caller = threading.Thread(target=ping)
        caller.start()
        identity, env = _recv(leader, "ping")
        _send(leader, identity, "ping_reply", {"time": 2.0, "version": 1}, env.id, 3)  # a deposed leader's
        _send(leader, identity, "ping_reply", {"time": 3.0, "version": 1}, env.id, 4)
        caller.join(10)
        assert answers == [1.0, 3.0]
        wait_until(lambda: client.fence.dropped == 1, 5, "the drop to be counted")
    finally:
        client.close()
        standby.close(0)
        leader.close(0)


def test_an_unavailable_answer_moves_the_client_to_its_next_endpoint_with_the_same_request_id():
    """A deposed leader's last answers (its log fenced) are UNAVAILABLE: nothing was
    acknowledged; the client re-sends the same request to the next endpoint it was given."""
    deposed, deposed_endpoint = _router()
    leader, leader_endpoint = _router()
    answers: list[float] = []
    client = CoordinatorClient(f"{deposed_endpoint},{leader_endpoint}", timeout=10, try_timeout=5)
    try:
        caller = threading.Thread(target=lambda: answers.append(client.ping().time))
        caller.start()
        identity, env = _recv(deposed, "ping")
        body = {"code": ErrorCode.UNAVAILABLE.value, "message": "this coordinator stops: its log refused the write"}
        _send(deposed, identity, envelope.ERROR_TYPE, body, env.id, 0)
        identity, resent = _recv(leader, "ping")
        assert resent.id == env.id
        _send(leader, identity, "ping_reply", {"time": 1.0, "version": 1}, resent.id, 1)
        caller.join(10)
        assert answers == [1.0]
        assert client.fence.highest == 1
    finally:
        client.close()
        deposed.close(0)
        leader.close(0)
