"""The member's control channel validates every pushed command before the member
acts on it: over real ZeroMQ, a fake controller (a ROUTER socket) pushes invalid
commands, then a valid one; only the valid one reaches the member, typed. A
reset with the rejoin hint calls the hint before the reset is queued."""

from __future__ import annotations

import queue

import zmq

from coordinator.protocol.region.commands import Drain, Failed, Reset, ResetToInitial, encode_command
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.replies import RegionJoinReply, RegionPhase
from coordinator.protocol.wire import envelope
from cr_consumer.runtime.member.control import ControlChannel

REGION = RegionConfig(name="r", mode="periodic", period_s=1.0, member_timeout_s=5.0)
TIMEOUT_MS = 10_000


def _recv(router: zmq.Socket) -> tuple[bytes, envelope.Envelope]:
    assert router.poll(TIMEOUT_MS), "the member sent nothing"
    identity, frame = router.recv_multipart()
    return identity, envelope.decode(frame)


def _joined(router: zmq.Socket, channel: ControlChannel) -> bytes:
    """Answer the channel's join; its routing id."""
    channel.start()
    identity, env = _recv(router)
    while env.type != "region_join":
        identity, env = _recv(router)
    reply = RegionJoinReply("r", RegionPhase.RESETTING, None, REGION)
    router.send_multipart([identity, envelope.encode("region_join_reply", reply.to_body(), env.id, 0)])
    assert channel.wait_joined(10)
    return identity


def _router() -> tuple[zmq.Socket, str]:
    router = zmq.Context.instance().socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    return router, f"tcp://127.0.0.1:{port}"


def test_invalid_pushes_are_dropped_and_a_valid_one_arrives_typed():
    router, endpoint = _router()
    got: queue.SimpleQueue = queue.SimpleQueue()
    channel = ControlChannel(endpoint, "r", "m0", "inc", REGION, got.put)
    try:
        identity = _joined(router, channel)

        def push(body: dict) -> None:
            router.send_multipart([identity, envelope.encode("region_command", body, None, 0)])

        push({"region": "r", "cmd": "drain", "seq": 1})  # no version
        push({"v": 2, "region": "r", "cmd": "drain", "seq": 1})  # another version
        push({"v": 1, "region": "r", "cmd": "drain", "seq": -1})  # out of range
        push(
            {"v": 1, "region": "r", "cmd": "reset", "seq": 2, "attempt": 1, "members": [], "offsets": [], "own": 5}
        )  # own after seq
        push(encode_command("other", Drain(1)))  # another region's
        push(encode_command("r", Drain(7)))
        push(encode_command("r", Failed("gave up")))
        assert got.get(timeout=10) == Drain(7)
        assert got.get(timeout=10) == Failed("gave up")
        assert got.empty()
    finally:
        channel.stop()
        router.close(linger=0)


def test_a_reset_with_the_rejoin_hint_calls_the_hint_first():
    router, endpoint = _router()
    events: queue.SimpleQueue = queue.SimpleQueue()
    channel = ControlChannel(endpoint, "r", "m0", "inc", REGION, events.put, on_rejoin_hint=lambda: events.put("hint"))
    try:
        identity = _joined(router, channel)
        for command in (
            Reset(3, 1, ["m0"], [["t", 0, 5]], 3),
            ResetToInitial(2, rejoin=True),
            Reset(3, 3, ["m0"], [["t", 0, 5]], 3, rejoin=True),
        ):
            router.send_multipart([identity, envelope.encode("region_command", encode_command("r", command), None, 0)])
        assert [events.get(timeout=10) for _ in range(5)] == [
            Reset(3, 1, ["m0"], [["t", 0, 5]], 3),
            "hint",
            ResetToInitial(2, rejoin=True),
            "hint",
            Reset(3, 3, ["m0"], [["t", 0, 5]], 3, rejoin=True),
        ]
        assert events.empty()
    finally:
        channel.stop()
        router.close(linger=0)
