"""Keyed tables that follow their input partition: one table per input partition, kept in a
changelog topic on Kafka, restored by whichever member owns the partition.

The store under every partition-scoped stateful operator (``partitioned_aggregate.py``,
``keyed_state.py``). The table of input partition ``p`` lives in partition ``p`` of the changelog
topic ``<group>.<name>.<input topic>.changelog`` (``cr_consumer/state/changelog.py``: its record
format). The changelog is written through the exactly-once Kafka sink's protocol
(``kafka_sink.py``, ``coordinator/protocol/region/transactions.py``): one Kafka transaction per
member and checkpoint interval, prepared at the checkpoint and committed once the region completed
it, resolved by the region when its member is gone. So the changelog's committed records are
exactly the completed checkpoints' changes, and a restore needs no other bookkeeping.

1. Data (the operator, on the process thread): :meth:`PartitionedTables.begin` before each
   batch starts the interval's transaction once per interval (so the checkpoint does not pay
   for a producer's ``init_transactions``); :meth:`PartitionedTables.table_of` checks the
   record's provenance (``record.topic`` must be the declared input topic, ``record.partition``
   an int; anything else fails the batch naming the operator) and returns its partition's table,
   restored first (step 6) when it is not in memory, so a record is never processed on a
   partial state. The operator changes the table and calls :meth:`PartitionedTables.changed`
   with the key and the record's offset. A state of None is a delete (the key is removed from
   the table). A partition due for a base (step 3) gets it written first: the whole table as
   it stood at the last checkpoint, as base change sets, into the interval's transaction.
2. ``drain()``: the sink's (nothing of this store is in flight: batches are synchronous).
3. ``checkpoint(seq)``: each partition's changed keys, with their state now (writes coalesce per
   checkpoint), as change sets into the interval's transaction, partition ``p`` for input
   partition ``p``; then the sink's checkpoint: flushed, every record acknowledged, the
   transaction left open and reported (``transactions()``) for the region to commit. A base
   written in the interval is now acknowledged: its first offset (the transaction's first in
   that partition, since the base precedes the partition's changes) is kept for step 4. A
   partition whose changelog grew by more than ``max(materialize_after, live keys)``
   changes since its last base is due for a base at its next record (step 1): a restore then
   reads at most about twice the live keys plus that minimum, and writing bases at most doubles
   what the changelog receives. The base is written in the interval, not in the checkpoint, so
   it does not stop the region's flow.
4. ``notify_checkpoint_complete`` / ``retire_checkpoint``: the sink commits the prepared
   transaction; if it did, a base it held becomes the partition's *pointer*: the offset is
   committed for the consumer group named like the changelog, which nobody joins
   (``coordinator/kafka/group_offsets.py``). A pointer names only a committed base; one not
   committed (the commit failed, the member died and the region committed for it, the pointer
   write failed) leaves the previous pointer, which is still correct, only further back.
5. ``reset`` / ``reset_to_initial_state``: every table is dropped and the sink's ids fenced (an
   interval not checkpointed is aborted, a base written in it too).
6. Restore, started when the source is given the partition (after a reset's seeks, or an
   assignment's): :meth:`PartitionedTables.restore_async` reads each partition on a restore
   thread (:data:`RESTORE_THREADS`) while the source keeps the partition paused
   (``cr_consumer/operator/rebalance.py``) and the member's other partitions flow; the source
   resumes it once :meth:`PartitionedTables.restoring` no longer names it, and its first
   record takes the restored table (:meth:`PartitionedTables.table`; a record of a partition
   never handed over restores it there, on the process thread). The read: the partition's
   pointer (read once per reset for every partition), then the committed change sets of its
   changelog partition from the pointer (from the start without one) to the high watermark,
   applied in log order; a base starts the table again. The first record read must be a base
   at the pointer; otherwise (a changelog deleted and made again under a group's old pointers)
   the partition is read from its start, with a warning. The region resolves every completed
   checkpoint's transaction in the reset, before any member resumes, so the committed log
   holds the state at the checkpoint the source replays from. A transaction still open on the
   partition (one being resolved) holds the restore until it is decided, at most
   :data:`OPEN_TRANSACTION_WAIT_S`. A restore has no bound on its length, only on its
   progress: each batch read moves its deadline :data:`RESTORE_STALL_S` on, so a large
   partition is restored however long it takes, and a changelog that stops answering fails the
   restore; a failed restore fails the partition's first batch, and the region resets. A reset
   abandons the restores in flight (their results are dropped; the reset's seeks start new
   ones); a revoked partition's restore is dropped too (:meth:`PartitionedTables.forget`).

Invariant: a table in memory (or a restore's result) was restored after the member's last reset
and holds every record of its partition the member processed since. A partition revoked from a member that fetched
records since its last reset resets the region (``cr_consumer/operator/rebalance.py``), which
drops every table; one revoked before any record was fetched has no table to keep, and its
restore's result is forgotten. So a partition that comes back to a member, after another owner
or not, is restored again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, NotRequired, TypedDict, Unpack

import attrs

from coordinator.kafka.committed_filter import LogRecord
from coordinator.kafka.group_offsets import commit_offsets, read_offsets
from coordinator.kafka.raw_batches import CommittedRead, partition_leaders, read_committed_with
from coordinator.kafka.raw_requests import RawClient
from coordinator.protocol.common.waiting import wait_until
from coordinator.protocol.region.transactions import Transactions
from cr_consumer.kafka.client import TopicPartition
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.kafka.kafka_python.changelog import ensure_changelog
from cr_consumer.runtime.pipeline.kafka_sink import REQUEST_TIMEOUT_MS, KafkaSink
from cr_consumer.runtime.pipeline.operators import Operator
from cr_consumer.runtime.pipeline.records import Record
from cr_consumer.state.changelog import (
    BASE_HEADER,
    MATERIALIZE_MIN_CHANGES,
    Change,
    JsonKey,
    changelog_topic,
    decode_changes,
    encode_changes,
)

log = logging.getLogger(__name__)

#: Bound on a restore's progress (step 6): each batch read moves the read's deadline this far on,
#: so a changelog that stops answering (broker gone, partition leaderless) fails the restore, and
#: the region resets, instead of keeping its partition paused for good; a long restore that
#: progresses is never cut.
RESTORE_STALL_S = 30.0
#: Bound on waiting for a transaction still open on a partition being restored (step 6: one the
#: region is resolving) to be decided; past it the restore fails.
OPEN_TRANSACTION_WAIT_S = 60.0
#: Pause between two reads of a partition whose changelog holds a transaction still open.
RESTORE_RETRY_S = 0.1
#: Partitions restored at once per operator (step 6): reads overlap their round trips while
#: decoding, which holds the GIL, stays at most this many threads wide beside the process thread.
RESTORE_THREADS = 2
#: How often a record waiting for its partition's restore (a partition never handed over to
#: :meth:`PartitionedTables.restore_async` before its record came) checks the restore's progress.
RESTORE_WAIT_SLICE_S = 1.0


@attrs.frozen
class Restored:
    """One partition's table as read from its changelog (step 6)."""

    table: dict[Any, Any]
    #: changes on the changelog since the table's last base (step 3's count).
    since_base: int
    records: int
    changes: int


