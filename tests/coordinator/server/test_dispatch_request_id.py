"""The request id through the dispatcher: checked where the envelope is decoded, echoed
only when valid (a string of at most MAX_ID_LEN printable characters or an int64),
as a pure unit (a Dispatcher and its GroupCommit, no sockets)."""

from __future__ import annotations

import json
import threading

import pytest

from coordinator.protocol.wire import fields, protocol
from coordinator.protocol.wire.envelope import DEFAULT_MAX_FRAME_BYTES, MAX_ID_LEN, BadEnvelope, request_id
from coordinator.server.api import Request
from coordinator.server.dispatch import Dispatcher
from coordinator.server.group_commit import GroupCommit


class _Store:
    def sync(self) -> None:
        pass

    def keepalive(self) -> None:
        pass


def _dispatcher() -> tuple[Dispatcher, GroupCommit]:
    commit = GroupCommit(_Store(), None)
    loaded = threading.Event()
    loaded.set()
    dispatcher = Dispatcher(commit, loaded, DEFAULT_MAX_FRAME_BYTES, None)

    def ping(req: Request, msg: protocol.Ping) -> dict:
        return {"id_seen": req.id}

    dispatcher.add(protocol.Ping.TYPE, protocol.Ping, ping)
    return dispatcher, commit


def _replies(commit: GroupCommit) -> list[dict]:
    return [json.loads(frame) for _identity, frame in commit._outbox]


VALID_IDS = ["r", "x" * MAX_ID_LEN, "\U0001f600", 0, fields.MAX_INT, -fields.MAX_INT - 1, None]
INVALID_IDS = [
    "x" * (MAX_ID_LEN + 1),
    fields.MAX_INT + 1,
    -fields.MAX_INT - 2,
    True,
    1.5,
    "a\nb",
    "a\x00",
    [],
    {"id": 1},
]


@pytest.mark.parametrize("rid", VALID_IDS)
def test_a_valid_id_reaches_the_handler_and_is_echoed(rid):
    dispatcher, commit = _dispatcher()
    frame = json.dumps({"v": 1, "id": rid, "type": "ping", "body": {}}).encode()
    dispatcher.handle([b"client", frame])
    [reply] = _replies(commit)
    assert reply["type"] == "ping_reply"
    assert reply["id"] == rid
    assert reply["body"] == {"id_seen": rid}


@pytest.mark.parametrize("rid", INVALID_IDS)
def test_an_invalid_id_is_malformed_and_never_echoed(rid):
    dispatcher, commit = _dispatcher()
    for version in (1, 99):  # the id is checked before the version (an error reply echoes it)
        frame = json.dumps({"v": version, "id": rid, "type": "ping", "body": {}}).encode()
        dispatcher.handle([b"client", frame])
    replies = _replies(commit)
    assert [r["body"]["code"] for r in replies] == ["MALFORMED", "MALFORMED"]
    assert [r["id"] for r in replies] == [None, None]
    assert "envelope field 'id'" in replies[0]["body"]["message"]


def test_a_valid_id_is_echoed_in_an_error_reply_after_the_envelope_check():
    dispatcher, commit = _dispatcher()
    dispatcher.handle([b"client", json.dumps({"v": 99, "id": 7, "type": "ping", "body": {}}).encode()])
    dispatcher.handle([b"client", json.dumps({"v": 1, "id": "q", "type": "nope", "body": {}}).encode()])
    assert [(r["body"]["code"], r["id"]) for r in _replies(commit)] == [
        ("UNSUPPORTED_VERSION", 7),
        ("UNKNOWN_TYPE", "q"),
    ]


@pytest.mark.parametrize("rid", VALID_IDS)
def test_request_id_returns_a_valid_id_unchanged(rid):
    assert request_id(rid) == rid


@pytest.mark.parametrize("rid", INVALID_IDS)
def test_request_id_refuses_an_invalid_id_without_echoing_it(rid):
    with pytest.raises(BadEnvelope) as info:
        request_id(rid)
    assert info.value.request_id is None
    assert info.value.error.code.value == "MALFORMED"
