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

1. Data (the operator, on the process thread): :meth:`PartitionedTables.table_of` checks the
   record's provenance (``record.topic`` must be the declared input topic, ``record.partition``
   an int; anything else fails the batch naming the operator) and returns its partition's table,
   restored first (step 5) when it is not in memory, so a record is never processed on a
   partial state. The operator changes the table and calls :meth:`PartitionedTables.changed`
   with the key and the record's offset. A state of None is a delete (the key is removed from
   the table).
2. ``drain()``: the sink's (nothing of this store is in flight: batches are synchronous).
3. ``checkpoint(seq)``: each partition's changed keys, with their state now (writes coalesce per
   checkpoint), as change sets into the interval's transaction, partition ``p`` for input
   partition ``p``; then the sink's checkpoint: flushed, every record acknowledged, the
   transaction left open and reported (``transactions()``) for the region to commit.
4. ``notify_checkpoint_complete`` / ``retire_checkpoint``: the sink commits the prepared
   transaction.
5. ``reset`` / ``reset_to_initial_state``: every table is dropped and the sink's ids fenced (an
   interval not checkpointed is aborted). A partition's table is restored when its first record
   arrives: the committed change sets of its changelog partition, from the start to the high
   watermark, applied in log order. The region resolves every completed checkpoint's
   transaction in the reset, before any member resumes, so the committed log holds the state at
   the checkpoint the source replays from. A transaction still open on the partition (one being
   resolved) holds the restore until it is decided, at most :data:`RESTORE_TIMEOUT_S`; past
   that the batch fails and the region resets.

Invariant: a table in memory was restored after the member's last reset and holds every record
of its partition the member processed since. A partition revoked from a member that fetched
records since its last reset resets the region (``cr_consumer/operator/rebalance.py``), which
drops every table; one revoked before any record was fetched has no table to keep. So a
partition that comes back to a member, after another owner or not, is restored again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from coordinator.kafka.raw_batches import CommittedRead, partition_leaders, read_committed_with
from coordinator.kafka.raw_requests import RawClient
from coordinator.protocol.common.waiting import wait_until
from coordinator.protocol.region.transactions import Transactions
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.kafka.kafka_python.changelog import ensure_changelog
from cr_consumer.runtime.pipeline.kafka_sink import REQUEST_TIMEOUT_MS, KafkaSink
from cr_consumer.runtime.pipeline.operators import Operator
from cr_consumer.runtime.pipeline.records import Record
from cr_consumer.state.changelog import Change, JsonKey, changelog_topic, decode_changes, encode_changes

log = logging.getLogger(__name__)

#: Bound on restoring one partition's table (step 5), the wait for an open transaction on it
#: included: a changelog that cannot be read fails the batch (and the region resets) instead of
#: holding the flow for good.
RESTORE_TIMEOUT_S = 60.0
#: Pause between two reads of a partition whose changelog holds a transaction still open.
RESTORE_RETRY_S = 0.1


class PartitionedTables:
    """The tables of one operator, one per partition of its input topic (module docstring)."""

    def __init__(
        self,
        owner: str,
        *,
        topic: str,
        bootstrap: str,
        group: str,
        member: str,
        kafka: Mapping[str, object] | None = None,
    ) -> None:
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
        self._ensured = False
        #: input partition -> {key: state}; a partition absent here is restored before use.
        self.tables: dict[int, dict[Any, Any]] = {}
        #: input partition -> {key: offset of the last record that changed it} since the checkpoint.
        self._changed: dict[int, dict[Any, int]] = {}
        self.restored_records = 0
        self.restored_changes = 0

    # -- data (step 1) ----------------------------------------------------------------------
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
        """Input partition ``partition``'s table, restored first (step 5) when it is not in memory."""
        table = self.tables.get(partition)
        if table is None:
            table = self.tables[partition] = self._restore(partition)
        return table

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
        for partition, changed in self._changed.items():
            get = self.tables[partition].get
            changes: list[Change] = [(key, offset, get(key)) for key, offset in changed.items()]
            offset = max(changed.values())
            for stored in encode_changes(seq, changes):
                records.append(Record(self.topic, partition, offset, value=stored.value, headers=stored.headers))
        if records:
            self._ensure()
            self._sink.process_batch(records)
        self._sink.checkpoint(seq)
        self._changed = {}

    def notify_checkpoint_complete(self, seq: int) -> None:
        self._sink.notify_checkpoint_complete(seq)

    def retire_checkpoint(self, seq: int) -> None:
        self._sink.retire_checkpoint(seq)

    def reset(self, seq: int, attempt: int = 0) -> None:
        self._drop()
        self._sink.reset(seq, b"", attempt)

    def reset_to_initial_state(self, attempt: int = 0) -> None:
        self._drop()
        self._sink.reset_to_initial_state(attempt)

    def close(self) -> None:
        self._sink.close()

    # -- helpers ----------------------------------------------------------------------------
    def _drop(self) -> None:
        self.tables = {}
        self._changed = {}

    def _ensure(self) -> None:
        if not self._ensured:
            partitions = _partition_count(self._settings, self.topic)
            ensure_changelog(self._bootstrap, self.changelog, partitions, properties=self._properties)
            self._ensured = True

    def _restore(self, partition: int) -> dict[Any, Any]:
        """Step 5 for one input partition."""
        self._ensure()
        t0 = time.monotonic()
        deadline = t0 + RESTORE_TIMEOUT_S

        def decided() -> CommittedRead | None:
            with RawClient(self._settings, deadline) as client:
                read = read_committed_with(client, self.changelog, partition)
            return None if read.open_transactions else read

        read = wait_until(
            decided,
            RESTORE_TIMEOUT_S,
            f"{self.changelog}[{partition}] without open transactions (operator {self.owner!r}'s restore)",
            interval=RESTORE_RETRY_S,
        )
        table: dict[Any, Any] = {}
        changes = 0
        for stored in read.records:
            change_set = decode_changes(
                partition, stored.offset, stored.key, stored.value, stored.headers, topic=self.changelog
            )
            for key, _, state in change_set.changes:
                if state is None:
                    table.pop(key, None)
                else:
                    table[key] = state
            changes += len(change_set.changes)
        self.restored_records += len(read.records)
        self.restored_changes += changes
        log.info(
            "operator %r: restored %s[%d]: %d keys from %d changes in %d records in %.3f s",
            self.owner,
            self.changelog,
            partition,
            len(table),
            changes,
            len(read.records),
            time.monotonic() - t0,
        )
        return table


class PartitionedOperator(Operator):
    """The region's side of an operator over :class:`PartitionedTables` (steps 2-5): its
    checkpoint data is only a versioned marker (the tables are on Kafka). Subclasses process
    records with ``self.store``."""

    #: Version of the checkpoint marker.
    CHECKPOINT_VERSION = 1

    def __init__(
        self,
        name: str | None,
        *,
        topic: str,
        bootstrap: str,
        group: str,
        member: str,
        kafka: Mapping[str, object] | None = None,
    ) -> None:
        super().__init__(name)
        self.store = PartitionedTables(
            self.name, topic=topic, bootstrap=bootstrap, group=group, member=member, kafka=kafka
        )

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


def _partition_count(settings: Mapping[str, Any], topic: str) -> int:
    with RawClient(settings, time.monotonic() + RESTORE_TIMEOUT_S) as client:
        count = len(partition_leaders(client, topic))
    if not count:
        raise ValueError(f"input topic {topic!r} has no partitions")
    return count


__all__ = ["RESTORE_TIMEOUT_S", "PartitionedOperator", "PartitionedTables"]
