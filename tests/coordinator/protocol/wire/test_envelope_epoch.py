"""The envelope's ``epoch``: required on every frame from the server, refused in a request."""

from __future__ import annotations

import json

import pytest

from coordinator.protocol.wire import envelope
from coordinator.protocol.wire.errors import ErrorCode


def test_a_server_frame_carries_its_epoch_and_a_request_none():
    frame = envelope.encode("ping_reply", {"time": 1.0}, "r-1", 9)
    assert envelope.decode(frame, from_server=True).epoch == 9
    request = envelope.encode("ping", {}, "r-1")
    assert envelope.decode(request).epoch is None
    assert b"epoch" not in request
    prepared = envelope.encode_prepared("merge_checkpoint_reply", envelope.encode_body({"a": 1}), "r-2", 4)
    assert prepared == envelope.encode("merge_checkpoint_reply", {"a": 1}, "r-2", 4)
    error = envelope.decode(envelope.encode_error(ErrorCode.NOT_LEADER, "m", "r-3", 2, "tcp://l:1"), from_server=True)
    assert (error.epoch, error.body) == (2, {"code": "NOT_LEADER", "message": "m", "leader": "tcp://l:1"})


@pytest.mark.parametrize("epoch", [None, -1, 1 << 31, True, 1.5, "3"])
def test_a_server_frame_without_a_valid_epoch_is_malformed(epoch):
    frame = {"v": 1, "id": "r", "type": "ping_reply", "body": {}}
    if epoch is not None:
        frame["epoch"] = epoch
    with pytest.raises(envelope.BadEnvelope, match="epoch") as info:
        envelope.decode(json.dumps(frame).encode(), from_server=True)
    assert info.value.error.code is ErrorCode.MALFORMED


def test_a_request_carrying_an_epoch_is_malformed():
    with pytest.raises(envelope.BadEnvelope, match="unknown envelope fields") as info:
        envelope.decode(envelope.encode("ping", {}, "r", 3))
    assert info.value.request_id == "r"
