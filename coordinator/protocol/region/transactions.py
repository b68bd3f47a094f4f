"""Kafka transactions in the region protocol: what a member's transactional sinks prepared at a
checkpoint, and what the region asks a member to resolve at a reset.

A transactional sink (``cr_consumer/runtime/pipeline/kafka_sink.py``) writes each checkpoint
interval in one Kafka transaction and leaves it open at the checkpoint. The region decides its
fate, so that no transaction waits for the member that wrote it:

1. A member's checkpoint ack carries :class:`Transactions`: the transactions its sinks prepared
   for that checkpoint (flushed, still open: :class:`PreparedTxn`, with the producer id and epoch
   another process needs to end it, and where its records start in each partition),
   ``fence``, every transactional id its sinks write with, and ``bootstrap``, their cluster.
2. When the checkpoint completes, the controller records each answering member's
   ``Transactions`` with the checkpoint's seq as that member's :class:`Resolve` entry, in the
   region's durable document (replacing the member's previous entry). The member commits its own
   prepared transactions when the RESUME naming that checkpoint reaches it.
3. Every reset command carries the entries its receiver must resolve (``Reset.resolve``,
   ``ResetToInitial.resolve``): its own entry, and, for exactly one live member of the reset, the
   entries of members absent from it (dead, paused past their timeout, removed). The receiver,
   before it resets its operators, commits every prepared transaction of an entry (EndTxn with
   the recorded producer id and epoch; a repeated commit is harmless), then fences every
   transactional id of ``fence`` (``init_transactions``, which aborts whatever interval that
   member had open after the checkpoint). A commit refused or found aborted fails the reset,
   naming the transaction, its partitions and offsets: output of a completed checkpoint is never
   dropped silently.
4. When every member acknowledged the reset, the controller drops the resolved entries of absent
   members and the prepared transactions of the live ones (their fence lists stay until their
   next completed checkpoint replaces them). An entry handed to a member that left during the
   round is not resolved: the next round hands it out again.

Why a commit at step 3 can never commit a newer transaction under the same transactional id: a
sink alternates two transactional ids, one per interval; the interval after checkpoint ``n``
writes with the id not prepared at ``n``, and the id prepared at ``n`` is written again only
after checkpoint ``n + 1`` completed, when ``n + 1``'s entry has replaced ``n``'s in the document.
After a reset the fenced ids start over at a new producer epoch, so a stale entry's commit is
refused as fenced; the resolver then reads the partitions' control markers to learn the outcome.

A crash (or a pause past the member timeout) of the writer at each step, and what decides:

* before or during the checkpoint's flush (no answer): the checkpoint fails; the reset's fence
  aborts the open transaction and the interval is replayed from the last consistent checkpoint;
* after its answer: the checkpoint still completes (every member answered) and records the
  writer's entry; the reset that its timeout brings commits the prepared transaction through
  another member (or through the writer's own next process, if that joins first; with no
  member left, the coordinator does it, steps 5-7);
* between completion and the writer's own commit (a lost RESUME included): the same, from the
  entry already in the document;
* after its commit: the reset's commit is repeated (harmless; the markers confirm it) and the
  fence aborts the interval it had open since, which is replayed;
* a paused writer that comes back after the fence: its producer is fenced, every later send or
  commit fails, its next drain fails, and the region resets it like any other member.

No live member. An open transaction holds back every ``read_committed`` reader of its
partitions, and the broker never aborts an abandoned one before ``transaction.timeout.ms`` (the
test broker never does), so nothing waits for a member to return. Each ``Transactions`` names the
cluster it is on (``bootstrap``, the sink's; null when a member's sinks write to different
clusters: then only a member resolves them), and the coordinator resolves the entries itself
(``coordinator/region/abandoned.py`` decides, ``coordinator/region/txn_worker.py`` does the
Kafka work off the loop thread):

5. The region has had no member for ``RESOLVE_AFTER_S`` (10 s), or has been FAILED that long (its
   members were told to exit; none resumes): the coordinator takes its entries
   that name a cluster as one job and holds the region's start: no reset round begins, so no
   RESUME is sent, while the job runs.
6. The worker, per entry: commits each prepared transaction (EndTxn with the recorded producer
   id and epoch) and reads its markers back (only a COMMIT marker in every partition counts: the
   test broker answers NoError to a commit of an aborted transaction); then fences each id of
   ``fence`` (the member's open interval is aborted). Every Kafka call is bounded. A failure is
   logged naming the member, checkpoint and transactions, shown in ``region_status``
   (``transactions``, ``error``), and the next job waits the backoff's delay.
7. On the loop thread: each entry the job resolved whole, and still recorded as it was handed to
   the job, is dropped and the document persisted; the hold ends. A member that joined meanwhile
   cancelled the job at its next step; the region then starts, and the reset hands out what is
   still recorded (step 3).

A crash of the coordinator at each step: before the commit, the entries are still in the
document: the next coordinator (or a member's reset) does it all; after the commit, the commit
is repeated (NoError, no second marker) or refused as fenced, and the markers confirm it; after
the fence, a second fence only moves the id to another epoch; before the drop is durable, the
same as after the fence.

Why the coordinator and a member never resolve one entry against each other: a commit is
idempotent (a repeated EndTxn writes no second marker; one refused as fenced is decided by the
markers), a fence is idempotent on an id nobody writes with, and the drop happens once, on the
loop thread, only for an entry still recorded as the job took it (a member's round that dropped
or replaced it first is left alone, and a round's drop skips an entry the job dropped). What a
late fence could hurt is a new interval on the same id: a returning member's sink writes only
after the RESUME of the reset its join brings, and that round does not start while the job runs
(step 5's hold; the job ends within its step bounds once cancelled). A process the table does
not hold but that still runs (paused past its timeout, or not yet joined again after a
coordinator restart) is a writer like the paused one of the list above: its open interval is
aborted, its next commit fails, and the region resets it once it joins; no checkpoint completes
while the job runs (no round starts), and the entry it takes holds the only prepared
transactions of a completed checkpoint, which the job commits before it fences.

Every field is bounded (:data:`MAX_PREPARED`, :data:`MAX_FENCE`, :data:`MAX_TXN_PARTITIONS`,
:data:`MAX_RESOLVE`) and decoded with the wire's field checks (an ``Invalid`` names the field).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

from coordinator.protocol.wire import fields
from coordinator.protocol.wire.errors import Invalid

#: Most prepared transactions one member reports per checkpoint (one per transactional sink it
#: runs, a dead-letter sink included): bounds the document's size per member.
MAX_PREPARED = 64
#: Most transactional ids one member reports (two per sink).
MAX_FENCE = 2 * MAX_PREPARED
#: Most partitions one prepared transaction names (a sink writing to topics of up to this many
#: partitions in all).
MAX_TXN_PARTITIONS = 10_000
#: Most entries one reset command asks its receiver to resolve (its own and the absent members').
MAX_RESOLVE = 10_000
#: Kafka's producer epoch is an int16.
MAX_EPOCH = (1 << 15) - 1
#: Most hosts, and characters, of a reported cluster's bootstrap list: a bootstrap list names a
#: few brokers, and the coordinator tries them in turn (a long list is a slow failure).
MAX_BOOTSTRAP_HOSTS = 16
MAX_BOOTSTRAP_LEN = 1024
_HOST_PORT = re.compile(
    r"(?:[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,251}[A-Za-z0-9_])?|\[[0-9A-Fa-f:.]{2,45}\]):(?P<port>[0-9]{1,5})"
)


def _check_list(value: Any, what: str, most: int) -> list[Any]:
    if not isinstance(value, list) or len(value) > most:
        raise Invalid(f"{what} must be a list of at most {most} entries")
    return value


@attrs.frozen
class TxnPartition:
    """A partition a prepared transaction wrote to, and the offset of its first record there."""

    topic: str
    partition: int
    first_offset: int

    def to_wire(self) -> list[Any]:
        return [self.topic, self.partition, self.first_offset]

    @classmethod
    def from_wire(cls, value: Any, what: str) -> TxnPartition:
        if not isinstance(value, list) or len(value) != 3:
            raise Invalid(f"{what} must be [topic, partition, first offset]")
        topic, partition, first = value
        return cls(
            fields.check_name(topic, f"{what}[0]"),
            fields.check_int(partition, f"{what}[1]", 0, fields.MAX_PARTITION),
            fields.check_int(first, f"{what}[2]", 0, fields.MAX_OFFSET),
        )


@attrs.frozen
class PreparedTxn:
    """Step 1: an open transaction, flushed, that another process can end (EndTxn)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[TxnPartition, ...] = ()

    def describe(self) -> str:
        where = ", ".join(f"{p.topic}[{p.partition}] from {p.first_offset}" for p in self.partitions[:10])
        more = f" and {len(self.partitions) - 10} more" if len(self.partitions) > 10 else ""
        return (
            f"transaction {self.transactional_id!r} (producer {self.producer_id}, epoch {self.producer_epoch};"
            f" {where or 'no records'}{more})"
        )

    def to_wire(self) -> dict[str, Any]:
        return {
            "tid": self.transactional_id,
            "pid": self.producer_id,
            "epoch": self.producer_epoch,
            "partitions": [p.to_wire() for p in self.partitions],
        }

    @classmethod
    def from_wire(cls, value: Any, what: str) -> PreparedTxn:
        if not isinstance(value, Mapping):
            raise Invalid(f"{what} must be an object")
        partitions = _check_list(value.get("partitions"), f"{what}.partitions", MAX_TXN_PARTITIONS)
        return cls(
            fields.check_name(value.get("tid"), f"{what}.tid"),
            fields.check_int(value.get("pid"), f"{what}.pid", 0, fields.MAX_OFFSET),
            fields.check_int(value.get("epoch"), f"{what}.epoch", 0, MAX_EPOCH),
            tuple(TxnPartition.from_wire(p, f"{what}.partitions[{i}]") for i, p in enumerate(partitions)),
        )