class _Generation:
    """What the restores started since one reset share; a reset starts a new one."""

    def __init__(self) -> None:
        #: Set by the reset (or close) that ends this generation: its restores stop at their next batch.
        self.cancelled = threading.Event()
        self.pointers: dict[int, int | None] | None = None  # step 6's, read once
        self.pointers_lock = threading.Lock()
        #: monotonic time of the last batch any of this generation's restores read.
        self.progress_at = time.monotonic()


class RestoreCancelled(Exception):
    """A restore of a generation a reset has ended (its result would be dropped)."""


class TablesArgs(TypedDict):
    """Where an operator's tables live, passed through its constructor to :class:`PartitionedTables`."""

    #: The input topic whose partitions scope the tables.
    topic: str
    #: The member's cluster, group and name (the changelog's name and transactional ids).
    bootstrap: str
    group: str
    member: str
    #: Client properties by dotted name (security) for the changelog's clients.
    kafka: NotRequired[Mapping[str, object] | None]
    #: Step 3's floor (default :data:`MATERIALIZE_MIN_CHANGES`).
    materialize_after: NotRequired[int]


class PartitionedTables:
    """The tables of one operator, one per partition of its input topic (module docstring)."""

    def __init__(self, owner: str, **args: Unpack[TablesArgs]) -> None:
        topic, bootstrap, group, member = args["topic"], args["bootstrap"], args["group"], args["member"]
        kafka = args.get("kafka")
        materialize_after = args.get("materialize_after", MATERIALIZE_MIN_CHANGES)
        if type(materialize_after) is not int or materialize_after < 1:
            raise ValueError(f"operator {owner!r}: materialize_after must be an int >= 1, not {materialize_after!r}")
        #: The operator's name: in the changelog's name, its transactional ids and errors.
        self.owner = owner
        self.topic = topic
        self.changelog = changelog_topic(group, owner, topic)
        self._bootstrap = bootstrap
        self._properties = dict(kafka or {})
        self._sink = KafkaSink(
            self.changelog,
            bootstrap=bootstrap,
            group=group,
            member=member,
            name=f"{owner}-changelog",
            kafka=kafka,
            partition_of=lambda r: r.partition,
        )
        self._settings = admin_settings(
            bootstrap, self._properties, request_timeout_ms=REQUEST_TIMEOUT_MS, client_id=f"{member}-restore"
        )
        self._partitions = 0  # the input's (and the changelog's) partition count, once ensured
        self._ensure_lock = threading.Lock()  # the process thread and the restore threads ensure
        self._begun = False  # the interval's transaction is started (step 1)
        #: Step 3's floor: changes since a partition's last base before it may be due for a new one.
        self.materialize_after = materialize_after
        #: input partition -> {key: state}; a partition absent here is restored before use.
        self.tables: dict[int, dict[Any, Any]] = {}
        #: input partition -> {key: offset of the last record that changed it} since the checkpoint.
        self._changed: dict[int, dict[Any, int]] = {}
        #: input partition -> changes on its changelog since its last base (restored, then written).
        self._since_base: dict[int, int] = {}
        #: input partition -> its last source offset at the last checkpoint (a base's entries' src).
        self._position: dict[int, int] = {}
        #: tables due for a base (step 3), out of ``tables`` until their next record writes it.
        self._due: dict[int, dict[Any, Any]] = {}
        self._bases_written: set[int] = set()  # bases in the open interval
        self._seq = 0  # the last checkpoint
        #: (checkpoint, {partition: base's first offset}) to become pointers once committed (step 4).
        self._pointers: list[tuple[int, dict[int, int]]] = []
        self._pointers_lock = threading.Lock()  # step 4 runs on the control thread
        #: Step 6's restores: the current generation and, per partition, its restore in flight or
        #: done and not yet taken by the partition's first record. Guarded by ``_restores_lock``:
        #: the source's threads start and forget restores, the process thread takes them, a reset
        #: (the control thread) drops them.
        self._generation = _Generation()
        self._restores: dict[int, Future[Restored]] = {}
        self._restores_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(RESTORE_THREADS, thread_name_prefix=f"{owner}-restore")
        self.restored_records = 0
        self.restored_changes = 0
        self.bases_written = 0

    # -- data (step 1) ----------------------------------------------------------------------
    def begin(self) -> None:
        """Before a batch: the changelog exists and the interval's transaction is started."""
        if not self._begun:
            self._ensure()
            self._sink.begin()
            self._begun = True

    def table_of(self, record: Any) -> dict[Any, Any]:
        """``record``'s partition's table; a record without this input's provenance raises."""
        partition = getattr(record, "partition", None)
        if getattr(record, "topic", None) != self.topic or type(partition) is not int:
            raise ValueError(
                f"operator {self.owner!r}: a record without the provenance of {self.topic!r} "
                f"(topic {getattr(record, 'topic', None)!r}, partition {partition!r}): its state's partition is unknown"
            )
        return self.table(partition)

    def table(self, partition: int) -> dict[Any, Any]:
        """Input partition ``partition``'s table, restored first (step 6) when it is not in
        memory, its base written first when it is due (step 3)."""
        table = self.tables.get(partition)
        if table is None:
            due = self._due.pop(partition, None)
            if due is not None:
                self._write_base(partition, due)
                table = due
            else:
                table = self._install(partition, self._take_restore(partition))
            self.tables[partition] = table
        return table

    # -- restore (step 6) -------------------------------------------------------------------
    def restore_async(self, partitions: Collection[int]) -> None:
        """Start restoring ``partitions`` on the restore threads; returns at once. A partition in
        memory, or with a restore started since the last reset, is left as it is."""
        with self._restores_lock:
            generation = self._generation
            for partition in partitions:
                if partition in self._restores or partition in self.tables or partition in self._due:
                    continue
                self._restores[partition] = self._pool.submit(self._restore, partition, generation)

    def restoring(self) -> set[int]:
        """The partitions whose restore is started and not finished (done or failed)."""
        with self._restores_lock:
            return {partition for partition, restore in self._restores.items() if not restore.done()}

    def forget(self, partitions: Collection[int]) -> None:
        """Drop the restores of ``partitions`` (revoked: the next owner writes their changelog)."""
        with self._restores_lock:
            for partition in partitions:
                restore = self._restores.pop(partition, None)
                if restore is not None:
                    restore.cancel()

    def _take_restore(self, partition: int) -> Restored:
        """The partition's restore's result, waited for while it progresses; started here
        (on the calling thread's behalf) if the source never handed the partition over."""
        with self._restores_lock:
            generation = self._generation
            restore = self._restores.pop(partition, None)
        if restore is None:
            return self._restore(partition, generation)
        while True:
            try:
                return restore.result(timeout=RESTORE_WAIT_SLICE_S)
            except FutureTimeout:
                stalled = time.monotonic() - generation.progress_at
                if stalled > RESTORE_STALL_S + OPEN_TRANSACTION_WAIT_S:
                    restore.cancel()
                    raise TimeoutError(
                        f"operator {self.owner!r}: the restore of {self.changelog}[{partition}] made no"
                        f" progress for {stalled:.0f} s"
                    ) from None

    def _install(self, partition: int, restored: Restored) -> dict[Any, Any]:
        self._since_base[partition] = restored.since_base
        self.restored_records += restored.records
        self.restored_changes += restored.changes
        return restored.table

    def changed(self, partition: int, key: JsonKey, offset: int) -> None:
        """``key`` of ``partition``'s table changed at source ``offset`` (written at the checkpoint)."""
        changed = self._changed.get(partition)
        if changed is None:
            changed = self._changed[partition] = {}
        changed[key] = offset

    # -- region (steps 2-5) -----------------------------------------------------------------
    def transactions(self) -> Transactions:
        return self._sink.transactions()

    def drain(self) -> None:
        self._sink.drain()

    def checkpoint(self, seq: int) -> None:
        records: list[Record] = []
        written: dict[int, int] = {}
        for partition, changed in self._changed.items():
            get = self.tables[partition].get
            changes: list[Change] = [(key, offset, get(key)) for key, offset in changed.items()]
            offset = self._position[partition] = max(changed.values())
            written[partition] = len(changes)
            for stored in encode_changes(seq, changes):
                records.append(Record(self.topic, partition, offset, value=stored.value, headers=stored.headers))
        if records:
            self._ensure()
            self._sink.process_batch(records)
        self._sink.checkpoint(seq)
        self._changed = {}
        self._begun = False
        self._seq = seq
        if self._bases_written:
            self._keep_pointers(seq)
        for partition, count in written.items():
            since = self._since_base[partition] = self._since_base.get(partition, 0) + count
            table = self.tables[partition]
            if since > max(self.materialize_after, len(table)):
                self._due[partition] = self.tables.pop(partition)

    def notify_checkpoint_complete(self, seq: int) -> None:
        self._sink.notify_checkpoint_complete(seq)
        self._commit_pointers(seq)

    def retire_checkpoint(self, seq: int) -> None:
        self._sink.retire_checkpoint(seq)
        self._commit_pointers(seq)

    def reset(self, seq: int, attempt: int = 0) -> None:
        self._drop()
        self._sink.reset(seq, b"", attempt)

    def reset_to_initial_state(self, attempt: int = 0) -> None:
        self._drop()
        self._sink.reset_to_initial_state(attempt)

    def close(self) -> None:
        """Stop the restores (each at its next batch, so the wait is one request's bound at most),
        then close the sink."""
        with self._restores_lock:
            self._generation.cancelled.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._sink.close()

    # -- helpers ----------------------------------------------------------------------------
    def _drop(self) -> None:
        self._begun = False
        self.tables = {}
        self._changed = {}
        self._since_base = {}
        self._position = {}
        self._due = {}
        self._bases_written = set()
        with self._restores_lock:
            self._generation.cancelled.set()
            self._generation = _Generation()
            for restore in self._restores.values():
                restore.cancel()
            self._restores = {}
        with self._pointers_lock:
            self._pointers = []

    def _ensure(self) -> int:
        with self._ensure_lock:
            if not self._partitions:
                partitions = _partition_count(self._settings, self.topic)
                ensure_changelog(self._bootstrap, self.changelog, partitions, properties=self._properties)
                self._partitions = partitions
            return self._partitions

    def _write_base(self, partition: int, table: dict[Any, Any]) -> None:
        """Step 1's base: ``table`` as it stood at the last checkpoint."""
        src = self._position.get(partition, 0)
        records = [
            Record(self.topic, partition, src, value=stored.value, headers=stored.headers)
            for stored in encode_changes(self._seq, [(k, src, v) for k, v in table.items()], base=True)
        ]
        if records:  # an emptied table needs no base: its deletes are on the changelog
            self._sink.process_batch(records)
            self._bases_written.add(partition)
            self.bases_written += 1
        self._since_base[partition] = 0
        log.info("operator %r: %s[%d]: base of %d keys written", self.owner, self.changelog, partition, len(table))

    def _keep_pointers(self, seq: int) -> None:
        """Step 3: the first offsets of the bases the checkpoint's transaction holds."""
        first = {
            p.partition: p.first_offset
            for txn in self._sink.transactions().prepared
            for p in txn.partitions
            if p.topic == self.changelog
        }
        pointers = {partition: first[partition] for partition in self._bases_written if partition in first}
        self._bases_written = set()
        with self._pointers_lock:
            self._pointers.append((seq, pointers))

    def _commit_pointers(self, seq: int) -> None:
        """Step 4 (control thread)."""
        with self._pointers_lock:
            ready = [pointers for done, pointers in self._pointers if done <= seq]
            self._pointers = [entry for entry in self._pointers if entry[0] > seq]
        offsets = {p: o for pointers in ready for p, o in pointers.items()}
        if not offsets or self._sink.failed:
            return
        try:
            commit_offsets(self._settings, self.changelog, self.changelog, offsets, timeout_ms=REQUEST_TIMEOUT_MS)
        except Exception as exc:  # noqa: BLE001 - logged: the previous pointers stay, which is correct
            log.warning(
                "operator %r: the bases %s of %s were not made pointers: %r", self.owner, offsets, self.changelog, exc
            )
        else:
            log.info("operator %r: %s: pointers %s", self.owner, self.changelog, offsets)

    def _pointer(self, partition: int, generation: _Generation) -> int | None:
        with generation.pointers_lock:
            if generation.pointers is None:
                generation.pointers = read_offsets(
                    self._settings, self.changelog, self.changelog, range(self._ensure()), timeout_ms=REQUEST_TIMEOUT_MS
                )
            return generation.pointers.get(partition)

    def _restore(self, partition: int, generation: _Generation) -> Restored:
        """Step 6's read of one input partition (a restore thread, or the process thread)."""
        self._ensure()
        t0 = time.monotonic()
        pointer = self._pointer(partition, generation)
        read = self._read(partition, pointer or 0, generation)
        if pointer and not (read.records and read.records[0].offset == pointer and _is_base(read.records[0])):
            log.warning(
                "operator %r: %s[%d]: the pointer %d names no base; reading the partition from its start",
                self.owner,
                self.changelog,
                partition,
                pointer,
            )
            read = self._read(partition, 0, generation)
        table: dict[Any, Any] = {}
        changes = since_base = 0
        base_seq: int | None = None  # the base being read, None after any other change set
        for stored in read.records:
            change_set = decode_changes(
                partition, stored.offset, stored.key, stored.value, stored.headers, topic=self.changelog
            )
            if change_set.base and change_set.seq != base_seq:
                table.clear()
                since_base = 0
            base_seq = change_set.seq if change_set.base else None
            for key, _, state in change_set.changes:
                if state is None:
                    table.pop(key, None)
                else:
                    table[key] = state
            changes += len(change_set.changes)
            if not change_set.base:
                since_base += len(change_set.changes)
        log.info(
            "operator %r: restored %s[%d] from %d: %d keys from %d changes in %d records in %.3f s",
            self.owner,
            self.changelog,
            partition,
            pointer or 0,
            len(table),
            changes,
            len(read.records),
            time.monotonic() - t0,
        )
        return Restored(table, since_base, len(read.records), changes)

    def _read(self, partition: int, start: int, generation: _Generation) -> CommittedRead:
        def progressed(client: RawClient) -> None:
            if generation.cancelled.is_set():
                raise RestoreCancelled(f"{self.changelog}[{partition}]: the restore's reset generation ended")
            generation.progress_at = time.monotonic()
            client.deadline = generation.progress_at + RESTORE_STALL_S

        def decided() -> CommittedRead | None:
            with RawClient(self._settings, time.monotonic() + RESTORE_STALL_S) as client:
                read = read_committed_with(client, self.changelog, partition, start, on_batch=progressed)
            return None if read.open_transactions else read

        return wait_until(
            decided,
            OPEN_TRANSACTION_WAIT_S,
            f"{self.changelog}[{partition}] without open transactions (operator {self.owner!r}'s restore)",
            interval=RESTORE_RETRY_S,
        )


