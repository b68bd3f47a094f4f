"""The replies of the registry, the merge and ping: what a service builds is what
the client decodes, and a reply that does not validate is Invalid naming the field."""

from __future__ import annotations

import pytest

from coordinator.protocol.wire import protocol
from coordinator.protocol.wire.errors import Invalid

REPLIES = [
    protocol.PingReply(1.5, 1),
    protocol.MembersReply(["a", "b"], 3),
    protocol.MembersReply([], None),
    protocol.OffsetsReply({("t", 0): 1, ("u", 2): 0}),
    protocol.MergeReply({("t", 0): 7}, ["a", "b"]),
    protocol.RetireReply(2),
    protocol.ResetPendingReply(False),
]


@pytest.mark.parametrize("reply", REPLIES, ids=lambda r: type(r).__name__)
def test_a_reply_decodes_to_what_was_built(reply):
    assert type(reply).from_body(reply.to_body()) == reply


@pytest.mark.parametrize(
    ("cls", "body", "field"),
    [
        (protocol.PingReply, {"time": "now", "version": 1}, "time"),
        (protocol.MembersReply, {"members": ["a", ""], "region_index": 0}, "members[1]"),
        (protocol.MembersReply, {"members": "a", "region_index": 0}, "members"),
        (protocol.OffsetsReply, {"offsets": [["t", -1, 0]]}, "offsets[0]"),
        (protocol.MergeReply, {"offsets": [], "contributors": None}, "contributors"),
        (protocol.RetireReply, {"dropped": -1}, "dropped"),
        (protocol.ResetPendingReply, {"previous": 1}, "previous"),
    ],
)
def test_a_bad_reply_is_invalid_naming_the_field(cls, body, field):
    with pytest.raises(Invalid, match=field.replace("[", r"\[").replace("]", r"\]")):
        cls.from_body(body)
