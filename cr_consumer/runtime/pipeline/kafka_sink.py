"""The exactly-once Kafka sink: each checkpoint interval's records in one Kafka transaction,
committed once the region completed the checkpoint.

The protocol the sink takes part in (what it reports, who ends its transactions, when) is
``coordinator/protocol/region/transactions.py``; this docstring says what the sink does.

The producer is either client's transactional producer (``cr_consumer/kafka/producer.py``, the
seam; ``client``: kafka-python by default, or librdkafka, the faster: BENCHMARKS.md):
each gives the producer id and epoch another process needs to end the sink's transaction when
the sink's member is gone (kafka-python from its transaction manager, librdkafka read back from
the transaction's first batch).

Transactional ids: two per sink, ``crkafka-<group>-<member>-<sink name>-0`` and ``-1``. An
interval writes with one; after a checkpoint that prepared a transaction the next interval
writes with the other, so the id prepared at checkpoint ``n`` is written again only after
checkpoint ``n + 1`` completed (the region then holds ``n + 1``'s entry, not ``n``'s).

1. ``process_batch``: encode the whole batch first (key and value: ``str`` as UTF-8, bytes as
   they are, None as None, any other value as the file sink's JSON text; headers ``(str,
   bytes | str | None)``, a ``str`` value as UTF-8), then send each record to ``topic``. The
   partition is the producer's partitioner's (by key), unless ``partition_of(record)`` names
   one: a record's own ``partition`` field is where it was read, not where it goes. Records
   carry no input timestamp: the producer stamps them. On the interval's first record the
   interval's producer is created if it does not exist yet (``init_transactions``: it fences
   the id's previous epoch, so it is never done at construction or start: a new incarnation
   must not abort its predecessor's prepared transaction before the region's reset resolved
   it; the join always brings a reset first) and its transaction begun. The producer keeps
   each send's result, with no per-record callback (the process thread's per-record cost);
   ``max.block.ms`` bounds a send's wait for the topic's metadata. After each batch the
   producer's ``bound`` waits while more than ``MAX_UNANSWERED`` sends are unanswered
   (kafka-python 3 has no ``buffer.memory``): memory, and the flush of step 3, stay bounded.
2. ``drain()``: flush, bounded by :data:`FLUSH_TIMEOUT_S`; a failed send or a failed commit
   (step 4) since the last reset fails it.
3. ``checkpoint(seq)``: flush (bounded); every send must be acknowledged without error (the
   producer's ``outcome``: an unanswered or failed send fails the checkpoint); the transaction
   stays open. Its ``PreparedTxn`` (id, producer id and epoch, each partition with
   its first offset) is recorded for ``seq`` and returned by :meth:`KafkaSink.transactions`
   with both ids as ``fence`` and the sink's bootstrap as the cluster (so the coordinator can
   end them when no member is live); an interval without records prepares nothing (one begun
   early by :meth:`KafkaSink.begin` stays open into the next interval: the broker has no
   transaction for it until its first record). The checkpoint
   data holds the same ``Transactions``, versioned JSON.
4. ``notify_checkpoint_complete(seq)`` / ``retire_checkpoint(seq)``: commit every recorded
   transaction of a checkpoint ``<= seq``, each bounded by :data:`COMMIT_TIMEOUT_S` (kafka-python's
   ``commit_transaction()`` waits for ever on a fenced producer). A failure is logged, the
   producer closed, and the sink broken: the next drain fails, the region resets, and the reset
   commits the transaction (step 5).
5. ``reset(seq, data)`` / ``reset_to_initial_state()``: close both producers (bounded, nothing
   committed), forget the open interval and what was recorded, and fence both ids (the open
   interval's transaction is aborted; its records are replayed). What a completed checkpoint
   prepared is committed before, by the region's resolver: the reset command's ``resolve``
   names it (kept in the region's document, not on this host's disk), and the member runtime
   resolves it before any operator resets. The checkpoint data (the same ``Transactions``) is
   only checked for its version. The next interval starts a fresh producer.
6. ``close()`` (member shutdown): abort the open interval's transaction (bounded: its records
   belong to no checkpoint and are read again by whoever continues), then close both producers,
   bounded. A prepared transaction stays open: its checkpoint may have completed, and a graceful
   leave commits it first (the member publishes its last completed checkpoint), else the next
   reset resolves it.

Readers of the output must read committed records only (``isolation.level=read_committed``):
``docs/pipelines.md`` says why and which broker settings the sink needs.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from coordinator.kafka.raw_requests import TransactionEndError
from coordinator.kafka.transactions import resolve
from coordinator.protocol.region.transactions import PreparedTxn, Resolve, Transactions, check_bootstrap
from coordinator.protocol.wire import fields
from coordinator.protocol.wire.errors import Invalid
from cr_consumer.kafka.client import DEFAULT_CLIENT, ClientKind
from cr_consumer.kafka.factory import make_transactional_producer
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.kafka.producer import OutRecord, SendOutcome, TransactionalWriter
from cr_consumer.kafka.property_rules import check_producer_properties, int_property
from cr_consumer.runtime import fault_points
from cr_consumer.runtime.pipeline.operators import Operator
from cr_consumer.runtime.pipeline.records import field_json

log = logging.getLogger(__name__)

KAFKA_SINK_CHECKPOINT_VERSION = 1
#: Prefix of every transactional id a Kafka sink writes with.
TRANSACTIONAL_ID_PREFIX = "crkafka"
#: Longest transactional id: the region protocol's name bound (the ids travel in checkpoint acks).
MAX_TRANSACTIONAL_ID_LEN = fields.MAX_NAME_LEN
#: Bound of a flush (drain, checkpoint): a broker that stops acknowledging fails the drain
#: within this instead of holding the region's stopped flow until its drain timeout.
FLUSH_TIMEOUT_S = 30.0
#: Bound of a commit (step 4): a fenced producer on the test broker never gets an answer.
COMMIT_TIMEOUT_S = 30.0
#: Bound of closing a producer (reset, a failed commit, close): a fenced producer's sender
#: retries for ever; it is closed by force after this.
CLOSE_TIMEOUT_S = 5.0
#: The resolver's request bound unless ``request.timeout.ms`` is given (kafka-python's default).
REQUEST_TIMEOUT_MS = 30_000
#: The sink's producer defaults under the user's properties (dotted names).
PRODUCER_DEFAULTS: Mapping[str, object] = {
    # The broker aborts an open transaction after this. A prepared transaction stays open from
    # its checkpoint until the RESUME (about one checkpoint period: 1 s by default), and, when its
    # member dies, until the region's reset resolves it: the member timeout (5 s) plus a reset
    # round (reset timeout 30 s), more with the backoff of repeated failures. An abort before the
    # resolve loses a completed checkpoint's output, so the default is far above: 15 minutes,
    # Kafka's default broker maximum (transaction.max.timeout.ms); a broker with a lower maximum
    # refuses the producer, and the user must lower this explicitly.
    "transaction.timeout.ms": 900_000,
    # Bounds init_transactions and a send's wait for the topic's metadata (a broker that is gone).
    "max.block.ms": 30_000,
}


def _reported_cluster(bootstrap: str) -> str | None:
    try:
        return check_bootstrap(bootstrap, "Kafka sink: bootstrap")
    except Invalid as exc:
        log.warning("%s: the coordinator cannot resolve this sink's transactions itself; members will", exc)
        return None


def transactional_ids(group: str, member: str, name: str) -> tuple[str, str]:
    """The sink's two transactional ids; ValueError for names they cannot be made of."""
    for what, value in (("group", group), ("member", member), ("sink name", name)):
        try:
            fields.check_name(value, f"Kafka sink: {what}")
        except Invalid as exc:
            raise ValueError(str(exc)) from None
    ids = tuple(f"{TRANSACTIONAL_ID_PREFIX}-{group}-{member}-{name}-{i}" for i in (0, 1))
    if len(ids[0]) > MAX_TRANSACTIONAL_ID_LEN:
        raise ValueError(
            f"Kafka sink: the transactional id {ids[0][:80]!r}... is longer than {MAX_TRANSACTIONAL_ID_LEN} "
            "characters: shorten the group, member or sink name"
        )
    return ids[0], ids[1]