def _is_base(record: LogRecord) -> bool:
    return any(name == BASE_HEADER for name, _ in record.headers)


class PartitionedOperator(Operator):
    """The region's side of an operator over :class:`PartitionedTables` (steps 2-5): its
    checkpoint data is only a versioned marker (the tables are on Kafka). Subclasses process
    records with ``self.store``."""

    #: Version of the checkpoint marker.
    CHECKPOINT_VERSION = 1

    def __init__(self, name: str | None, **tables: Unpack[TablesArgs]) -> None:
        super().__init__(name)
        self.store = PartitionedTables(self.name, **tables)

    def transactions(self) -> Transactions:
        return self.store.transactions()

    def drain(self) -> None:
        self.store.drain()

    def checkpoint(self, seq: int) -> bytes:
        self.store.checkpoint(seq)
        return b'{"version":%d,"kind":"%s","seq":%d}' % (self.CHECKPOINT_VERSION, self.kind.encode(), seq)

    def notify_checkpoint_complete(self, seq: int) -> None:
        self.store.notify_checkpoint_complete(seq)

    def retire_checkpoint(self, seq: int) -> None:
        self.store.retire_checkpoint(seq)

    def reset(self, seq: int, data: bytes, attempt: int = 0) -> None:
        self.store.reset(seq, attempt)

    def reset_to_initial_state(self, attempt: int = 0) -> None:
        self.store.reset_to_initial_state(attempt)

    def close(self) -> None:
        self.store.close()


