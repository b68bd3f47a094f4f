"""The region controller's side of the Kafka transactions protocol
(``coordinator/protocol/region/transactions.py`` steps 2-4,
``coordinator/region/resolve.py``), on the state machine without I/O: what a
completed checkpoint records, what each reset hands out, what a completed round
drops, and what the durable document keeps and refuses."""

from __future__ import annotations

import attrs
import pytest

from coordinator.cli.status import build_document, format_document
from coordinator.protocol.region.commands import CommandKind, RegionCommand, decode_command, encode_command
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.replies import RegionPhase
from coordinator.protocol.region.status import ResolveStatus
from coordinator.protocol.region.transactions import (
    MAX_RESOLVE,
    PreparedTxn,
    Resolve,
    Transactions,
    TxnPartition,
)
from coordinator.protocol.wire.status import CoordinatorStatus
from coordinator.region.document import RegionDocument
from coordinator.region.machine import RegionCore
from coordinator.region.model import DOC_VERSION
from coordinator.region.resolve import ResolveEntries


def txns(name: str, seq: int) -> Transactions:
    """What a member with one transactional sink answers at checkpoint ``seq``: the
    transaction of the interval that ended there, under the id of that interval's parity."""
    partition = int(name[-1])
    return Transactions(
        (PreparedTxn(f"{name}-{seq % 2}", 100 + partition, 3, (TxnPartition("out", partition, seq * 10),)),),
        (f"{name}-0", f"{name}-1"),
    )


class Harness:
    """A core whose persists and sends go to one log, in order."""

    def __init__(self, names: list[str], doc: dict | None = None, **cfg) -> None:
        self.log: list[tuple[str, object]] = []
        config = RegionConfig(name="r", min_members=len(names), period_s=1.0, **cfg)
        self.core = RegionCore(config, self._send, lambda d: self.log.append(("doc", d)), doc)
        self.now = 0.0
        for name in names:
            self.core.join(name, name.encode(), "inc1", self.now)

    def heartbeat(self, *names: str) -> None:
        for name in names:
            assert self.core.members.heartbeat(name, name.encode(), "inc1", self.now)

    def _send(self, member: str, command: RegionCommand) -> None:
        # every command crosses the wire: it must decode as the member will decode it
        self.log.append(("send", (member, decode_command(encode_command("r", command)).command)))

    @property
    def docs(self) -> list[dict]:
        return [d for kind, d in self.log if kind == "doc"]

    def sent(self, since: int = 0) -> list[tuple[str, RegionCommand]]:
        return [c for kind, c in self.log[since:] if kind == "send"]

    def answer_reset(self, ok: bool = True, only: set[str] | None = None) -> None:
        for name in sorted(self.core.waiting):
            if only is None or name in only:
                self.core.ack(name, CommandKind.RESET, None, self.core.resets.attempt, ok, None, self.now)

    def checkpoint(self, answers: dict[str, Transactions | None], ok: bool = True) -> int:
        """One cycle; each member answers its checkpoint with ``answers[name]``."""
        self.now += 1.1
        self.core.tick(self.now)
        assert self.core.phase is RegionPhase.DRAINING
        seq = self.core.cycles.seq
        for name in sorted(self.core.waiting):
            self.core.ack(name, CommandKind.DRAIN, seq, None, True, None, self.now)
        for name in sorted(self.core.waiting):
            self.core.ack(
                name, CommandKind.CHECKPOINT, seq, None, ok, None, self.now, [], transactions=answers.get(name)
            )
        return seq

    def entries(self) -> dict[str, Resolve]:
        """The entries of the last persisted document."""
        return {e.member: e for e in RegionDocument.from_dict(self.docs[-1], "r").transactions}


def running(names: list[str], **cfg) -> Harness:
    h = Harness(names, **cfg)
    h.answer_reset()
    assert h.core.phase is RegionPhase.RUNNING
    return h


def resolve_of(sent: list[tuple[str, RegionCommand]]) -> dict[str, tuple[Resolve, ...]]:
    out = {}
    for name, command in sent:
        if command.KIND in (CommandKind.RESET, CommandKind.RESET_TO_INITIAL):
            out[name] = command.resolve
    return out


