"""Ending transactions that another process prepared, and the resolver of a reset's
``resolve`` entries (``coordinator/protocol/region/transactions.py``, step 3).

Kafka's own clients end only their own transaction. The protocol allows more: the transaction
coordinator accepts ``EndTxn(transactional_id, producer_id, producer_epoch, committed)`` from
any connection that names the transaction's current producer id and epoch, and
``InitProducerId(transactional_id)`` from any connection, which bumps the epoch (fencing the
producer that held it) and aborts the id's open transaction. The test broker does both too
(``tests/kafka_clients/test_resolver.py``).

:func:`end_prepared` (one transaction):

1. FindCoordinator for the transactional id (``key_type`` 1), then EndTxn to that broker, each
   bounded by the request timeout and the whole by ``deadline_s``.
2. An answer other than NoError raises ``TransactionEndError`` naming the transaction. A fenced
   epoch: a real Kafka answers ``ProducerFenced`` (or ``InvalidProducerEpoch``); the test
   broker drops the connection instead, which fails the request as a connection error: raised
   the same way, never retried without bound. A repeated commit answers NoError and writes no
   second marker. The test broker answers NoError to ``EndTxn(commit)`` of a transaction it
   already aborted (a real Kafka answers ``InvalidTxnState``): the resolver therefore never
   trusts the answer alone.

:func:`fence` (one transactional id): FindCoordinator, then ``InitProducerId`` with the id (and
no producer id and epoch to resume: the test broker answers versions below 3, which lack them,
with UnknownServerError); a retriable answer (a real Kafka answers ``ConcurrentTransactions`` while it writes the abort of
the id's open transaction) is asked again after :data:`FENCE_RETRY_S`, within ``deadline_s``.

:func:`resolve` (a reset's entries, in order; every step bounded by :data:`RESOLVE_DEADLINE_S`):

1. For each prepared transaction of each entry: :func:`end_prepared` with commit; a refusal or
   a dropped connection is logged, not final.
2. Then the outcome is read from the log, whatever the answer: for each partition the
   transaction wrote, the first control marker of its producer id from the partition's first
   offset on (``raw_batches.transaction_marker``), polled until :data:`MARKER_WAIT_S` (a real
   Kafka writes the markers after it answers the EndTxn). COMMIT everywhere: resolved. ABORT, or
   no marker in time: ``UnresolvedTransaction`` naming the entry's member and checkpoint, the
   transaction, its partitions and offsets: output of a completed checkpoint is lost or stuck,
   and the reset must fail loudly.
3. Then every transactional id of the entry's ``fence`` is fenced (:func:`fence`): whatever its
   member had open after the checkpoint is aborted, and a producer of a dead incarnation that
   still runs can write nothing more.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from kafka.errors import for_code
from kafka.protocol.metadata import FindCoordinatorRequest
from kafka.protocol.producer import EndTxnRequest, InitProducerIdRequest

from coordinator.kafka.committed_filter import ControlKind
from coordinator.kafka.raw_batches import transaction_marker
from coordinator.kafka.raw_requests import RawClient, TransactionEndError, error_name
from coordinator.protocol.common.waiting import WaitTimeout, wait_until
from coordinator.protocol.region.transactions import PreparedTxn, Resolve

log = logging.getLogger(__name__)

#: FindCoordinator's key type of a transactional id.
TRANSACTION_KEY_TYPE = 1
#: An end's or a fence's whole budget by default: bounds a call to a broker that stops
#: answering, well within any transaction timeout a broker allows (Kafka's default
#: ``transaction.max.timeout.ms`` is 15 minutes).
DEFAULT_DEADLINE_S = 30.0
#: The budget of each step of :func:`resolve` (one commit, one partition's marker read, one
#: fence): a reset that resolves stays within a bounded time per transaction.
RESOLVE_DEADLINE_S = 30.0
#: How long :func:`resolve` waits for a committed transaction's markers to appear (a real Kafka
#: writes them after it answers the EndTxn): a marker still missing then is a stuck transaction.
MARKER_WAIT_S = 10.0
#: Pause between two reads of the markers: one fetch per partition each time, not a busy loop.
MARKER_POLL_S = 0.2
#: Pause between two InitProducerId requests answered with a retriable error: the time a
#: broker takes to write an abort, without spinning on it.
FENCE_RETRY_S = 0.2
#: The transaction timeout a fence's InitProducerId gives the id (the broker keeps it for the
#: id's next producer until that one sets its own): Kafka's default broker maximum.
FENCE_TRANSACTION_TIMEOUT_MS = 900_000


class UnresolvedTransaction(RuntimeError):
    """A prepared transaction of a completed checkpoint is not committed (aborted, or stuck open)."""


def _coordinator(client: RawClient, transactional_id: str, what: str) -> int:
    found = client.request(
        FindCoordinatorRequest(key=transactional_id, key_type=TRANSACTION_KEY_TYPE, max_version=3), what=what
    )
    if found.error_code:
        raise TransactionEndError(f"{what}: no transaction coordinator ({error_name(found.error_code)})")
    return int(found.node_id)


def end_prepared(
    settings: Mapping[str, Any], txn: PreparedTxn, *, commit: bool, deadline_s: float = DEFAULT_DEADLINE_S
) -> None:
    """Steps 1-2 of :func:`end_prepared` in the module docstring."""
    what = f"{'committing' if commit else 'aborting'} {txn.describe()}"
    with RawClient(settings, time.monotonic() + deadline_s) as client:
        try:
            node = _coordinator(client, txn.transactional_id, what)
            answer = client.request(
                EndTxnRequest(
                    transactional_id=txn.transactional_id,
                    producer_id=txn.producer_id,
                    producer_epoch=txn.producer_epoch,
                    committed=commit,
                    max_version=3,
                ),
                node,
                what,
            )
        except TransactionEndError:
            raise
        except Exception as exc:  # a dropped connection (the test broker's answer to a fenced epoch), a timeout
            raise TransactionEndError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
    if answer.error_code:
        raise TransactionEndError(f"{what} refused: {error_name(answer.error_code)}")


def fence(settings: Mapping[str, Any], transactional_id: str, *, deadline_s: float = DEFAULT_DEADLINE_S) -> None:
    """:func:`fence` of the module docstring."""
    what = f"fencing transactional id {transactional_id!r}"
    deadline = time.monotonic() + deadline_s
    with RawClient(settings, deadline) as client:

        def init_producer_id() -> bool:
            try:
                node = _coordinator(client, transactional_id, what)
                answer = client.request(
                    InitProducerIdRequest(
                        transactional_id=transactional_id,
                        transaction_timeout_ms=FENCE_TRANSACTION_TIMEOUT_MS,
                        producer_id=-1,  # no producer to resume: a new epoch for whoever holds the id
                        producer_epoch=-1,
                        max_version=4,
                    ),
                    node,
                    what,
                )
            except TransactionEndError:
                raise
            except Exception as exc:
                raise TransactionEndError(f"{what} failed: {type(exc).__name__}: {exc}") from exc
            if not answer.error_code:
                return True
            if for_code(answer.error_code).retriable:
                return False
            raise TransactionEndError(f"{what} refused: {error_name(answer.error_code)}")

        try:
            wait_until(init_producer_id, max(0.0, deadline - time.monotonic()), what, interval=FENCE_RETRY_S)
        except WaitTimeout as exc:
            raise TransactionEndError(str(exc)) from None


def _describe(entry: Resolve, txn: PreparedTxn) -> str:
    return f"{entry.member}'s checkpoint {entry.seq}: {txn.describe()}"


def _outcome(settings: Mapping[str, Any], txn: PreparedTxn) -> dict[str, ControlKind | None]:
    """Step 2: each partition's marker of the transaction, by ``topic[partition]``."""
    return {
        f"{p.topic}[{p.partition}]": transaction_marker(
            settings, p.topic, p.partition, p.first_offset, txn.producer_id, deadline_s=RESOLVE_DEADLINE_S
        )
        for p in txn.partitions
    }


