"""The operator checkpoint encoding: versioned JSON, clear errors."""

from __future__ import annotations

import json

import pytest
from kafka import TopicPartition

from cr_consumer.operator.checkpoint import CheckpointError, OperatorCheckpoint


def test_round_trip_is_plain_json():
    ck = OperatorCheckpoint("m0", ("m0", "m1"), {TopicPartition("t", 1): 7, TopicPartition("t", 0): 1_234_567})
    data = ck.encode()
    assert json.loads(data) == {"v": 1, "operator": "m0", "members": ["m0", "m1"],
                                "offsets": [["t", 0, 1234567], ["t", 1, 7]]}
    back = OperatorCheckpoint.decode(data)
    assert back == ck


@pytest.mark.parametrize("data, words", [
    (b"\x80\x04pickle", "not JSON"),
    (b"[]", "not a JSON object"),
    (b'{"v": 2, "operator": "m0", "members": [], "offsets": []}', "unsupported checkpoint version 2"),
    (b'{"v": 1, "operator": "m0", "members": []}', "needs 'operator'"),
    (b'{"v": 1, "operator": "m0", "members": [], "offsets": [["t", 0]]}', "bad offsets entry"),
    (b'{"v": 1, "operator": "m0", "members": [], "offsets": [["t", 0, -1]]}', "bad offsets entry"),
])
def test_bad_checkpoints_are_rejected_clearly(data, words):
    with pytest.raises(CheckpointError) as info:
        OperatorCheckpoint.decode(data)
    assert words in str(info.value)