def test_a_completed_checkpoint_records_each_answering_members_transactions_before_the_resume():
    h = running(["m0", "m1", "m2"])
    mark = len(h.log)
    seq = h.checkpoint({"m0": txns("m0", 1), "m1": txns("m1", 1), "m2": None})
    assert h.core.phase is RegionPhase.RUNNING
    assert h.entries() == {"m0": Resolve("m0", seq, txns("m0", 1)), "m1": Resolve("m1", seq, txns("m1", 1))}
    kinds = [kind for kind, _ in h.log[mark:]]
    first_resume = next(
        i for i, (kind, c) in enumerate(h.log[mark:]) if kind == "send" and c[1].KIND is CommandKind.RESUME
    )
    assert "doc" in kinds[:first_resume]  # durable before anyone is told
    # the next checkpoint replaces each entry
    seq2 = h.checkpoint({"m0": txns("m0", 2), "m1": txns("m1", 2), "m2": None})
    assert h.entries()["m0"] == Resolve("m0", seq2, txns("m0", 2))
    status = h.core.status(h.now).transactions
    assert status == {"m0": ResolveStatus(seq2, 1, 2), "m1": ResolveStatus(seq2, 1, 2)}


def test_a_failed_checkpoint_records_nothing():
    h = running(["m0", "m1"])
    h.checkpoint({"m0": txns("m0", 1), "m1": txns("m1", 1)})
    before = h.entries()
    h.checkpoint({"m0": txns("m0", 2), "m1": txns("m1", 2)}, ok=False)
    assert h.core.phase is RegionPhase.RESETTING
    assert h.entries() == before
    assert h.core.checkpoints.transactions.get("m0") == before["m0"]


def test_a_checkpoint_the_continuity_fence_refuses_records_nothing():
    h = running(["m0", "m1"])
    h.checkpoint({"m0": txns("m0", 1), "m1": txns("m1", 1)})
    before = h.entries()
    h.now += 1.1
    h.core.tick(h.now)
    seq = h.core.cycles.seq
    for name in ("m0", "m1"):
        h.core.ack(name, CommandKind.DRAIN, seq, None, True, None, h.now)
    for name in ("m0", "m1"):  # both claim progress on one partition: refused
        h.core.ack(
            name, CommandKind.CHECKPOINT, seq, None, True, None, h.now, [["t", 0, 0, 5]], transactions=txns(name, 2)
        )
    assert h.core.phase is RegionPhase.RESETTING
    assert h.entries() == before


def test_a_member_answering_without_transactions_keeps_its_entry_while_it_has_prepared_ones():
    h = running(["m0", "m1"])
    seq = h.checkpoint({"m0": txns("m0", 1), "m1": Transactions((), ("m1-0",))})
    h.checkpoint({"m0": None, "m1": None})
    # m0's prepared transaction of seq is not known to be committed: kept; m1 had none: dropped
    assert h.entries() == {"m0": Resolve("m0", seq, txns("m0", 1))}


def dead_member_reset() -> tuple[Harness, int, int]:
    """m0, m1, m2 checkpoint with transactions; m0 dies (silent) and is removed; the
    failure reset starts. Returns the harness, the checkpoint and the log mark before the reset."""
    h = running(["m0", "m1", "m2"], member_timeout_s=2.0, reset_timeout_s=3.0)
    seq = h.checkpoint({n: txns(n, 1) for n in ("m0", "m1", "m2")})
    mark = len(h.log)
    h.now += 1.0
    h.heartbeat("m1", "m2")
    h.now += 1.5
    h.core.tick(h.now)  # m0 silent for 2.6 s
    assert "m0" not in h.core.members
    assert h.core.phase is RegionPhase.RESETTING
    return h, seq, mark


def test_a_dead_members_entry_goes_to_exactly_one_live_member_and_each_member_gets_its_own():
    h, seq, mark = dead_member_reset()
    resolve = resolve_of(h.sent(mark))
    own = {n: Resolve(n, seq, txns(n, 1)) for n in ("m0", "m1", "m2")}
    # m1 is the first of the round's members in sorted order
    assert resolve == {"m1": (own["m1"], own["m0"]), "m2": (own["m2"],)}
    # the attempt and the entries handed out were durable before the reset was sent
    first_reset = next(i for i, (kind, _) in enumerate(h.log[mark:]) if kind == "send")
    assert any(kind == "doc" for kind, _ in h.log[mark : mark + first_reset])


def test_a_completed_round_drops_the_absent_entries_and_keeps_only_the_live_members_fence_ids():
    h, seq, mark = dead_member_reset()
    mark = len(h.log)
    h.answer_reset()
    assert h.core.phase is RegionPhase.RUNNING
    fence_only = {n: Resolve(n, seq, Transactions((), (f"{n}-0", f"{n}-1"))) for n in ("m1", "m2")}
    assert h.entries() == fence_only
    # persisted before the RESUME
    resume = next(i for i, (kind, c) in enumerate(h.log[mark:]) if kind == "send" and c[1].KIND is CommandKind.RESUME)
    assert any(kind == "doc" for kind, _ in h.log[mark : mark + resume])
    assert h.core.status(h.now).transactions["m1"] == ResolveStatus(seq, 0, 2)
    # the next reset still fences the live members' ids, and hands out nothing else
    h.core.request_reset("m2", False, "sink error", h.now)
    assert resolve_of(h.sent(mark)) == {n: (fence_only[n],) for n in ("m1", "m2")}


