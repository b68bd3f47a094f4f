"""The coordinator's own resolution of a region's Kafka transactions when no member is live
(``coordinator/protocol/region/transactions.py``, "no live member"), without sockets or
brokers: when a job is due (``coordinator/region/abandoned.py``), what a job's outcome drops
from the region (``ResolveEntries.resolved_elsewhere``, ``RegionCore``), the hold of the
region's start, the worker's job loop with a resolver that fails or is cancelled, and the
decoding of the cluster a member reports. The Kafka side is tested against the broker in
``tests/runtime/runner/test_region_kafka_sink.py``."""

from __future__ import annotations

import json
import threading

import pytest

from coordinator.protocol.region.commands import CommandKind
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.replies import RegionPhase
from coordinator.protocol.region.status import ResolveStatus
from coordinator.protocol.region.transactions import (
    MAX_BOOTSTRAP_HOSTS,
    PreparedTxn,
    Resolve,
    Transactions,
    TxnPartition,
)
from coordinator.protocol.wire.errors import Invalid
from coordinator.region.abandoned import RESOLVE_AFTER_S, RETRY_FIRST_S, AbandonedResolve, JobOutcome, ResolveJob
from coordinator.region.machine import RegionCore
from coordinator.region.txn_client import load_client_config
from coordinator.region.txn_worker import JobCancelled, TxnWorker, run_job

CLUSTER = "127.0.0.1:9092"


def entry(name: str, seq: int, bootstrap: str | None = CLUSTER) -> Resolve:
    """``name``'s entry of checkpoint ``seq``: one prepared transaction, two fence ids."""
    partition = int(name[-1])
    txn = PreparedTxn(f"{name}-{seq % 2}", 100 + partition, 3, (TxnPartition("out", partition, seq * 10),))
    return Resolve(name, seq, Transactions((txn,), (f"{name}-0", f"{name}-1"), bootstrap))


class Harness:
    """A running core whose persisted documents are kept, in order."""

    def __init__(self, names: list[str]) -> None:
        self.docs: list[dict] = []
        config = RegionConfig(name="r", min_members=len(names), period_s=1.0)
        self.core = RegionCore(config, lambda member, command: None, self.docs.append)
        self.now = 0.0
        for name in names:
            self.core.join(name, name.encode(), "inc1", self.now)
        self.answer_reset()
        assert self.core.phase is RegionPhase.RUNNING

    def answer_reset(self) -> None:
        for name in sorted(self.core.waiting):
            self.core.ack(name, CommandKind.RESET, None, self.core.resets.attempt, True, None, self.now)

    def checkpoint(self, answers: dict[str, Transactions | None]) -> int:
        self.now += 1.1
        self.core.tick(self.now)
        assert self.core.phase is RegionPhase.DRAINING
        seq = self.core.cycles.seq
        for name in sorted(self.core.waiting):
            self.core.ack(name, CommandKind.DRAIN, seq, None, True, None, self.now)
        for name in sorted(self.core.waiting):
            self.core.ack(name, CommandKind.CHECKPOINT, seq, None, True, None, self.now, [], transactions=answers[name])
        return seq


def running(names: list[str]) -> Harness:
    return Harness(names)


def stored(h: Harness) -> dict:
    return h.docs[-1]


# ---------------------------------------------------------------------- when a job is due
def test_a_job_is_due_only_after_the_region_had_no_member_for_the_bound():
    plan = AbandonedResolve()
    entries = (entry("m0", 3),)
    assert plan.due("r", 0.0, members=1, entries=entries) is None
    assert plan.due("r", 1.0, members=0, entries=entries) is None  # alone since 1.0
    assert plan.due("r", 1.0 + RESOLVE_AFTER_S - 0.1, members=0, entries=entries) is None
    assert plan.due("r", 1.5 + RESOLVE_AFTER_S, members=1, entries=entries) is None  # a member came back
    assert plan.due("r", 2.0 + RESOLVE_AFTER_S, members=0, entries=entries) is None  # the clock starts again
    job = plan.due("r", 2.0 + 2 * RESOLVE_AFTER_S, members=0, entries=entries)
    assert job is not None
    assert job.entries == entries
    # one job per region at a time
    assert plan.due("r", 3.0 + 2 * RESOLVE_AFTER_S, members=0, entries=entries) is None