def commit_or_raise(settings: Mapping[str, Any], entry: Resolve, txn: PreparedTxn) -> None:
    """Steps 1-2 for one prepared transaction of ``entry``."""
    try:
        end_prepared(settings, txn, commit=True, deadline_s=RESOLVE_DEADLINE_S)
    except TransactionEndError as exc:
        log.info("%s; reading its partitions' markers to learn its outcome", exc)
    last: dict[str, ControlKind | None] = {}

    def committed() -> bool:
        last.clear()
        last.update(_outcome(settings, txn))
        if any(kind is ControlKind.ABORT for kind in last.values()):
            raise UnresolvedTransaction(
                f"{_describe(entry, txn)} was aborted ({_markers(last)}): output of a completed checkpoint is lost"
            )
        return all(kind is ControlKind.COMMIT for kind in last.values())

    try:
        wait_until(committed, MARKER_WAIT_S, f"the commit markers of {txn.describe()}", interval=MARKER_POLL_S)
    except WaitTimeout:
        raise UnresolvedTransaction(
            f"{_describe(entry, txn)} is not committed after {MARKER_WAIT_S:g}s ({_markers(last)})"
        ) from None


def _markers(markers: Mapping[str, ControlKind | None]) -> str:
    return ", ".join(f"{where}: {kind.name if kind else 'no marker'}" for where, kind in markers.items())


def resolve(settings: Mapping[str, Any], entries: tuple[Resolve, ...]) -> None:
    """Steps 1-3 of :func:`resolve` in the module docstring, entry by entry."""
    for entry in entries:
        for txn in entry.transactions.prepared:
            commit_or_raise(settings, entry, txn)
        for transactional_id in entry.transactions.fence:
            fence(settings, transactional_id, deadline_s=RESOLVE_DEADLINE_S)
        log.info(
            "resolved %s's checkpoint %s: %d transactions committed, %d transactional ids fenced",
            entry.member,
            entry.seq,
            len(entry.transactions.prepared),
            len(entry.transactions.fence),
        )


__all__ = [
    "TransactionEndError",
    "UnresolvedTransaction",
    "commit_or_raise",
    "end_prepared",
    "fence",
    "resolve",
]