def test_a_failed_reset_keeps_every_entry_and_the_next_round_hands_them_out_again():
    h, _seq, mark = dead_member_reset()
    first = resolve_of(h.sent(mark))
    before = h.entries()
    mark = len(h.log)
    h.core.ack("m1", CommandKind.RESET, None, h.core.resets.attempt, False, "resolver failed", h.now)
    assert h.core.phase is RegionPhase.RESETTING
    assert h.entries() == before
    assert h.core.checkpoints.transactions.entries() == tuple(before[n] for n in sorted(before))
    assert resolve_of(h.sent(mark)) == first
    h.answer_reset()
    assert set(h.entries()) == {"m1", "m2"}


def test_a_late_reset_keeps_every_entry():
    h, _seq, _mark = dead_member_reset()
    before = h.entries()
    h.answer_reset(only={"m2"})  # the resolver m1 never answers
    h.now += 1.5
    h.heartbeat("m1", "m2")
    h.now += 1.6
    h.heartbeat("m1", "m2")
    h.core.tick(h.now)  # reset_timeout_s (3 s) passed: a new round
    assert h.core.phase is RegionPhase.RESETTING
    assert h.entries() == before


def test_a_resolver_that_leaves_during_the_round_resolves_nothing_and_the_next_round_hands_it_on():
    h, seq, mark = dead_member_reset()
    h.answer_reset(only={"m2"})
    h.core.leave("m1", h.now)  # graceful leave during the round: the round goes on without it
    assert h.core.phase is RegionPhase.RUNNING
    # m2 resolved its own; m0's and m1's entries stay unresolved
    assert h.entries() == {
        "m0": Resolve("m0", seq, txns("m0", 1)),
        "m1": Resolve("m1", seq, txns("m1", 1)),
        "m2": Resolve("m2", seq, Transactions((), ("m2-0", "m2-1"))),
    }
    mark = len(h.log)
    h.core.request_reset("m2", False, "sink error", h.now)
    resolve = resolve_of(h.sent(mark))
    assert [(e.member, e.seq) for e in resolve["m2"]] == [("m2", seq), ("m0", seq), ("m1", seq)]
    h.answer_reset()
    assert set(h.entries()) == {"m2"}


def test_a_returning_member_resolves_its_own_entry_of_the_checkpoint_it_missed_the_resume_of():
    h, seq, mark = dead_member_reset()
    h.answer_reset(only={"m2"})  # m1 not yet: the round runs
    mark = len(h.log)
    h.core.join("m0", b"m0-new", "inc2", h.now)  # a new process of m0: the round restarts with it
    resolve = resolve_of(h.sent(mark))
    assert resolve["m0"] == (Resolve("m0", seq, txns("m0", 1)),)
    assert all(e.member == name for name, entries in resolve.items() for e in entries)


def test_a_coordinator_restart_keeps_the_entries_and_its_first_reset_hands_them_out():
    h = running(["m0", "m1"])
    seq = h.checkpoint({"m0": txns("m0", 1), "m1": txns("m1", 1)})
    restored = Harness(["m0", "m1"], doc=h.docs[-1])
    assert restored.core.phase is RegionPhase.RESETTING
    assert resolve_of(restored.sent()) == {n: (Resolve(n, seq, txns(n, 1)),) for n in ("m0", "m1")}


def test_status_shows_the_entries_per_member_and_crkafka_status_renders_them():
    h, seq, _mark = dead_member_reset()
    region = h.core.status(h.now)
    assert region.transactions["m0"] == ResolveStatus(seq, 1, 2)
    # an entry whose cluster the coordinator tried itself and failed on
    failed = ResolveStatus(seq, 1, 2, "127.0.0.1:9092", "EndTxn timed out")
    region = attrs.evolve(region, transactions={**region.transactions, "m1": failed})
    snap = CoordinatorStatus(
        endpoint="tcp://x", loaded=True, uptime_s=0.0, store=None, load=None, limits={}, regions={"r": region}
    )
    doc = build_document(snap, [], coordinator="tcp://x", bootstrap=None, errors=[])
    assert doc["regions"]["r"]["transactions"]["m0"]["prepared"] == 1
    text = format_document(doc)
    assert "transactions to resolve (3 members)" in text
    lines = [line.split() for line in text.splitlines()]
    assert ["r", "m0", str(seq), "1", "2", "(members", "only)"] in lines  # no cluster: only a member resolves it
    assert ["r", "m1", str(seq), "1", "2", "127.0.0.1:9092", "EndTxn", "timed", "out"] in lines