def test_only_entries_that_name_their_cluster_are_taken_oldest_first():
    plan = AbandonedResolve(after_s=0.0)
    assert plan.due("r", 0.0, members=0, entries=(entry("m0", 3, None),)) is None
    job = plan.due("r", 0.0, members=0, entries=(entry("m2", 5), entry("m0", 3, None), entry("m1", 4)))
    assert job is not None
    assert [e.member for e in job.entries] == ["m1", "m2"]


def test_a_failed_job_is_retried_after_the_backoff_and_a_joiner_cancels_the_running_one():
    plan = AbandonedResolve(after_s=0.0)
    entries = (entry("m0", 3),)
    job = plan.due("r", 0.0, members=0, entries=entries)
    assert job is not None
    plan.cancel()
    assert job.cancel.is_set()
    delay = plan.finished(JobOutcome(job, (), {"m0": (entries[0], "refused")}, cancelled=False), 10.0)
    assert delay == RETRY_FIRST_S
    assert plan.due("r", 10.0 + RETRY_FIRST_S - 0.1, members=0, entries=entries) is None
    again = plan.due("r", 10.0 + RETRY_FIRST_S, members=0, entries=entries)
    assert again is not None
    assert not again.cancel.is_set()
    second = plan.finished(JobOutcome(again, (), {"m0": (entries[0], "refused")}, cancelled=False), 20.0)
    assert second == 2 * RETRY_FIRST_S  # doubling
    assert plan.due("r", 20.0 + second, members=0, entries=entries) is not None


def test_a_failed_region_is_resolved_although_it_still_lists_its_members():
    """A FAILED region keeps its members listed (its tick does nothing more), but they were told to
    exit and none resumes: after the bound its entries are the coordinator's, and a member still
    listed neither delays nor cancels the job."""
    h = running(["m0", "m1"])
    seq = h.checkpoint({"m0": entry("m0", 1).transactions, "m1": entry("m1", 1).transactions})
    h.core.fail("too many consecutive resets", h.now)
    assert h.core.phase is RegionPhase.FAILED
    assert set(h.core.members) == {"m0", "m1"}
    entries = h.core.checkpoints.transactions.entries()
    plan = AbandonedResolve()
    members = len(h.core.members)
    assert plan.due("r", h.now, members=members, entries=entries) is None  # not FAILED: live members hold it
    assert plan.due("r", h.now, members=members, entries=entries, failed=True) is None  # FAILED since now
    assert plan.due("r", h.now + RESOLVE_AFTER_S - 0.1, members=members, entries=entries, failed=True) is None
    job = plan.due("r", h.now + RESOLVE_AFTER_S, members=members, entries=entries, failed=True)
    assert job is not None
    assert [(e.member, e.seq) for e in job.entries] == [("m0", seq), ("m1", seq)]
    docs = len(h.docs)
    h.core.resolved_elsewhere(job.entries, {})
    assert len(h.docs) == docs + 1
    assert stored(h)["transactions"] == []
    assert stored(h)["failed"] is True  # resolving changes nothing else, durably too
    assert h.core.phase is RegionPhase.FAILED


# ---------------------------------------------------------------------- what an outcome drops
def left_alone() -> tuple:
    """m0 and m1 checkpointed with transactions on the cluster, then both left."""
    h = running(["m0", "m1"])
    seq = h.checkpoint({"m0": entry("m0", 1).transactions, "m1": entry("m1", 1).transactions})
    for name in ("m0", "m1"):
        h.core.leave(name, h.now)
    assert h.core.phase is RegionPhase.WAITING
    return h, seq


