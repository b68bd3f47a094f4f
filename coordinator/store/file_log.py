"""The file backend of `coordinator.store.durable_log.DurableLog`: the segment log
(`coordinator.store.log.segment`) with its compaction (`coordinator.store.compaction`).

`FileLog.start_compaction` writes what the segment holds so far to the buffer's
file (no fsync: the compaction thread copies those bytes, and the new segment is
fsynced before it replaces the old one), then starts one `Compaction` from the
snapshot, standing at the segment's current end.
"""

from __future__ import annotations

from coordinator.store.compaction import Compaction
from coordinator.store.log.segment import SegmentLog
from coordinator.store.snapshot import StoreSnapshot


class FileLog(SegmentLog):
    """The segment log as a `DurableLog`; one owner thread."""

    def start_compaction(self, snapshot: StoreSnapshot, batch_entries: int) -> Compaction:
        self.flush()
        job = Compaction(self, snapshot, self.size, batch_entries)
        job.start()
        return job

    def keepalive(self) -> None:
        """Nothing to do: no other process reads the file log while it is written."""