class TableRestorer:
    """The source's view of a pipeline's partitioned tables (``rebalance.StateRestorer``): each
    store restores the partitions of its own input topic."""

    def __init__(self, stores: Collection[PartitionedTables]) -> None:
        self._stores = tuple(stores)

    def restore(self, partitions: Collection[TopicPartition]) -> None:
        for store in self._stores:
            store.restore_async([tp.partition for tp in partitions if tp.topic == store.topic])

    def restoring(self) -> set[TopicPartition]:
        return {TopicPartition(store.topic, p) for store in self._stores for p in store.restoring()}

    def forget(self, partitions: Collection[TopicPartition]) -> None:
        for store in self._stores:
            store.forget([tp.partition for tp in partitions if tp.topic == store.topic])


def table_restorer(operators: Collection[Operator]) -> TableRestorer | None:
    """The restorer of a pipeline's partition-scoped operators; None when it has none."""
    stores = [op.store for op in operators if isinstance(op, PartitionedOperator)]
    return TableRestorer(stores) if stores else None


def _partition_count(settings: Mapping[str, Any], topic: str) -> int:
    with RawClient(settings, time.monotonic() + RESTORE_STALL_S) as client:
        count = len(partition_leaders(client, topic))
    if not count:
        raise ValueError(f"input topic {topic!r} has no partitions")
    return count


__all__ = [
    "RESTORE_STALL_S",
    "PartitionedOperator",
    "PartitionedTables",
    "Restored",
    "TableRestorer",
    "TablesArgs",
    "table_restorer",
]