def test_an_outcome_drops_the_resolved_entries_once_and_durably_and_keeps_the_failures_in_the_status():
    h, seq = left_alone()
    e0, e1 = h.core.checkpoints.transactions.get("m0"), h.core.checkpoints.transactions.get("m1")
    assert e0 == entry("m0", seq)
    assert e1 == entry("m1", seq)
    docs = len(h.docs)
    h.core.resolved_elsewhere((e0,), {"m1": (e1, "TransactionEndError: no broker")})
    assert len(h.docs) == docs + 1
    assert [e["member"] for e in h.docs[-1]["transactions"]] == ["m1"]
    row = h.core.status(h.now).transactions["m1"]
    assert row == ResolveStatus(seq, 1, 2, CLUSTER, "TransactionEndError: no broker")
    assert ResolveStatus.from_body(row.to_body()) == row  # what crkafka status reads back
    # the same outcome again (or a member's round after it) drops nothing more and writes nothing
    h.core.resolved_elsewhere((e0,), {})
    assert len(h.docs) == docs + 1
    # the document a restarted coordinator reads has no m0 entry
    assert [e["member"] for e in stored(h)["transactions"]] == ["m1"]


def test_an_entry_replaced_since_the_job_took_it_is_left_alone():
    h = running(["m0"])
    seq = h.checkpoint({"m0": entry("m0", 1).transactions})
    taken = h.core.checkpoints.transactions.get("m0")
    seq2 = h.checkpoint({"m0": entry("m0", 2).transactions})  # a live member's next checkpoint
    docs = len(h.docs)
    h.core.resolved_elsewhere((taken,), {"m0": (taken, "late failure")})
    assert h.core.checkpoints.transactions.get("m0") == entry("m0", seq2)
    assert seq2 > seq
    assert len(h.docs) == docs
    assert h.core.status(h.now).transactions["m0"].error is None


def test_a_held_region_does_not_start_until_the_job_ends():
    h, _seq = left_alone()
    h.core.hold_start(True)
    h.core.join("m0", b"m0", "inc2", h.now)
    h.core.join("m1", b"m1", "inc2", h.now)
    h.now += 1.0
    h.core.members.heartbeat("m0", b"m0", "inc2", h.now)
    h.core.members.heartbeat("m1", b"m1", "inc2", h.now)
    h.core.tick(h.now)
    assert h.core.phase is RegionPhase.WAITING
    h.core.hold_start(False)
    h.core.tick(h.now)
    assert h.core.phase is RegionPhase.RESETTING


def test_a_round_that_handed_out_an_entry_the_coordinator_dropped_meanwhile_drops_nothing_twice():
    h, seq = left_alone()
    e0 = h.core.checkpoints.transactions.get("m0")
    handed = h.core.checkpoints.transactions.hand_out(["m2"])
    assert handed == {"m2": (entry("m0", seq), entry("m1", seq))}
    h.core.resolved_elsewhere((e0,), {})
    resolved = h.core.checkpoints.transactions.round_completed(["m2"])
    assert resolved.dropped == ("m1",)
    assert h.core.checkpoints.transactions.entries() == ()


# ---------------------------------------------------------------------- the worker's job loop
def test_a_job_resolves_each_entry_and_reports_the_failed_ones_with_the_reason():
    entries = (entry("m0", 1), entry("m1", 1), entry("m2", 1))
    tried: list[str] = []

    def resolve(e: Resolve, cancel: threading.Event) -> None:
        tried.append(e.member)
        if e.member == "m1":
            raise RuntimeError("m1's transaction was aborted")

    outcome = run_job(ResolveJob("r", entries), resolve)
    assert tried == ["m0", "m1", "m2"]  # a failure does not stop the others
    assert outcome.resolved == (entries[0], entries[2])
    assert outcome.failed == {"m1": (entries[1], "RuntimeError: m1's transaction was aborted")}
    assert not outcome.cancelled


