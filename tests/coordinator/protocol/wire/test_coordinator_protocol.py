"""Bad input gets the right error reply, never crashes the coordinator, and never stalls other clients."""

from __future__ import annotations

import json
import threading

import pytest
import zmq

from coordinator.client import CoordinatorClient
from coordinator.protocol.wire import envelope, protocol
from coordinator.protocol.wire.errors import Invalid, NotRegistered, TooLarge, UnknownType

REPLY_TIMEOUT_MS = 5000


class RawClient:
    """A bare DEALER socket: sends any bytes, reads replies as JSON."""

    def __init__(self, endpoint: str) -> None:
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)

    def send(self, *frames: bytes) -> dict:
        self.sock.send_multipart(list(frames))
        assert self.sock.poll(REPLY_TIMEOUT_MS), "no reply from the coordinator"
        return json.loads(self.sock.recv())

    def close(self) -> None:
        self.sock.close(0)


@pytest.fixture
def raw(coordinator):
    c = RawClient(coordinator.endpoint)
    yield c
    c.close()


def _env(**kw) -> bytes:
    base = {"v": 1, "id": "r1", "type": "ping", "body": {}}
    base.update(kw)
    return json.dumps(base).encode()


@pytest.mark.parametrize(
    ("frames", "code", "rid"),
    [
        ((b"\xff\xfe not json",), "MALFORMED", None),
        ((b"[1, 2, 3]",), "MALFORMED", None),
        ((b"",), "MALFORMED", None),
        ((b'{"v": 1, "id": "a"}', b"second frame"), "MALFORMED", None),
        ((_env(v=2),), "UNSUPPORTED_VERSION", "r1"),
        ((_env(v="1"),), "MALFORMED", "r1"),
        ((_env(type="no_such_type"),), "UNKNOWN_TYPE", "r1"),
        ((_env(type=""),), "MALFORMED", "r1"),
        ((_env(body=[1]),), "MALFORMED", "r1"),
        ((_env(type="register", body={"group": "g", "region_index": "zero", "operator": "o"}),), "INVALID", "r1"),
        ((_env(type="register", body={"group": "", "region_index": 0, "operator": "o"}),), "INVALID", "r1"),
        ((_env(type="put_initial_offsets", body={"group": "g", "offsets": {"t": 1}}),), "INVALID", "r1"),
        ((_env(type="put_initial_offsets", body={"group": "g", "offsets": [["t", -1, 0]]}),), "INVALID", "r1"),
        (
            (_env(type="put_initial_offsets", body={"group": "g", "offsets": [["t", 0, 1], ["t", 0, 2]]}),),
            "INVALID",
            "r1",
        ),
        ((_env(type="merge_checkpoint", body={"group": "g"}),), "INVALID", "r1"),
        ((_env(type="set_reset_pending", body={"group": "g", "value": 1}),), "INVALID", "r1"),
    ],
)
def test_bad_frames_get_error_replies(coordinator, raw, frames, code, rid):
    reply = raw.send(*frames)
    assert reply["type"] == "error"
    assert reply["body"]["code"] == code
    assert reply["id"] == rid
    assert reply["body"]["message"]
    # still alive and serving
    assert raw.send(_env(id="after"))["type"] == "ping_reply"


def test_oversized_frame_gets_too_large_unparsed(coordinator, raw):
    big = b"{" + b" " * (envelope.DEFAULT_MAX_FRAME_BYTES + 10) + b"}"
    reply = raw.send(big)
    assert reply["body"]["code"] == "TOO_LARGE"
    assert raw.send(_env(id="after"))["id"] == "after"


def test_client_raises_too_large_for_an_oversized_request(coordinator):
    with CoordinatorClient(coordinator.endpoint, timeout=5) as c:
        with pytest.raises(TooLarge):
            c.request("ping", {"pad": "x" * (envelope.DEFAULT_MAX_FRAME_BYTES + 1)})
        with pytest.raises(UnknownType) as info:
            c.request("frobnicate", {})
        assert info.value.code.value == "UNKNOWN_TYPE"
        assert c.ping().version == envelope.PROTOCOL_VERSION


def test_garbage_flood_does_not_stall_another_client(coordinator, names):
    """One client floods garbage while another registers and writes; every reply is right."""
    group = names.group()
    stop = threading.Event()
    errors_seen = []

    def flood() -> None:
        c = RawClient(coordinator.endpoint)
        try:
            i = 0
            while not stop.is_set():
                payload = [b"\x00garbage", _env(v=99), _env(type="nope"), b"{}"][i % 4]
                errors_seen.append(c.send(payload)["body"]["code"])
                i += 1
        finally:
            c.close()

    t = threading.Thread(target=flood)
    t.start()
    try:
        with CoordinatorClient(coordinator.endpoint, timeout=10) as good:
            for i in range(50):
                assert good.register(group, 0, f"op-{i}")[-1] in {f"op-{j}" for j in range(i + 1)}
                good.put_initial_offsets(group, {("t", i): i * 10})
            assert len(good.members(group)) == 50
            assert good.get_initial_offsets(group) == {("t", i): i * 10 for i in range(50)}
    finally:
        stop.set()
        t.join(10)
    assert set(errors_seen) <= {"MALFORMED", "UNSUPPORTED_VERSION", "UNKNOWN_TYPE"}
    assert len(errors_seen) >= 4
    assert coordinator.running


def test_store_bounds_become_invalid_not_internal(coordinator, names):
    with CoordinatorClient(coordinator.endpoint, timeout=5) as c:
        with pytest.raises(Invalid):
            c.put_initial_offsets(names.group(), {("t", 1 << 30): 1})
        with pytest.raises(NotRegistered):
            c.members(names.group("unknown"))
        with pytest.raises(Invalid):
            c.merge_checkpoint(names.group(), 1, 0, 0, "op", {}, 1.0)  # n_contributors >= 1, checked client-side
    assert coordinator.running


def test_envelope_round_trip_and_offsets_encoding():
    offsets = {("a", 0): 5, ("b", 3): 0}
    frame = envelope.encode("put_initial_offsets", protocol.PutInitialOffsets("g", offsets).to_body(), 7)
    env = envelope.decode(frame)
    assert (env.v, env.id, env.type) == (1, 7, "put_initial_offsets")
    assert env.body["offsets"] == [["a", 0, 5], ["b", 3, 0]]
    assert protocol.PutInitialOffsets.from_body(env.body).offsets == offsets
    with pytest.raises(envelope.BadEnvelope) as info:
        envelope.decode(b'{"v": 1, "id": true, "type": "x"}')
    assert info.value.error.code.value == "MALFORMED"