# --------------------------------------------------------------------------- the durable document


def stored(h: Harness) -> dict:
    return dict(h.docs[-1])


def test_the_document_round_trips_the_entries():
    h = running(["m0", "m1"])
    h.checkpoint({"m0": txns("m0", 1), "m1": None})
    doc = stored(h)
    assert doc["version"] == DOC_VERSION == 3
    parsed = RegionDocument.from_dict(doc, "r")
    assert parsed.to_dict() == doc
    assert RegionCore(h.core.config, lambda m, c: None, lambda d: None, doc).document() == doc


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "is not a list"),
        ({"member": "m0"}, "is not a list"),
        ([{"member": "m0", "seq": 1, "prepared": [], "fence": "m0-0"}], "fence"),
        (
            [
                {
                    "member": "m0",
                    "seq": 1,
                    "prepared": [{"tid": "t", "pid": -1, "epoch": 0, "partitions": []}],
                    "fence": [],
                }
            ],
            "pid",
        ),
        (
            [
                {
                    "member": "m0",
                    "seq": 1,
                    "prepared": [{"tid": "t", "pid": 1, "epoch": 1 << 15, "partitions": []}],
                    "fence": [],
                }
            ],
            "epoch",
        ),
        ([{"member": "m0", "seq": "1", "prepared": [], "fence": []}], "seq"),
        ([{"member": "m0\n", "seq": 1, "prepared": [], "fence": []}], "member"),
        ([{"member": "m0", "seq": 1, "prepared": [], "fence": [], "bootstrap": None}] * 2, "more than once"),
        (
            [{"member": "m0", "seq": 9, "prepared": [], "fence": [], "bootstrap": None}],
            "after the last consistent checkpoint",
        ),
        ([{"member": "m0", "seq": 1, "prepared": [{}] * 65, "fence": []}], "at most 64"),
    ],
)
def test_a_bad_stored_entry_makes_the_document_unusable(value, message):
    h = running(["m0", "m1"])
    h.checkpoint({"m0": txns("m0", 1), "m1": None})
    doc = stored(h)
    doc["transactions"] = value
    with pytest.raises(ValueError, match=message):
        RegionDocument.from_dict(doc, "r")


def test_a_document_without_entries_or_of_the_previous_version_is_refused():
    h = running(["m0"])
    doc = stored(h)
    del doc["transactions"]
    with pytest.raises(ValueError, match=r"lacks the fields \['transactions'\]"):
        RegionDocument.from_dict(doc, "r")
    doc = {**stored(h), "version": 2}  # entries without their cluster
    with pytest.raises(ValueError, match="version 2 is not 3"):
        RegionDocument.from_dict(doc, "r")


def test_entries_without_a_consistent_checkpoint_are_refused():
    h = Harness(["m0"])  # no checkpoint yet
    doc = stored(h)
    doc["transactions"] = [{"member": "m0", "seq": 0, "prepared": [], "fence": ["m0-0"], "bootstrap": None}]
    with pytest.raises(ValueError, match="after the last consistent checkpoint None"):
        RegionDocument.from_dict(doc, "r")


def test_the_stored_entries_are_bounded_by_what_one_reset_may_carry():
    entries = [{"member": f"m{i}", "seq": 1, "prepared": [], "fence": []} for i in range(MAX_RESOLVE + 1)]
    with pytest.raises(ValueError, match=f"at most {MAX_RESOLVE}"):
        ResolveEntries.from_doc(entries)


def test_the_resolver_gets_at_most_what_one_reset_may_carry_oldest_first():
    book = ResolveEntries([Resolve(f"a{i:05d}", 10_000 - i, Transactions((), ("x",))) for i in range(MAX_RESOLVE + 5)])
    handed = book.hand_out(["live"])
    assert list(handed) == ["live"]
    assert len(handed["live"]) == MAX_RESOLVE
    assert handed["live"][0].seq == 10_000 - (MAX_RESOLVE + 4)  # the oldest checkpoint first
    assert len(book.round_completed({"live"}).dropped) == MAX_RESOLVE
    assert len(book) == 5  # the newest wait for the next round
    assert len(book.hand_out(["live"])["live"]) == 5


def test_an_entry_replaced_after_it_was_handed_out_is_left_alone():
    book = ResolveEntries([Resolve("m0", 1, txns("m0", 1)), Resolve("m1", 1, txns("m1", 1))])
    book.hand_out(["m1"])
    book.checkpoint_completed(2, {"m0": txns("m0", 2)})  # not while a round runs in the core; kept safe here
    assert book.round_completed({"m1"}).dropped == ()
    assert book.entries() == (Resolve("m0", 2, txns("m0", 2)), Resolve("m1", 1, Transactions((), ("m1-0", "m1-1"))))
