"""The file backend of `coordinator.store.durable_log.DurableLog`: the segment log
(`coordinator.store.log.segment`) with its compaction (`coordinator.store.compaction`).

`FileLog` holds one `SegmentLog` (built from the state directory) and offers only
what `DurableLog` asks for: `where`, `size`, `fsyncs`, `max_payload_bytes`, `open`,
`append`, `sync` and `close` hand over to the segment as they are; `keepalive` does
nothing. The segment's compaction support (`begin_rewrite`, `read_range`,
`switch_to`, `flushed_end`) is for the `Compaction` alone, which is given the
segment itself, not the `FileLog`.

`FileLog.start_compaction` writes what the segment holds so far to the buffer's
file (no fsync: the compaction thread copies those bytes, and the new segment is
fsynced before it replaces the old one), then starts one `Compaction` of the
segment from the snapshot, standing at the segment's current end.
"""

from __future__ import annotations

from pathlib import Path

from coordinator.store.compaction import Compaction
from coordinator.store.durable_log import OnRecord
from coordinator.store.log.recovery import Recovery
from coordinator.store.log.segment import SegmentLog
from coordinator.store.snapshot import StoreSnapshot


class FileLog:
    """The segment log as a `DurableLog`; one owner thread."""

    def __init__(self, state_dir: Path) -> None:
        self._segment = SegmentLog(state_dir)

    @property
    def where(self) -> str:
        return self._segment.where

    @property
    def size(self) -> int:
        return self._segment.size

    @property
    def fsyncs(self) -> int:
        return self._segment.fsyncs

    @property
    def max_payload_bytes(self) -> int:
        return self._segment.max_payload_bytes

    def open(self, on_record: OnRecord, *, truncate_corrupt: bool = False) -> Recovery:
        return self._segment.open(on_record, truncate_corrupt=truncate_corrupt)

    def append(self, payload: bytes) -> int:
        return self._segment.append(payload)

    def sync(self) -> None:
        self._segment.sync()

    def keepalive(self) -> None:
        """Nothing to do: no other process reads the file log while it is written."""

    def start_compaction(self, snapshot: StoreSnapshot, batch_entries: int) -> Compaction:
        self._segment.flush()
        job = Compaction(self._segment, snapshot, self._segment.size, batch_entries)
        job.start()
        return job

    def close(self) -> None:
        self._segment.close()
