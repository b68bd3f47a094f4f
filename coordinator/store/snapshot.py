"""A point-in-time copy of the store's tables, and its encoding as batched log records.

Both durable logs rebuild a short log from one of these: the file log's compaction
(`coordinator.store.compaction`) rewrites its segment from it, the Kafka log
(`coordinator.store.kafka.snapshots`) writes it to its snapshot topic.

1. (owner thread) `take_snapshot` copies the tables with C-level dict copies only:
   the group level of the control table (topic dicts shared copy-on-write, offset
   buffers shared, see `coordinator.store.control_table`), the registry, the
   documents and the activity times. The owner must call
   ``tables.control.release_snapshot()`` once the snapshot is written or dropped.
2. (any thread) `write_snapshot` encodes it as records bounded by bytes
   (`records.BATCH_BYTES`) and keyed entries (`batch_entries`): the activity, then
   per group its "r" entry and one "m" entry per member, the documents, and the
   control variables. Replaying those records into empty tables gives the tables
   of step 1. Tombstones are not written: they have nothing left to delete.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import attrs

from coordinator.store import records
from coordinator.store.control_table import Snapshot, iter_snapshot
from coordinator.store.tables import RegistryEntry, StoreTables

#: ``emit(payload, entries, count)``: one encoded record of `count` keyed entries.
Emit = Callable[[bytes, list[records.Entry], int], None]


@attrs.frozen
class StoreSnapshot:
    control: Snapshot
    groups: dict[str, RegistryEntry]
    documents: dict[str, dict[str, str]]  # namespace -> key -> JSON text
    activity: dict[str, float]  # may name groups without state: filtered when written
    ts: float


def take_snapshot(tables: StoreTables, ts: float) -> StoreSnapshot:
    """Step 1 (owner thread): C-level copies only, O(groups) at memcpy-like speed."""
    return StoreSnapshot(
        control=tables.control.snapshot(),
        groups=dict(tables.groups),  # values are frozen
        documents={ns: dict(d) for ns, d in tables.docs.items()},
        activity=dict(tables.activity),
        ts=ts,
    )


def write_snapshot(snap: StoreSnapshot, batch_entries: int, emit: Emit, between: Callable[[], None]) -> int:
    """Step 2: emit `snap` as batched records; `between()` runs between control entries
    (cancellation, yielding the GIL). Returns the payload bytes of the largest record."""
    batcher = records.Batcher(snap.ts, emit, max_entries=batch_entries)
    for group, at in snap.activity.items():
        if group in snap.groups or group in snap.control:
            batcher.add_activity(group, at)
    for group, value in snap.groups.items():
        batcher.add(records.registry_entry(group, value.region_index))
        for member in value.members:
            batcher.add(records.member_entry(group, member, True))
    for namespace, docs in snap.documents.items():
        for key, text in docs.items():
            batcher.add(records.document_entry(namespace, key, json.loads(text)))
    for group, topic, partitions, offsets in iter_snapshot(snap.control, batch_entries):
        between()
        batcher.add(records.control_entry(group, topic, partitions, offsets))
    batcher.flush()
    return batcher.largest
