"""The controller -> member commands (coordinator/protocol/region/commands.py): every kind
round-trips through the one encode/decode pair, and decoding refuses what a
member must not act on."""

from __future__ import annotations

import pytest

from coordinator.protocol.region.commands import (
    COMMAND_VERSION,
    AddressedCommand,
    Checkpoint,
    CommandKind,
    Drain,
    Failed,
    Reset,
    ResetToInitial,
    Resume,
    Retire,
    decode_command,
    encode_command,
)
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.transactions import (
    MAX_FENCE,
    MAX_PREPARED,
    MAX_RESOLVE,
    MAX_TXN_PARTITIONS,
    PreparedTxn,
    Resolve,
    Transactions,
    TxnPartition,
)
from coordinator.protocol.wire.errors import Invalid
from coordinator.region.machine import RegionCore

EVERY_KIND = [
    Drain(3),
    Checkpoint(3),
    Resume(None),
    Resume(3, [["t", 0, 5], ["t", 1, 7]]),
    Retire(2),
    Reset(3, 4, ["m0", "m1"], [["t", 0, 5]], 2),
    Reset(3, 4, ["m0"], [], None, rejoin=True),
    ResetToInitial(1),
    ResetToInitial(2, rejoin=True),
    Failed("too many resets"),
]
ENTRY = Resolve(
    "m1",
    3,
    Transactions((PreparedTxn("crkafka-g-m1-s-0", 7, 2, (TxnPartition("out", 1, 40),)),), ("crkafka-g-m1-s-0",)),
)
EVERY_KIND += [Reset(3, 4, ["m0"], [["t", 0, 5]], 3, resolve=(ENTRY,)), ResetToInitial(2, resolve=(ENTRY,))]


def test_every_kind_is_covered():
    assert {c.KIND for c in EVERY_KIND} == set(CommandKind)


@pytest.mark.parametrize("command", EVERY_KIND, ids=repr)
def test_round_trip(command):
    body = encode_command("r", command)
    assert body["v"] == COMMAND_VERSION
    assert body["region"] == "r"
    assert body["cmd"] == command.KIND.value
    assert decode_command(body) == AddressedCommand("r", command)


@pytest.mark.parametrize(
    ("body", "names"),
    [
        ({"region": "r", "cmd": "drain", "seq": 1}, "version"),
        ({"v": 2, "region": "r", "cmd": "drain", "seq": 1}, "version"),
        ({"v": 1, "region": "r", "cmd": "explode"}, "'cmd'"),
        ({"v": 1, "cmd": "drain", "seq": 1}, "'region'"),
        ({"v": 1, "region": "r", "cmd": "drain", "seq": -1}, "'seq'"),
        ({"v": 1, "region": "r", "cmd": "drain", "seq": True}, "'seq'"),
        ({"v": 1, "region": "r", "cmd": "reset", "seq": 3, "attempt": 1, "members": [], "offsets": []}, "'own'"),
        (
            {"v": 1, "region": "r", "cmd": "reset", "seq": 3, "attempt": 1, "members": [], "offsets": [], "own": 4},
            "'own'",
        ),
        (
            {"v": 1, "region": "r", "cmd": "reset", "seq": 3, "attempt": 1, "members": "m0", "offsets": [], "own": 3},
            "'members'",
        ),
        (
            {"v": 1, "region": "r", "cmd": "reset", "seq": 3, "attempt": 1, "members": [""], "offsets": [], "own": 3},
            "members[0]",
        ),
        (
            {
                "v": 1,
                "region": "r",
                "cmd": "reset",
                "seq": 3,
                "attempt": 1,
                "members": [],
                "offsets": [["t", 0, 1], ["t", 0, 2]],
                "own": 3,
            },
            "twice",
        ),
        ({"v": 1, "region": "r", "cmd": "resume", "complete": 1, "offsets": [["t", -1, 2]]}, "partition"),
        ({"v": 1, "region": "r", "cmd": "reset_to_initial"}, "'attempt'"),
        ({"v": 1, "region": "r", "cmd": "resume", "complete": 1, "offsets": [["t", 0, 2]], "rejoin": "yes"}, None),
    ],
)
def test_decode_refuses_invalid_bodies(body, names):
    if names is None:  # a field the kind does not have is ignored
        assert decode_command(body).command == Resume(1, [["t", 0, 2]])
        return
    with pytest.raises(Invalid) as raised:
        decode_command(body)
    assert names in str(raised.value)


def test_failed_reason_is_cut_and_escaped():
    decoded = decode_command({"v": 1, "region": "r", "cmd": "failed", "reason": "x\n" * 5000})
    assert isinstance(decoded.command, Failed)
    assert "\n" not in decoded.command.reason
    assert len(decoded.command.reason) <= 2000 * 4


def test_the_controller_sends_typed_commands_that_decode_to_themselves():
    sent = []
    core = RegionCore(RegionConfig(name="r", min_members=1), lambda m, c: sent.append((m, c)), lambda doc: None)
    core.join("m0", b"id0", "inc", 0.0)
    [(member, command)] = sent
    assert member == "m0"
    assert command == ResetToInitial(1)
    assert decode_command(encode_command("r", command)).command == command


def _with_resolve(resolve: object) -> dict:
    return {"v": 1, "region": "r", "cmd": "reset_to_initial", "attempt": 1, "resolve": resolve}


def _entry(**changes: object) -> dict:
    return {**ENTRY.to_wire(), **changes}


def _txn(**changes: object) -> dict:
    return {**ENTRY.transactions.prepared[0].to_wire(), **changes}


@pytest.mark.parametrize(
    ("resolve", "names"),
    [
        ("all", "'resolve'"),
        ([ENTRY.to_wire()] * (MAX_RESOLVE + 1), "'resolve'"),
        (["m1"], "resolve'[0]"),
        ([_entry(member="")], ".member"),
        ([_entry(seq=-1)], ".seq"),
        ([_entry(prepared=None)], ".prepared"),
        ([_entry(prepared=[_txn()] * (MAX_PREPARED + 1))], ".prepared"),
        ([_entry(fence=["t"] * (MAX_FENCE + 1))], ".fence"),
        ([_entry(fence=[7])], ".fence[0]"),
        ([_entry(prepared=[_txn(pid=-1)])], ".pid"),
        ([_entry(prepared=[_txn(epoch=1 << 15)])], ".epoch"),
        ([_entry(prepared=[_txn(epoch=True)])], ".epoch"),
        ([_entry(prepared=[_txn(tid="a\nb")])], ".tid"),
        ([_entry(prepared=[_txn(partitions=[["out", 1]])])], "partitions[0]"),
        ([_entry(prepared=[_txn(partitions=[["out", -1, 0]])])], "partitions[0][1]"),
        ([_entry(prepared=[_txn(partitions=[["out", 0, 0]] * (MAX_TXN_PARTITIONS + 1))])], ".partitions"),
    ],
)
def test_a_reset_with_a_hostile_resolve_is_refused_whole(resolve, names):
    """A member acts on no part of a reset whose transactions do not validate (the controller
    then fails the round by its timeout and resets again)."""
    with pytest.raises(Invalid) as raised:
        decode_command(_with_resolve(resolve))
    assert names in str(raised.value)
