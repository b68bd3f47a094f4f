"""The operator checkpoint encoding: versioned JSON, clear errors."""

from __future__ import annotations

import json

import pytest
from kafka import TopicPartition

from cr_consumer.operator.checkpoint import CheckpointError, OperatorCheckpoint


def test_round_trip_is_plain_json():
    ck = OperatorCheckpoint("m0", ("m0", "m1"), {TopicPartition("t", 1): 7, TopicPartition("t", 0): 1_234_567})
    data = ck.encode()
    assert json.loads(data) == {
        "v": 1,
        "operator": "m0",
        "members": ["m0", "m1"],
        "offsets": [["t", 0, 1234567], ["t", 1, 7]],
    }
    back = OperatorCheckpoint.decode(data)
    assert back == ck


def test_the_interval_starts_round_trip_and_make_the_answer_entries():
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    ck = OperatorCheckpoint("m0", ("m0",), {b: 7, a: 12}, {a: 10, b: 7})
    data = ck.encode()
    assert json.loads(data)["from"] == [["t", 0, 10], ["t", 1, 7]]
    assert OperatorCheckpoint.decode(data) == ck
    assert ck.claims() == [["t", 0, 10, 12], ["t", 1, 7, 7]]
    merged = OperatorCheckpoint("m0", ("m0",), {a: 12})  # a reset's merged checkpoint: offsets only
    assert OperatorCheckpoint.decode(merged.encode()).starts is None
    with pytest.raises(CheckpointError, match="no 'from'"):
        merged.claims()


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (
            b'{"v": 1, "operator": "m0", "members": [], "offsets": [["t", 0, 5]], "from": [["t", 0, 6]]}',
            "after its partition's offset",
        ),
        (
            b'{"v": 1, "operator": "m0", "members": [], "offsets": [["t", 0, 5]], "from": [["t", 1, 5]]}',
            "exactly the partitions",
        ),
        (b'{"v": 1, "operator": "m0", "members": [], "offsets": [], "from": {}}', "'from' must be a list"),
        (b"\x80\x04pickle", "not JSON"),
        (b"[]", "not a JSON object"),
        (b'{"v": 2, "operator": "m0", "members": [], "offsets": []}', "unsupported checkpoint version 2"),
        (b'{"v": 1, "operator": "m0", "members": []}', "needs 'operator'"),
        (b'{"v": 1, "operator": "m0", "members": [], "offsets": [["t", 0]]}', "bad offsets entry"),
        (b'{"v": 1, "operator": "m0", "members": [], "offsets": [["t", 0, -1]]}', "bad offsets entry"),
    ],
)
def test_bad_checkpoints_are_rejected_clearly(data, words):
    with pytest.raises(CheckpointError) as info:
        OperatorCheckpoint.decode(data)
    assert words in str(info.value)
