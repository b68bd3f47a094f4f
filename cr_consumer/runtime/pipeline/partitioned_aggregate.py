"""A keyed aggregate whose state follows its input partition: one table per input partition,
kept in a changelog topic on Kafka, restored by whichever member owns the partition.

The table of input partition ``p`` lives in partition ``p`` of the changelog topic
``<group>.<name>.<input topic>.changelog`` (``cr_consumer/state/changelog.py``: its record
format). The changelog is written through the exactly-once Kafka sink's protocol
(``kafka_sink.py``, ``coordinator/protocol/region/transactions.py``): one Kafka transaction per
member and checkpoint interval, prepared at the checkpoint and committed once the region completed
it, resolved by the region when its member is gone. So the changelog's committed records are
exactly the completed checkpoints' changes, and a restore needs no other bookkeeping.

1. ``process_batch``: each record updates the table of its own input partition (its
   provenance: ``record.topic`` must be the declared input topic, ``record.partition`` an int;
   anything else fails the batch naming the operator). A partition's table that is not in
   memory is restored first (step 5), so a record is never aggregated on a partial state. The
   key is remembered as changed since the last checkpoint, with the record's offset. An
   ``update`` that returns None deletes the key (its next record starts from ``initial``), in
   memory as in the changelog (a tombstone).
2. ``drain()``: nothing is in flight (batches are processed synchronously).
3. ``checkpoint(seq)``: one changelog record per changed key (its whole new state: writes
   coalesce per checkpoint) into the interval's transaction, partition ``p`` for input partition
   ``p``; then the sink's checkpoint: flushed, every record acknowledged, the transaction left
   open and reported (``transactions()``) for the region to commit. The checkpoint data holds
   no table (it is on Kafka).
4. ``notify_checkpoint_complete`` / ``retire_checkpoint``: the sink commits the prepared
   transaction.
5. ``reset`` / ``reset_to_initial_state``: every table is dropped and the sink's ids fenced (an
   interval not checkpointed is aborted). A partition's table is restored when its first record
   arrives: the committed records of its changelog partition, from the start to the high
   watermark, in log order, each the key's whole state. The region resolves every completed
   checkpoint's transaction in the reset, before any member resumes, so the committed log holds
   the state at the checkpoint the source replays from. A transaction still open on the
   partition (one being resolved) holds the restore until it is decided, at most
   :data:`RESTORE_TIMEOUT_S`; past that the batch fails and the region resets.

Invariant: a table in memory was restored after the member's last reset and holds every record
of its partition the member processed since. A partition revoked from a member that fetched
records since its last reset resets the region (``cr_consumer/operator/rebalance.py``), which
drops every table; one revoked before any record was fetched has no table to keep. So a
partition that comes back to a member, after another owner or not, is restored again.

The input must be partitioned by the aggregate's key (the producer's default partitioner on the
key) for each table to hold a key's complete state; otherwise each input partition's table is a
partial state of the keys it saw (``docs/pipelines.md``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from coordinator.kafka.raw_batches import CommittedRead, partition_leaders, read_committed_with
from coordinator.kafka.raw_requests import RawClient
from coordinator.protocol.common.waiting import wait_until
from coordinator.protocol.region.transactions import Transactions
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.kafka.kafka_python.changelog import ensure_changelog
from cr_consumer.runtime.pipeline.kafka_sink import REQUEST_TIMEOUT_MS, KafkaSink
from cr_consumer.runtime.pipeline.operators import Fold, Operator, Reject, raise_error
from cr_consumer.runtime.pipeline.records import Record
from cr_consumer.state.changelog import ChangelogRecord, changelog_topic, decode_record, encode_record, key_of

log = logging.getLogger(__name__)

PARTITIONED_AGGREGATE_CHECKPOINT_VERSION = 1
#: Bound on restoring one partition's table (step 5), the wait for an open transaction on it
#: included: a changelog that cannot be read fails the batch (and the region resets) instead of
#: holding the flow for good.
RESTORE_TIMEOUT_S = 60.0
#: Pause between two reads of a partition whose changelog holds a transaction still open.
RESTORE_RETRY_S = 0.1


class PartitionedAggregate(Operator):
    """``update(state, record)`` per key within each input partition's table (module docstring)."""

    kind = "partitioned_aggregate"

    def __init__(
        self,
        key_fn: Callable[[Any], Any],
        update: Callable[[Any, Any], Any],
        initial: Callable[[], Any] | Any = None,
        *,
        topic: str,
        bootstrap: str,
        group: str,
        member: str,
        emit: bool = True,
        output: Callable[[Any, Any, Any], Any] | None = None,
        name: str | None = None,
        kafka: Mapping[str, object] | None = None,
    ) -> None:
        super().__init__(name)
        self.fold = Fold(key_fn, update, initial if callable(initial) else (lambda: initial), emit, output, key_of)
        self.topic = topic
        self.changelog = changelog_topic(group, self.name, topic)
        self._bootstrap = bootstrap
        self._properties = dict(kafka or {})
        self._sink = KafkaSink(
            self.changelog,
            bootstrap=bootstrap,
            group=group,
            member=member,
            name=f"{self.name}-changelog",
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

    # -- data -------------------------------------------------------------------------------
    def process_batch(self, records: list[Any]) -> list[Any]:
        return self.process_isolated(records, raise_error)

    def process_isolated(self, records: list[Any], reject: Reject) -> list[Any]:
        apply, emit = self.fold.apply, self.fold.emit
        out: list[Any] = []
        for r in records:
            table = self._table(r)  # outside the try: a record without provenance fails the batch
            try:
                k, emitted = apply(table, r)
            except Exception as exc:  # noqa: BLE001 - to reject: the dead-letter sink, or re-raised
                reject(r, exc)
                continue
            if table[k] is None:  # a state of None is a delete, as the changelog stores it
                del table[k]
            self._changed.setdefault(r.partition, {})[k] = r.offset
            if emit:
                out.append(emitted)
        return out

    def _table(self, record: Any) -> dict[Any, Any]:
        partition = getattr(record, "partition", None)
        if getattr(record, "topic", None) != self.topic or type(partition) is not int:
            raise ValueError(
                f"aggregate {self.name!r}: a record without the provenance of {self.topic!r} "
                f"(topic {getattr(record, 'topic', None)!r}, partition {partition!r}): its state's partition is unknown"
            )
        return self.table(partition)

    def table(self, partition: int) -> dict[Any, Any]:
        """Input partition ``partition``'s table, restored first (step 5) when it is not in memory."""
        table = self.tables.get(partition)
        if table is None:
            table = self.tables[partition] = self._restore(partition)
        return table

    # -- region -----------------------------------------------------------------------------
    def transactions(self) -> Transactions:
        return self._sink.transactions()

    def drain(self) -> None:
        self._sink.drain()

    def checkpoint(self, seq: int) -> bytes:
        changes: list[Record] = []
        for partition, changed in self._changed.items():
            table = self.tables[partition]
            for key, offset in changed.items():
                encoded = encode_record(ChangelogRecord(key, table.get(key), seq, offset))
                changes.append(
                    Record(self.topic, partition, offset, key=encoded.key, value=encoded.value, headers=encoded.headers)
                )
        if changes:
            self._ensure()
            self._sink.process_batch(changes)
        self._sink.checkpoint(seq)
        self._changed = {}
        return b'{"version":%d,"kind":"%s","seq":%d}' % (
            PARTITIONED_AGGREGATE_CHECKPOINT_VERSION,
            self.kind.encode(),
            seq,
        )

    def notify_checkpoint_complete(self, seq: int) -> None:
        self._sink.notify_checkpoint_complete(seq)

    def retire_checkpoint(self, seq: int) -> None:
        self._sink.retire_checkpoint(seq)

    def reset(self, seq: int, data: bytes, attempt: int = 0) -> None:
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
            f"{self.changelog}[{partition}] without open transactions (aggregate {self.name!r}'s restore)",
            interval=RESTORE_RETRY_S,
        )
        table: dict[Any, Any] = {}
        for stored in read.records:
            change = decode_record(
                partition, stored.offset, stored.key, stored.value, stored.headers, topic=self.changelog
            )
            if change.value is None:
                table.pop(change.key, None)
            else:
                table[change.key] = change.value
        self.restored_records += len(read.records)
        log.info(
            "aggregate %r: restored %s[%d]: %d keys from %d records in %.3f s",
            self.name,
            self.changelog,
            partition,
            len(table),
            len(read.records),
            time.monotonic() - t0,
        )
        return table


def _partition_count(settings: Mapping[str, Any], topic: str) -> int:
    with RawClient(settings, time.monotonic() + RESTORE_TIMEOUT_S) as client:
        count = len(partition_leaders(client, topic))
    if not count:
        raise ValueError(f"input topic {topic!r} has no partitions")
    return count


__all__ = ["PartitionedAggregate"]
