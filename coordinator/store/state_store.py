"""The coordinator's durable state: an in-memory table over an append-only log.

This follows Kafka's offsets topic: every write is
appended to a keyed log (`coordinator.store.durable_log.DurableLog`: a segment file,
`coordinator.store.file_log`, or a Kafka topic, `coordinator.store.kafka`; payloads in
`coordinator.store.records`), an in-memory table serves every read, the log is
replayed on start-up, deletes are tombstones, idle groups' control variables
expire, and the log is compacted when it is mostly dead entries
(`coordinator.store.compaction`). docs/durable-state.md describes the format.

What it holds:
- control variables (group, topic, partition) -> initial offset, first writer
  wins (`control_table.ControlTable`);
- the group registry: group -> consistent-region index and registered
  operator names (logged per member, so a registration appends O(1) bytes
  however many members the group has);
- small JSON documents of other services (namespace, key) -> dict;
- each group's last-activity time (retention).

Where each part lives: the tables are `coordinator.store.tables.StoreTables`;
replay of the log at start-up is one `coordinator.store.replay.Replay`; the
write path (a request's entries -> one record -> the tables) is the store's
`coordinator.store.writer.RecordWriter`; a retention pass is one
`coordinator.store.retention.Expiry`; retention and compaction scheduling the
store's `coordinator.store.maintenance.Maintenance`; this module is the live
table API the server calls (`coordinator.server.api.ServerStore`): it validates
each request fully and decides its entries before the writer changes anything.

Protocol with the server (one owner thread calls every method):
1. `load()` once (`coordinator.store.replay`); until it returns the server answers
   LOAD_IN_PROGRESS.
2. Per loop iteration: apply every ready request (each write appends one
   record to the log buffer, no I/O, and then applies the same entries to the
   tables that replay would apply), call `sync()` once (one fsync: group
   commit), then send the replies. A write is acknowledged only after that
   sync returned; a crash before it loses only unacknowledged writes.
3. Periodically `expire()` and `maybe_compact()` (the latter starts a
   background compaction, and on a later call switches to the new segment).
   Neither raises for a failed run (it is logged, counted and retried with
   backoff) except `LogFailed`, which is fatal.
   Services call `touch(group)` for every message that shows a group is in use
   (retention counts idleness from the last one).
4. `close()` on shutdown: stops a compaction, syncs, closes, unlocks.

Failure: a write that raises (bad input: ValueError/TypeError naming the
problem; RegionIndexMismatch) has changed nothing. A failed write() or fsync of
the log raises `coordinator.store.log.segment.LogFailed` (an OSError's consequence), and so does
every later write or sync: the log is fail-stop, because after a failed fsync
the kernel may have dropped the data and a later "successful" fsync proves
nothing. The caller must not acknowledge anything not covered by a successful
sync, and should exit so that a restart recovers from what is on disk.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from coordinator.protocol.common.partitions import partition_label
from coordinator.protocol.wire.status import LoadReport, StoreStats
from coordinator.store import records
from coordinator.store.control_table import ABSENT, MAX_OFFSET
from coordinator.store.durable_log import DurableLog
from coordinator.store.file_log import FileLog
from coordinator.store.maintenance import Maintenance, MaintenancePolicy
from coordinator.store.replay import Replay
from coordinator.store.retention import Expiry
from coordinator.store.tables import LogCounters, StoreTables
from coordinator.store.writer import RecordWriter

__all__ = ["MAX_PARTITION", "LoadReport", "RegionIndexMismatch", "StateStore"]

log = logging.getLogger(__name__)

# Largest partition number accepted: the table stores offsets in a buffer
# indexed by partition, so this bounds one topic's buffer (8 MiB).
MAX_PARTITION = (1 << 20) - 1


#: What no topic is: the put loop's "previous topic" before the first entry.
_NO_TOPIC_YET = object()


class RegionIndexMismatch(Exception):
    def __init__(self, group: str, expected: int, got: int) -> None:
        super().__init__(f"group {group!r} is registered with consistent-region index {expected}, not {got}")
        self.group, self.expected, self.got = group, expected, got


def _check_name(what: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")
    return value


def _check_int(what: str, value: Any, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{what} must be an int in [{low}, {high}], got {value!r}")
    return value


class StateStore:
    """The live table API (see the module docstring); one owner thread."""

    #: The tables: filled by one `Replay` at load, then written by the writes below and
    #: by retention (`Expiry`); snapshotted by compaction (`Maintenance`).
    _tables: StoreTables
    #: Counts of the active segment: set at load, advanced by the `RecordWriter`,
    #: rebased by `Maintenance` when it switches to a compacted segment.
    _counters: LogCounters

    def __init__(
        self,
        state_dir: Path,
        *,
        retention_s: float = 7 * 86400,
        compact_dead_ratio: float = 0.5,
        compact_min_bytes: int = 1 << 20,
        clock: Callable[[], float] = time.time,
        truncate_corrupt: bool = False,
        log: DurableLog | None = None,
    ) -> None:
        if not retention_s > 0:
            raise ValueError(f"retention_s must be > 0 seconds, got {retention_s!r}")
        if not 0 < compact_dead_ratio < 1:
            raise ValueError(f"compact_dead_ratio must be in (0, 1), got {compact_dead_ratio!r}")
        if compact_min_bytes < 0:
            raise ValueError(f"compact_min_bytes must be >= 0, got {compact_min_bytes!r}")
        self.state_dir = Path(state_dir)
        self.retention_s = float(retention_s)
        self.compact_dead_ratio = compact_dead_ratio
        self.compact_min_bytes = compact_min_bytes
        self._clock = clock
        # The operator's explicit choice to cut a corrupt log at load (see log.recovery).
        self.truncate_corrupt = truncate_corrupt
        # The durable log: the segment file in `state_dir` unless another is given (the
        # Kafka log, `coordinator.store.kafka`); the store sees only the DurableLog seam.
        self._log: DurableLog = log if log is not None else FileLog(self.state_dir)
        # Written by replay (load), the writes below and retention; read by compaction.
        self._tables = StoreTables()
        # Written by the writer's appends, set at load, rebased by Maintenance after a compaction.
        self._counters = LogCounters()
        self._writer = RecordWriter(self._log, self._tables, self._counters, clock=clock)
        self._maintenance = Maintenance(
            self._log,
            self._tables,
            self._counters,
            MaintenancePolicy(self.retention_s, compact_dead_ratio, compact_min_bytes),
            clock=clock,
        )
        self._load_seconds = 0.0
        self._truncated = 0
        self.loaded = False
        self._closed = False

    # ---- start-up ----------------------------------------------------------------
    def load(self) -> LoadReport:
        """Replay the log into the tables (`coordinator.store.replay`); once, before close()."""
        if self.loaded or self._closed:
            raise RuntimeError("StateStore.load() may be called once, before close()")
        report = Replay(self._log, self._tables, clock=self._clock, truncate_corrupt=self.truncate_corrupt).run()
        self._counters.entries = report.entries
        self._counters.records = report.records
        self._truncated = report.truncated_bytes
        self._load_seconds = report.seconds
        self.loaded = True
        return report

    # ---- writing -----------------------------------------------------------------
    def _ready(self) -> None:
        if not self.loaded:
            raise RuntimeError("StateStore is not loaded: call load() first")
        if self._closed:
            raise RuntimeError("StateStore is closed")

    def put_initial_offsets(  # noqa: C901 - the write path's per-partition loop, inline on purpose (bench_store)
        self,
        group: str,
        offsets: Mapping[tuple[str, int], int],
    ) -> dict[tuple[str, int], int]:
        """Put-if-absent: store the keys not yet set; return the effective value of every key.

        Appends one record for the new entries (none if nothing is new). Not
        durable until the next `sync()`.
        """
        self._ready()
        _check_name("group", group)
        effective: dict[tuple[str, int], int] = {}
        new: dict[str, tuple[list[int], list[int]]] = {}
        checked_topics: set[str] = set()
        # Per topic run (a request lists a topic's partitions together, as a rule): where
        # its offsets are read (GroupReads) and where its new entries go.
        last_topic: object = _NO_TOPIC_YET
        lists: tuple[list[int], list[int]] | None = None
        with self._tables.control.reads(group) as reads:
            dense, slots, sparse = reads.nothing
            for key, offset in offsets.items():
                if type(key) is not tuple or len(key) != 2:
                    raise ValueError(f"control variable key must be (topic, partition), got {key!r}")
                topic, partition = key
                if topic is not last_topic and topic != last_topic:
                    if topic not in checked_topics:  # a name is checked once per request, not once per partition
                        checked_topics.add(_check_name("topic", topic))
                    dense, slots, sparse = reads.topic(topic)
                    last_topic, lists = topic, None
                # the checks' messages are built only on failure: this loop runs once per partition
                if type(partition) is not int or not 0 <= partition <= MAX_PARTITION:
                    _check_int(f"partition of {topic!r}", partition, 0, MAX_PARTITION)
                if type(offset) is not int or not 0 <= offset <= MAX_OFFSET:
                    _check_int(f"offset of {partition_label(topic, partition)}", offset, 0, MAX_OFFSET)
                if partition < slots:
                    current = dense[partition]
                elif sparse is not None:
                    current = sparse.get(partition, ABSENT)
                else:
                    current = ABSENT
                if current == ABSENT:
                    if lists is None:
                        lists = new.setdefault(topic, ([], []))
                    lists[0].append(partition)
                    lists[1].append(offset)
                    current = offset
                effective[key] = current
        if not new:
            if effective:
                self._writer.mark_active(group)
            return effective
        self._writer.write_for_group(group, [records.control_entry(group, t, ps, os_) for t, (ps, os_) in new.items()])
        return effective

    def get_initial_offsets(self, group: str) -> dict[tuple[str, int], int]:
        self._ready()
        return self._tables.control.group_items(group)

    def group_count(self, group: str) -> int:
        """Number of control variables of `group`, without copying them (status pages)."""
        self._ready()
        return self._tables.control.group_count(group)

    def register_member(self, group: str, region_index: int, operator_name: str) -> list[str]:
        """Register `operator_name` in `group` (created on first registration); idempotent.

        Appends one member record (plus the group's registry record when it is
        new): O(1) log bytes however many members the group has."""
        self._ready()
        _check_name("group", group)
        _check_int("region_index", region_index, 0, MAX_OFFSET)
        _check_name("operator_name", operator_name)
        current = self._tables.groups.get(group)
        if current is not None and current.region_index != region_index:
            raise RegionIndexMismatch(group, current.region_index, region_index)
        if current is not None and current.has(operator_name):
            self._writer.mark_active(group)
            return list(current.members)
        entries = [] if current is not None else [records.registry_entry(group, region_index)]
        entries.append(records.member_entry(group, operator_name, True))
        self._writer.write_for_group(group, entries)
        return list(self._tables.groups[group].members)

    def unregister_member(self, group: str, operator_name: str) -> list[str]:
        """Remove `operator_name` from `group`; idempotent. The group (and its region
        index) stays until retention expires it while it has no members."""
        self._ready()
        current = self._tables.groups.get(group)
        if current is None:
            return []
        self._writer.mark_active(group)
        if not current.has(operator_name):
            return list(current.members)
        self._writer.append_request([records.member_entry(group, operator_name, False)])
        return list(self._tables.groups[group].members)

    def members(self, group: str) -> list[str]:
        self._ready()
        current = self._tables.groups.get(group)
        return list(current.members) if current else []

    def region_index(self, group: str) -> int | None:
        self._ready()
        current = self._tables.groups.get(group)
        return current.region_index if current else None

    def groups(self) -> list[str]:
        self._ready()
        return sorted(self._tables.activity)  # the groups holding state (StoreTables invariant)

    def touch(self, group: str) -> None:
        """Record activity of a group: call it for every message that shows the group
        is in use (registry and control-variable requests, merges, region
        heartbeats, acks and checkpoints). Retention tombstones a group's state
        only after `retention_s` without any. Kept in memory and persisted with
        the next record or the next `expire()` run, whichever comes first; a
        group that holds no state is ignored."""
        if self._tables.holds_state(group):
            self._writer.mark_active(group)

    def put_document(self, namespace: str, key: str, value: dict[str, Any] | None) -> None:
        self._ready()
        _check_name("namespace", namespace)
        _check_name("key", key)
        if value is not None and not isinstance(value, dict):
            raise ValueError(f"document {namespace}/{key} must be a dict or None, got {type(value).__name__}")
        docs = self._tables.docs.get(namespace)
        if value is None and (docs is None or key not in docs):
            return
        self._writer.append_request([records.document_entry(namespace, key, value)])

    def get_document(self, namespace: str, key: str) -> dict[str, Any] | None:
        self._ready()
        text = self._tables.docs.get(namespace, {}).get(key)
        if text is None:
            return None
        document: dict[str, Any] = json.loads(text)  # put_document stored a dict
        return document

    def documents(self, namespace: str) -> dict[str, dict[str, Any]]:
        self._ready()
        return {k: json.loads(v) for k, v in self._tables.docs.get(namespace, {}).items()}

    def sync(self) -> None:
        """Group commit: one fsync for everything appended since the last sync."""
        self._ready()
        self._log.sync()

    def keepalive(self) -> None:
        """The log's sign of life when idle (`DurableLog.keepalive`); nothing before load."""
        if self.loaded and not self._closed:
            self._log.keepalive()

    # ---- maintenance (coordinator.store.maintenance) ----------------------------------
    def expire(self, now: float | None = None) -> int:
        """Retention pass (`Maintenance.expire`): tombstone the state of idle groups."""
        self._ready()
        return self._maintenance.expire(self._expire, now)

    def _expire(self, now: float) -> int:
        """One retention pass (`Expiry`): the groups idle since before ``now - retention_s``."""
        return Expiry(self._tables, self._writer.append_payload, clock=self._clock, retention_s=self.retention_s).run(
            now
        )

    def maybe_compact(self) -> bool:
        """Start a due compaction or finish a done one (`Maintenance.maybe_compact`)."""
        self._ready()
        return self._maintenance.maybe_compact()

    def compact(self, timeout: float = 60.0) -> None:
        """Compact now and wait for it (tests, benchmarks, operator tools)."""
        self._ready()
        self._maintenance.compact(timeout)

    def stats(self) -> StoreStats:
        tables, counters = self._tables, self._counters
        live = tables.live_entries()
        m = self._maintenance.stats()
        return StoreStats(
            control_variables=len(tables.control),
            groups=len(tables.activity),
            documents=sum(len(d) for d in tables.docs.values()),
            log_bytes=self._log.size,
            log_records=counters.records,
            live_entries=live,
            dead_entries=max(counters.entries - live, 0),
            compactions=m.compactions,
            compaction_running=m.compaction_running,
            compaction_failures=m.compaction_failures,
            expire_failures=m.expire_failures,
            largest_compaction_record_bytes=m.largest_compaction_record_bytes,
            compaction_max_pause_ms=m.compaction_max_pause_ms,
            fsyncs=self._log.fsyncs,
            load_seconds=self._load_seconds,
            truncated_bytes=self._truncated,
        )

    def close(self) -> None:
        """Stop a running compaction, sync and close the log, release the directory."""
        if self._closed:
            return
        self._closed = True
        self._maintenance.close()
        if self.loaded:
            self._log.close()