def test_a_cancelled_job_stops_at_its_next_step_and_the_worker_reports_it():
    entries = (entry("m0", 1), entry("m1", 1))
    reported: list[JobOutcome] = []
    done = threading.Event()
    started = threading.Event()
    release = threading.Event()

    def resolve(e: Resolve, cancel: threading.Event) -> None:
        if cancel.is_set():
            raise JobCancelled()
        started.set()
        assert release.wait(10)

    def report(outcome: JobOutcome) -> None:
        reported.append(outcome)
        done.set()

    worker = TxnWorker(report, resolve)
    job = ResolveJob("r", entries)
    worker.submit(job)
    assert started.wait(10)
    job.cancel.set()  # a member joined while m0's step runs
    release.set()
    assert done.wait(10)
    worker.stop(10)
    [outcome] = reported
    assert outcome.resolved == (entries[0],)
    assert outcome.cancelled
    with pytest.raises(RuntimeError, match="stopped"):
        worker.submit(ResolveJob("r", entries))


# ---------------------------------------------------------------------- the reported cluster
@pytest.mark.parametrize(
    "bootstrap",
    ["127.0.0.1:9092", "kafka-0.example.com:9093,kafka-1.example.com:9093", "[::1]:9092", "broker_1:1"],
)
def test_a_cluster_is_carried_and_decoded(bootstrap):
    t = Transactions((PreparedTxn("t-0", 1, 0, (TxnPartition("out", 0, 5),)),), ("t-0", "t-1"), bootstrap)
    assert Transactions.from_wire(t.to_wire()) == t


@pytest.mark.parametrize(
    "bootstrap",
    [
        "",
        "kafka",
        "kafka:0",
        "kafka:65536",
        "kafka:-1",
        "ka fka:9092",
        "PLAINTEXT://kafka:9092",
        "kafka:9092,",
        ",kafka:9092",
        "kafka:9092\n",
        "kafka\x00:9092",
        "-kafka:9092",
        "[not-ipv6]:9092",
        "k" * 300 + ":9092",
        ",".join(["kafka:9092"] * (MAX_BOOTSTRAP_HOSTS + 1)),
        "kafka:9092," + "a" * 1100 + ":1",
        9092,
        ["kafka:9092"],
    ],
)
def test_a_hostile_or_invalid_cluster_is_refused_at_decode(bootstrap):
    wire = {**Transactions((), ("t-0",)).to_wire(), "bootstrap": bootstrap}
    with pytest.raises(Invalid, match="bootstrap"):
        Transactions.from_wire(wire)


def test_a_cluster_must_be_named_or_null_and_two_sinks_on_two_clusters_name_none():
    wire = Transactions((), ("t-0",)).to_wire()
    del wire["bootstrap"]
    with pytest.raises(Invalid, match="lacks 'bootstrap'"):
        Transactions.from_wire(wire)
    a = Transactions((), ("a-0",), "a:1")
    assert (a + Transactions((), ("b-0",), "a:1")).bootstrap == "a:1"
    assert (a + Transactions((), ("b-0",), "b:1")).bootstrap is None


# ---------------------------------------------------------------------- the coordinator's client settings
def test_the_client_config_file_gives_security_settings_and_refuses_anything_else(tmp_path):
    path = tmp_path / "resolve-kafka.json"
    path.write_text(json.dumps({"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"}))
    path.chmod(0o600)
    settings = load_client_config(path).settings("kafka:9093")
    assert settings["security_protocol"] == "SASL_SSL"
    assert settings["bootstrap_servers"] == "kafka:9093"
    path.chmod(0o644)
    with pytest.raises(ValueError, match="chmod 600"):
        load_client_config(path)
    path.chmod(0o600)
    for bad, why in (
        ({"bootstrap_servers": "elsewhere:1"}, "not a security_"),
        ({"security_protocl": "SSL"}, "not a security_"),
        ({"ssl_cafile": ["a"]}, "a string, number"),
        ({"sasl_plain_password": "x" * 5000}, "longer than"),
        (["security_protocol"], "not a JSON object"),
    ):
        path.write_text(json.dumps(bad))
        with pytest.raises(ValueError, match=why):
            load_client_config(path)
