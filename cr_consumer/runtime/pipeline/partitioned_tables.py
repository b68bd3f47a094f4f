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
6. Restore (``table_restore.py``): the source hands each partition it seeked to
   :meth:`PartitionedTables.restore_async` and keeps it paused until
   :meth:`PartitionedTables.restoring` no longer names it; the partition's first record takes the
   restored table (:meth:`PartitionedTables.table`; a record of a partition never handed over
   restores it there, on the process thread). A reset drops the restores in flight (step 5);
   a revoked partition's restore is dropped (:meth:`PartitionedTables.forget`).

Invariant: a table in memory (or a restore's result) was restored after the member's last
reset and holds every record of its partition the member processed since. A partition revoked
from a member that fetched records since its last reset resets the region
(``cr_consumer/operator/rebalance.py``), which drops every table; one revoked before any record
was fetched has no table to keep, and its restore's result is forgotten. So a partition that
comes back to a member, after another owner or not, is restored again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Mapping
from typing import Any, NotRequired, TypedDict, Unpack

from coordinator.kafka.group_offsets import commit_offsets
from coordinator.kafka.raw_batches import partition_leaders
from coordinator.kafka.raw_requests import RawClient
from coordinator.protocol.region.transactions import Transactions
from cr_consumer.kafka.client import TopicPartition
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.kafka.kafka_python.changelog import ensure_changelog
from cr_consumer.runtime.pipeline.kafka_sink import REQUEST_TIMEOUT_MS, KafkaSink
from cr_consumer.runtime.pipeline.operators import Operator
from cr_consumer.runtime.pipeline.records import Record
from cr_consumer.runtime.pipeline.table_restore import RESTORE_STALL_S, Restored, TableRestores
from cr_consumer.state.changelog import (
    MATERIALIZE_MIN_CHANGES,
    Change,
    JsonKey,
    changelog_topic,
    encode_changes,
)

log = logging.getLogger(__name__)

#: Partitions restored at once per operator (``table_restore.py``): their fetches overlap; their
#: decoding holds the GIL, which more threads would only share with the process thread.
RESTORE_THREADS = 2


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
        #: Step 6's restores in flight or done and not yet taken (``table_restore.py``).
        self._restores = TableRestores(
            owner,
            self.changelog,
            self._settings,
            partitions=self._ensure,
            threads=RESTORE_THREADS,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
        )
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
                table = self._install(partition, self._restores.take(partition))
            self.tables[partition] = table
        return table

    # -- restore (step 6) -------------------------------------------------------------------
    def restore_async(self, partitions: Collection[int]) -> None:
        """Start restoring ``partitions`` on the restore threads; returns at once. A partition in
        memory, or with a restore started since the last reset, is left as it is."""
        self._restores.start(p for p in partitions if p not in self.tables and p not in self._due)

    def restoring(self) -> set[int]:
        """The partitions whose restore is started and not finished (done or failed)."""
        return self._restores.restoring()

    def forget(self, partitions: Collection[int]) -> None:
        """Drop the restores of ``partitions`` (revoked: the next owner writes their changelog)."""
        self._restores.forget(partitions)

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
        self._restores.close()
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
        self._restores.drop()
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
    """The source's view of a pipeline's partitioned tables (``restore_hold.StateRestorer``): each
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
    "RESTORE_THREADS",
    "PartitionedOperator",
    "PartitionedTables",
    "TableRestorer",
    "TablesArgs",
    "table_restorer",
]