def _bytes(value: Any, record: Any, what: str) -> bytes | None:
    """Step 1's encoding of a key or value."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    try:
        return field_json(value).encode("utf-8")
    except (TypeError, ValueError) as exc:
        where = f"{record.topic}/{record.partition}@{record.offset}"
        raise TypeError(f"Kafka sink: the {what} of record {where} cannot be written: {exc}") from exc


def _headers(headers: Any, record: Any) -> list[tuple[str, bytes | None]]:
    out: list[tuple[str, bytes | None]] = []
    for header in headers:
        key, value = header
        if not isinstance(key, str) or not (value is None or isinstance(value, bytes | str)):
            raise TypeError(
                f"Kafka sink: record {record.topic}/{record.partition}@{record.offset} has a header "
                f"{header!r:.80} that is not (str, bytes | str | None)"
            )
        out.append((key, value.encode("utf-8") if isinstance(value, str) else value))
    return out


@attrs.define
class _Open:
    """The open interval's transaction (step 1), under the sink's lock."""

    index: int
    producer: TransactionalWriter


class KafkaSink(Operator):
    """Exactly-once output to a Kafka topic (see the module docstring)."""

    kind = "kafka_sink"

    def __init__(
        self,
        topic: str,
        *,
        bootstrap: str,
        group: str,
        member: str,
        name: str | None = None,
        kafka: Mapping[str, object] | None = None,
        partition_of: Callable[[Any], int | None] | None = None,
        client: ClientKind | str = DEFAULT_CLIENT,
    ) -> None:
        super().__init__(name or f"{self.kind}-{topic}")
        try:
            fields.check_name(topic, "Kafka sink: topic")
            self.client = ClientKind(client)
        except Invalid as exc:
            raise ValueError(str(exc)) from None
        except ValueError:
            raise ValueError(
                f"Kafka sink: unknown client {client!r} (one of {', '.join(k.value for k in ClientKind)})"
            ) from None
        properties = dict(kafka or {})
        check_producer_properties(properties, self.client)
        self.topic = topic
        self.member = member
        self.ids = transactional_ids(group, member, self.name)
        self.partition_of = partition_of
        self._bootstrap = bootstrap
        # The cluster the region's coordinator may end this sink's transactions on when no member
        # is live (None: a bootstrap the protocol does not carry, a scheme prefix for one: then
        # only a member resolves them).
        self._cluster = _reported_cluster(bootstrap)
        self._properties = properties
        self._settings = admin_settings(
            bootstrap,
            properties,
            request_timeout_ms=int_property(properties, "request.timeout.ms", REQUEST_TIMEOUT_MS),
            client_id=f"{self.ids[0][:-2]}-resolve",
        )
        # Shared: the process thread opens and writes the interval, the control thread flushes,
        # records, commits and resets.
        self._lock = threading.Lock()
        self._producers: dict[int, TransactionalWriter] = {}
        self._open: _Open | None = None
        self._next = 0  # the id index of the next interval
        self._prepared: list[tuple[int, int, PreparedTxn]] = []  # (seq, id index, txn), not committed yet
        self._last = Transactions((), self.ids, self._cluster)
        self._broken: BaseException | None = None
        self.records_written = 0

    # -- data -----------------------------------------------------------------
    def process_batch(self, records: list[Any]) -> list[Any]:
        if not records:
            return []
        pick = self.partition_of
        # bytes and None, most keys and values, pass as they are without a call (step 1)
        encoded: list[OutRecord] = [
            (
                r.key if r.key is None or r.key.__class__ is bytes else _bytes(r.key, r, "key"),
                r.value if r.value is None or r.value.__class__ is bytes else _bytes(r.value, r, "value"),
                _headers(r.headers, r) if r.headers else [],
                None if pick is None else pick(r),
            )
            for r in records
        ]
        with self._lock:
            interval = self._open if self._open is not None else self._begin()
            interval.producer.send_many(self.topic, encoded)
            self.records_written += len(records)
            interval.producer.bound(FLUSH_TIMEOUT_S)
        return []

    def begin(self) -> None:
        """Start the interval's transaction now if it is not started (step 1's producer, with
        its ``init_transactions``, included): a writer that sends only at the checkpoint (a
        changelog) calls it before its interval's records, so the region's stopped flow does not
        pay for it. An interval that then sends nothing is not prepared (step 3)."""
        with self._lock:
            self._check()
            if self._open is None:
                self._begin()

    def _begin(self) -> _Open:
        """Step 1's lazy producer and the interval's transaction (under the lock)."""
        index = self._next
        if any(entry[1] == index for entry in self._prepared):
            # Never reached while the region's order holds (records flow only after the RESUME
            # that commits the prepared transaction); writing on would put this interval's
            # records into a checkpoint's transaction.
            raise RuntimeError(
                f"Kafka sink {self.name!r}: {self.ids[index]} still holds a prepared transaction; "
                "an interval cannot start on it"
            )
        producer = self._producers.get(index)
        if producer is None:
            properties = {**PRODUCER_DEFAULTS, **self._properties}
            producer = make_transactional_producer(
                self.client, self._bootstrap, properties, self.ids[index], self._settings
            )
            self._producers[index] = producer
            log.info("Kafka sink %r: %s producer for %s started", self.name, self.client.value, self.ids[index])
        producer.begin()
        self._open = _Open(index, producer)
        return self._open

    # -- region ---------------------------------------------------------------
    def transactions(self) -> Transactions:
        """What the last checkpoint prepared, and both ids (the region protocol's step 1)."""
        return self._last

    def drain(self) -> None:
        with self._lock:
            self._check()
            if self._open is not None:
                self._flush(self._open)

    def checkpoint(self, seq: int) -> bytes:
        with self._lock:
            self._check()
            interval, self._open = self._open, None
            prepared: tuple[PreparedTxn, ...] = ()
            if interval is not None and not interval.producer.outcome().sent:
                self._open = interval  # begun, nothing sent: no transaction to prepare; it goes on
            elif interval is not None:
                outcome = self._flush(interval)
                if outcome.unanswered:
                    raise RuntimeError(
                        f"Kafka sink {self.name!r}: {outcome.unanswered} of {outcome.sent} "
                        f"records not acknowledged after the flush; checkpoint {seq} would lose them"
                    )
                txn = interval.producer.prepared(outcome.partitions)
                self._prepared.append((seq, interval.index, txn))
                self._next = 1 - interval.index
                prepared = (txn,)
            self._last = Transactions(prepared, self.ids, self._cluster)
            doc = {"version": KAFKA_SINK_CHECKPOINT_VERSION, "kind": self.kind, **self._last.to_wire()}
        return json.dumps(doc, separators=(",", ":")).encode()

    @property
    def failed(self) -> bool:
        """A send or a commit failed since the last reset (the next drain fails)."""
        return self._broken is not None

    def notify_checkpoint_complete(self, seq: int) -> None:
        self._commit_upto(seq)

    def retire_checkpoint(self, seq: int) -> None:
        self._commit_upto(seq)

    def reset(self, seq: int, data: bytes, attempt: int = 0) -> None:
        if data:
            doc = json.loads(data)
            if doc.get("version") != KAFKA_SINK_CHECKPOINT_VERSION or doc.get("kind") != self.kind:
                raise ValueError(
                    f"Kafka sink {self.name!r}: checkpoint {seq} has version {doc.get('version')!r} kind "
                    f"{doc.get('kind')!r}; expected version {KAFKA_SINK_CHECKPOINT_VERSION} kind {self.kind!r}"
                )
        self._restart(seq)

    def reset_to_initial_state(self, attempt: int = 0) -> None:
        self._restart(None)

    def close(self) -> None:
        with self._lock:
            interval, self._open = self._open, None
            try:
                if interval is not None and interval.producer.outcome().error is None:
                    interval.producer.abort(COMMIT_TIMEOUT_S, f"the open interval of {self.ids[interval.index]}")
            finally:
                self._close_producers()

    # -- helpers ----------------------------------------------------------------
    def _check(self) -> None:
        if self._broken is not None:
            raise RuntimeError(f"Kafka sink {self.name!r} failed since the last reset: {self._broken!r}")

    def _flush(self, interval: _Open) -> SendOutcome:
        """Flush (bounded: ``KafkaTimeoutError`` past it); a failed send since the interval
        began fails it, checked first too: nothing of a failed interval is worth waiting for."""
        self._check_sends(interval.producer.outcome())
        interval.producer.flush(FLUSH_TIMEOUT_S)
        outcome = interval.producer.outcome()
        self._check_sends(outcome)
        return outcome

    def _check_sends(self, outcome: SendOutcome) -> None:
        if outcome.error is not None:
            raise RuntimeError(f"Kafka sink {self.name!r}: a send failed: {outcome.error!r}")

    def _commit_upto(self, seq: int) -> None:
        """Step 4 (control thread; the process thread may write the next interval meanwhile,
        with the other id's producer)."""
        with self._lock:
            ready = [entry for entry in self._prepared if entry[0] <= seq]
            self._prepared = [entry for entry in self._prepared if entry[0] > seq]
        if not ready:
            return
        fault_points.hit(fault_points.Point.BEFORE_PUBLISH, self.member)
        for done, (prepared_seq, index, txn) in enumerate(ready):
            if done:
                fault_points.hit(fault_points.Point.MID_PUBLISH, self.member)
            producer = self._producers[index]
            try:
                producer.commit(COMMIT_TIMEOUT_S, txn.describe())
            except TransactionEndError as exc:
                log.error(
                    "Kafka sink %r: checkpoint %s's %s; the next drain fails and the reset commits it",
                    self.name,
                    prepared_seq,
                    exc,
                )
                with self._lock:
                    self._broken = exc
                    del self._producers[index]
                producer.close(CLOSE_TIMEOUT_S)
                return
        fault_points.hit(fault_points.Point.AFTER_PUBLISH, self.member)

    def _restart(self, seq: int | None) -> None:
        """Step 5."""
        with self._lock:
            self._open = None
            self._prepared = []
            self._next = 0
            self._broken = None
            self._last = Transactions((), self.ids, self._cluster)
            self._close_producers()  # raises only after trying every producer; a retried reset starts clean
        log.info("Kafka sink %r: reset to checkpoint %s; fencing %s", self.name, seq, ", ".join(self.ids))
        resolve(self._settings, (Resolve(self.member, seq or 0, Transactions((), self.ids)),))

    def _close_producers(self) -> None:
        producers, self._producers = self._producers, {}
        errors = []
        for producer in producers.values():
            try:
                producer.close(CLOSE_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - collected, the first re-raised: every producer gets closed
                errors.append(exc)
        if errors:
            raise errors[0]


__all__ = ["KafkaSink", "transactional_ids"]