def check_bootstrap(value: Any, what: str) -> str:
    """A cluster's bootstrap list as the coordinator connects to it: ``HOST:PORT[,HOST:PORT...]``,
    at most :data:`MAX_BOOTSTRAP_HOSTS` hosts and :data:`MAX_BOOTSTRAP_LEN` characters; a host is a
    DNS name or IPv4 address (letters, digits, ``.``, ``-``, ``_``) or a bracketed IPv6 address,
    a port 1-65535. Anything else (a scheme, spaces, control characters, an empty host) is
    refused: the coordinator opens connections to what it is given."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_BOOTSTRAP_LEN:
        raise Invalid(f"{what} must be a string of 1 to {MAX_BOOTSTRAP_LEN} characters")
    hosts = value.split(",")
    if len(hosts) > MAX_BOOTSTRAP_HOSTS:
        raise Invalid(f"{what} names more than {MAX_BOOTSTRAP_HOSTS} hosts")
    for i, host in enumerate(hosts):
        match = _HOST_PORT.fullmatch(host)
        if match is None or not 0 < int(match.group("port")) < 65536:
            raise Invalid(f"{what}: host {i} {host[:80]!r} is not HOST:PORT (port 1-65535)")
    return value


@attrs.frozen
class Transactions:
    """Step 1: a checkpoint ack's transactions: the prepared ones, every transactional id in use,
    and ``bootstrap``, the cluster they are on (None: not known as one cluster; then only a
    member resolves them, with its own cluster settings)."""

    prepared: tuple[PreparedTxn, ...] = ()
    fence: tuple[str, ...] = ()
    bootstrap: str | None = None

    def to_wire(self) -> dict[str, Any]:
        return {
            "prepared": [t.to_wire() for t in self.prepared],
            "fence": list(self.fence),
            "bootstrap": self.bootstrap,
        }

    @classmethod
    def from_wire(cls, value: Any, what: str = "field 'transactions'") -> Transactions:
        if not isinstance(value, Mapping):
            raise Invalid(f"{what} must be an object with 'prepared', 'fence' and 'bootstrap'")
        prepared = _check_list(value.get("prepared"), f"{what}.prepared", MAX_PREPARED)
        fence = _check_list(value.get("fence"), f"{what}.fence", MAX_FENCE)
        txns = tuple(PreparedTxn.from_wire(t, f"{what}.prepared[{i}]") for i, t in enumerate(prepared))
        ids = tuple(fields.check_name(tid, f"{what}.fence[{i}]") for i, tid in enumerate(fence))
        if "bootstrap" not in value:
            raise Invalid(f"{what} lacks 'bootstrap' (null: not one known cluster)")
        bootstrap = value["bootstrap"]
        return cls(txns, ids, None if bootstrap is None else check_bootstrap(bootstrap, f"{what}.bootstrap"))

    def __add__(self, other: Transactions) -> Transactions:
        """Two sinks' transactions as one member's (the fence ids in first-seen order, once each;
        the cluster only when both name the same one)."""
        bootstrap = self.bootstrap if self.bootstrap == other.bootstrap else None
        return Transactions(self.prepared + other.prepared, tuple(dict.fromkeys(self.fence + other.fence)), bootstrap)


@attrs.frozen
class Resolve:
    """Steps 2-3: one member's transactions of its last completed checkpoint ``seq``, to be resolved."""

    member: str
    seq: int
    transactions: Transactions

    def to_wire(self) -> dict[str, Any]:
        return {"member": self.member, "seq": self.seq, **self.transactions.to_wire()}

    @classmethod
    def from_wire(cls, value: Any, what: str) -> Resolve:
        if not isinstance(value, Mapping):
            raise Invalid(f"{what} must be an object")
        return cls(
            fields.check_name(value.get("member"), f"{what}.member"),
            fields.check_int(value.get("seq"), f"{what}.seq", 0, fields.MAX_INT),
            Transactions.from_wire(value, what),
        )


def encode_resolve(entries: tuple[Resolve, ...]) -> list[dict[str, Any]]:
    return [entry.to_wire() for entry in entries]


def decode_resolve(value: Any, name: str = "resolve") -> tuple[Resolve, ...]:
    """A reset command's ``resolve`` field (absent or null: nothing to resolve)."""
    if value is None:
        return ()
    entries = _check_list(value, f"field '{name}'", MAX_RESOLVE)
    return tuple(Resolve.from_wire(e, f"field '{name}'[{i}]") for i, e in enumerate(entries))


__all__ = [
    "MAX_BOOTSTRAP_HOSTS",
    "MAX_BOOTSTRAP_LEN",
    "MAX_FENCE",
    "MAX_PREPARED",
    "MAX_RESOLVE",
    "MAX_TXN_PARTITIONS",
    "PreparedTxn",
    "Resolve",
    "Transactions",
    "TxnPartition",
    "check_bootstrap",
    "decode_resolve",
    "encode_resolve",
]
