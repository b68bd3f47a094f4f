"""The member runtime's part of the region's transaction protocol
(``coordinator/protocol/region/transactions.py``, steps 1 and 3), on the command executor with
a real permit and checkpoint store: a checkpoint ack carries the sum of the transactional
operators' transactions; a reset resolves its entries before any operator resets, and a
resolver failure fails the reset's ack with its text. The source and the control channel are
stand-ins that record what the executor asks of them (no broker, no coordinator needed)."""

from __future__ import annotations

from typing import Any

from coordinator.protocol.region.commands import Checkpoint, CommandKind, Reset, ResetToInitial
from coordinator.protocol.region.transactions import PreparedTxn, Resolve, Transactions, TxnPartition
from cr_consumer.kafka.client import TopicPartition
from cr_consumer.operator.checkpoint import OperatorCheckpoint
from cr_consumer.operator.region import RegionPermit
from cr_consumer.runtime.member.executor import CommandExecutor
from cr_consumer.runtime.member.reset_watch import ResetPendingWatch
from cr_consumer.runtime.pipeline.checkpoint_store import DirectoryCheckpointStore
from cr_consumer.runtime.pipeline.operators import Operator

TP = TopicPartition("in", 0)


class Source:
    """What the executor calls on the Kafka source, recorded."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def drain(self) -> None:
        self.calls.append("source.drain")

    def checkpoint(self, seq: int) -> bytes:
        return OperatorCheckpoint("member-0", ("member-0",), {TP: 10}, {TP: 0}).encode()

    def reset(self, seq: int, data: bytes, attempt: int = 0) -> None:
        self.calls.append("source.reset")

    def reset_to_initial_state(self, attempt: int = 0) -> None:
        self.calls.append("source.reset_to_initial_state")


class Channel:
    """The control channel's ``ack``, recorded."""

    def __init__(self) -> None:
        self.acks: list[dict[str, Any]] = []

    def ack(self, command: CommandKind, **fields: Any) -> None:
        self.acks.append({"command": command, **fields})


class Writer(Operator):
    """A transactional operator: reports fixed transactions and records its resets."""

    def __init__(self, name: str, txns: Transactions, calls: list[str]) -> None:
        super().__init__(name)
        self.txns = txns
        self.calls = calls

    def transactions(self) -> Transactions:
        return self.txns

    def reset(self, seq: int, data: bytes, attempt: int = 0) -> None:
        self.calls.append(f"{self.name}.reset")

    def reset_to_initial_state(self, attempt: int = 0) -> None:
        self.calls.append(f"{self.name}.reset_to_initial_state")


def txn(tid: str) -> PreparedTxn:
    return PreparedTxn(tid, 4, 1, (TxnPartition("out", 0, 5),))


def executor(tmp_path, operators, resolver, calls=None) -> tuple[CommandExecutor, Channel]:
    channel = Channel()
    ex = CommandExecutor(
        "member-0",
        Source([] if calls is None else calls),  # type: ignore[arg-type]
        operators,
        DirectoryCheckpointStore(tmp_path / "store"),
        RegionPermit(),
        channel,  # type: ignore[arg-type]
        ResetPendingWatch(),
        5.0,
        resolver,
    )
    return ex, channel


def test_a_checkpoint_ack_carries_the_sum_of_the_operators_transactions(tmp_path):
    calls: list[str] = []
    a = Writer("a", Transactions((txn("a-0"),), ("a-0", "a-1")), calls)
    b = Writer("b", Transactions((), ("b-0", "b-1")), calls)
    ex, channel = executor(tmp_path, [("01-map", Operator("map")), ("02-a", a), ("03-b", b)], lambda entries: None)
    ex.execute(Checkpoint(3))
    (ack,) = channel.acks
    assert ack["offsets"] == [["in", 0, 0, 10]]
    assert ack["transactions"] == Transactions((txn("a-0"),), ("a-0", "a-1", "b-0", "b-1"))


def test_a_checkpoint_ack_of_a_pipeline_without_transactions_carries_none(tmp_path):
    ex, channel = executor(tmp_path, [("01-map", Operator("map"))], lambda entries: None)
    ex.execute(Checkpoint(3))
    assert channel.acks[0]["transactions"] is None


def test_a_reset_resolves_its_entries_before_any_operator_resets(tmp_path):
    calls: list[str] = []
    a = Writer("a", Transactions(), calls)
    entries = (Resolve("member-2", 6, Transactions((txn("x-0"),), ("x-0", "x-1"))),)
    ex, channel = executor(tmp_path, [("01-a", a)], lambda got: calls.append(f"resolve {got == entries}"), calls)
    ex.execute(ResetToInitial(1, resolve=entries))
    assert calls == ["resolve True", "a.reset_to_initial_state", "source.reset_to_initial_state"]
    assert channel.acks[-1]["command"] is CommandKind.RESET
    assert "ok" not in channel.acks[-1]  # the default: ok


def test_a_failed_resolve_fails_the_reset_and_resets_nothing(tmp_path):
    calls: list[str] = []
    a = Writer("a", Transactions(), calls)
    entries = (Resolve("member-2", 6, Transactions((txn("x-0"),), ("x-0",))),)

    def resolver(got: tuple[Resolve, ...]) -> None:
        raise RuntimeError("member-2's checkpoint 6: transaction 'x-0' was aborted")

    ex, channel = executor(tmp_path, [("01-a", a)], resolver, calls)
    ex.execute(Reset(6, 2, ["member-0"], [], own=None, resolve=entries))
    ack = channel.acks[-1]
    assert (ack["command"], ack["ok"]) == (CommandKind.RESET, False)
    assert "transaction 'x-0' was aborted" in ack["error"]
    assert calls == []
