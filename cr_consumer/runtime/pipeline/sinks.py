"""Sinks: the exactly-once file sink (two-phase) and the console sink.

Exactly-once file sink
======================
Records are written as JSON lines (``records.to_json_line``: topic, partition,
offset, timestamp, key, value, headers if any, plus ``"member"``) to a *pending* file, one per
checkpoint interval. Only published files end in ``.jsonl``; pending files are
hidden (``.<member>-<token>.pending``, the token 32 hex digits) and invisible
to readers that glob ``*.jsonl``. A member's files are matched by their whole
name (:func:`pending_owner`, :func:`published_owner`), never by a prefix: the
pending files of member ``a-b`` are not member ``a``'s, whatever ``a``'s reset
deletes.

1. ``process_batch``: append the batch's lines, UTF-8 encoded
   (``records.to_json_bytes``), to the interval's pending file (opened in binary
   mode on the first record of the interval; one ``write`` per batch).
   Every :data:`SYNC_EVERY_BYTES` written, ``fdatasync`` the file, on the
   process thread (which does not hold the GIL while it waits): the data is
   written back while the region runs, so the fsync of step 3, inside the
   checkpoint's stop of the flow, finds little left to write. Then drop the
   synced whole pages from the page cache (``posix_fadvise(DONTNEED)``; they
   are clean, so nothing is lost or written again): the next writes reuse
   those pages instead of taking fresh memory for every MB of output (see
   :data:`DROP_WRITTEN_PAGES`).
2. ``drain()``: flush the pending file to the OS.
3. ``checkpoint(seq)``: flush + fsync (+ drop its pages, as in step 1) + close the pending file, and record
   ``{pending name, final name, seq}`` in the sink's checkpoint data, together
   with every earlier interval that is not published yet. The final name is
   ``<member>-<seq:010d>.jsonl`` (the controller never reuses a seq).
4. ``notify_checkpoint_complete(seq)`` (the region's RESUME after a completed
   checkpoint) and ``retire_checkpoint(seq)``: publish every recorded interval
   with seq <= ``seq``: ``os.link(pending, final)``, ``os.unlink(pending)``,
   then fsync the directory. A link never replaces an existing name (a rename
   would silently overwrite a published file): a final name that exists is an
   error, unless it is the same file or byte-identical (a crash between the link
   and the unlink: the re-publish only unlinks the pending name). Publishing is
   idempotent: a missing pending file whose final file exists was published
   before. (Hard links are chosen over ``renameat2(RENAME_NOREPLACE)``, which
   Python does not expose and not every platform or filesystem has; the
   output directory must support hard links, as every local POSIX one does.)
5. ``reset(seq, data)``: the region goes back to the consistent checkpoint
   ``seq``, so every interval recorded in ``data`` is published (this covers a
   crash between checkpoint and publish); every other pending file of this
   member (the open interval, intervals of later, failed checkpoints) is
   deleted: those records will be replayed.
6. ``reset_to_initial_state()``: delete all of this member's pending files.

A crash at any point leaves either a pending file (decided at the next reset) or
a complete published file; a published file is never rewritten.
"""

from __future__ import annotations

import filecmp
import json
import logging
import os
import re
import sys
import threading
import uuid
from pathlib import Path
from typing import Any, BinaryIO, TextIO, TypedDict

from coordinator.protocol.common.osutil import fsync_dir
from cr_consumer.runtime import fault_points
from cr_consumer.runtime.pipeline.operators import Operator
from cr_consumer.runtime.pipeline.records import encode_str, to_json_bytes, to_json_line

log = logging.getLogger(__name__)

FILE_SINK_CHECKPOINT_VERSION = 1
PENDING_SUFFIX = ".pending"
PUBLISHED_SUFFIX = ".jsonl"
#: Bytes of JSON lines between two ``fdatasync`` calls of the open pending file
#: (step 1). Without them a 1 s interval of ~10 MB was all written back by the
#: checkpoint's fsync, and on ext4 (data=ordered) every other fsync of that
#: checkpoint (the checkpoint store's small files, the other members' files)
#: waited behind it: 40-70 ms of stopped flow per checkpoint instead of ~10.
SYNC_EVERY_BYTES = 1 << 20
#: Default of ``FileSink(drop_written_pages=...)``: after each sync, drop the
#: pending file's synced pages from the page cache. A sink writes ~250 bytes per
#: record that nobody reads back soon (readers open published files later);
#: without the drop every MB of output takes 256 pages of free memory. On the
#: benchmark machine (a VM whose host takes free memory back: virtio-balloon free
#: page reporting; idle page cache paged out by DAMON) the member's process
#: thread spent 0.2-0.6 us of system time per record in some rounds, most of it
#: in the kernel's copy into those pages (``copy_folio_from_iter_atomic`` under
#: ``write``); with the drop the writes reuse the same few MB of page cache
#: (BENCHMARKS.md, "Pipeline member: CPU per record"). A sink whose output is read back at once (a reader tailing the
#: published files) may keep the pages: ``drop_written_pages=False``.
DROP_WRITTEN_PAGES = True
_fdatasync = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync
_fadvise = getattr(os, "posix_fadvise", None)  # macOS has none: the pages stay cached
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_PENDING = re.compile(r"^\.(?P<member>.+)-[0-9a-f]{32}" + re.escape(PENDING_SUFFIX) + "$", re.DOTALL)
_PUBLISHED = re.compile(r"^(?P<member>.+)-[0-9]{10,}" + re.escape(PUBLISHED_SUFFIX) + "$", re.DOTALL)


def pending_owner(name: str) -> str | None:
    """The member whose pending file ``name`` is (``.<member>-<32 hex>.pending``), else None.
    The token's fixed length makes the owner unique: ``.a-b-<token>.pending`` is
    member ``a-b``'s, never member ``a``'s."""
    m = _PENDING.match(name)
    return m.group("member") if m else None


def published_owner(name: str) -> str | None:
    """The member whose published file ``name`` is (``<member>-<seq, 10+ digits>.jsonl``), else None."""
    m = _PUBLISHED.match(name)
    return m.group("member") if m else None


class _Interval(TypedDict):
    """A recorded interval of a file sink, as its checkpoint holds it."""

    seq: int
    pending: str  # the pending file's name in the sink's directory
    final: str  # the name it is published under


class FileSink(Operator):
    """Exactly-once JSON-lines output into ``directory`` (see the module docstring)."""

    kind = "file_sink"

    def __init__(
        self,
        directory: str | os.PathLike[str],
        member: str,
        *,
        name: str | None = None,
        drop_written_pages: bool = DROP_WRITTEN_PAGES,
    ) -> None:
        super().__init__(name)
        if not member or "/" in member or member.startswith("."):
            raise ValueError(f"file sink: member name {member!r} must be non-empty, without '/', not starting with '.'")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.member = member
        self._extra = ',"member":' + encode_str(member)
        self._file: BinaryIO | None = None
        self._pending_name: str | None = None
        # Recorded intervals: the control thread's only.
        self._unpublished: list[_Interval] = []
        # The open interval (_file, _pending_name) is shared: the process thread
        # writes it, the control thread closes it at checkpoint/reset.
        self._lock = threading.Lock()
        self._unsynced = 0  # bytes written to the open pending file since its last fdatasync
        self._drop_pages = drop_written_pages and _fadvise is not None
        self._written = 0  # bytes written to the open pending file
        self._dropped = 0  # of those, the first ones whose pages were dropped (a multiple of the page size)
        self.records_written = 0

    # -- data -----------------------------------------------------------------
    def process_batch(self, records: list[Any]) -> list[Any]:
        if not records:
            return []
        data = to_json_bytes(records, self._extra)
        with self._lock:
            if self._file is None:
                self._pending_name = f".{self.member}-{uuid.uuid4().hex}{PENDING_SUFFIX}"
                # open for the whole interval: closed by checkpoint/reset/close
                self._file = open(self.directory / self._pending_name, "wb")  # noqa: SIM115 (see above)
            self._file.write(data)
            self.records_written += len(records)
            self._written += len(data)
            self._unsynced += len(data)
            if self._unsynced >= SYNC_EVERY_BYTES:
                self._unsynced = 0
                self._file.flush()
                _fdatasync(self._file.fileno())
                self._drop_synced(self._file, whole=False)
        return []

    def _drop_synced(self, file: BinaryIO, *, whole: bool) -> None:
        """Drop the open pending ``file``'s synced pages from the page cache (step 1),
        under ``_lock`` right after a sync: every page before the last partly
        written one, or with ``whole`` (the file is complete) every page. The
        partly written page stays: dropping it would make the next write read it
        back from the disk. The drop is a hint to the kernel: if a file system
        refuses it, the refusal is logged and the sink keeps its pages from then
        on (the output is already synced; the exactly-once path must not fail on it)."""
        if not self._drop_pages:
            return
        end = self._written if whole else self._written - self._written % _PAGE
        if end > self._dropped:
            assert _fadvise is not None  # _drop_pages
            try:
                _fadvise(file.fileno(), self._dropped, end - self._dropped, os.POSIX_FADV_DONTNEED)
            except OSError as exc:
                self._drop_pages = False
                log.warning(
                    "file sink %r: cannot drop written pages from the page cache in %s (%r); keeping them from now on",
                    self.name,
                    self.directory,
                    exc,
                )
                return
            self._dropped = end

    # -- region ---------------------------------------------------------------
    def drain(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.flush()

    def checkpoint(self, seq: int) -> bytes:
        with self._lock:
            if self._file is not None:
                self._file.flush()
                os.fsync(self._file.fileno())
                self._drop_synced(self._file, whole=True)
                self._file.close()
                self._file = None
                self._unsynced = self._written = self._dropped = 0
                assert self._pending_name is not None  # set with _file
                self._unpublished.append(
                    {"seq": seq, "pending": self._pending_name, "final": f"{self.member}-{seq:010d}{PUBLISHED_SUFFIX}"}
                )
                self._pending_name = None
                fsync_dir(self.directory)
            doc = {
                "version": FILE_SINK_CHECKPOINT_VERSION,
                "kind": self.kind,
                "member": self.member,
                "intervals": list(self._unpublished),
            }
        return json.dumps(doc, separators=(",", ":")).encode()

    def notify_checkpoint_complete(self, seq: int) -> None:
        self._publish_upto(seq)

    def retire_checkpoint(self, seq: int) -> None:
        self._publish_upto(seq)

    def reset(self, seq: int, data: bytes, attempt: int = 0) -> None:
        doc = json.loads(data)
        if doc.get("version") != FILE_SINK_CHECKPOINT_VERSION or doc.get("kind") != self.kind:
            raise ValueError(
                f"file sink {self.name!r}: checkpoint {seq} has version {doc.get('version')!r} "
                f"kind {doc.get('kind')!r}; expected version {FILE_SINK_CHECKPOINT_VERSION} kind {self.kind!r}"
            )
        with self._lock:
            self._close_open_file()
            intervals = [i for i in doc["intervals"] if i["seq"] <= seq]
            for interval in intervals:
                self._publish(interval)
            self._unpublished = []
            self._discard_pending(keep=set())
            fsync_dir(self.directory)

    def reset_to_initial_state(self, attempt: int = 0) -> None:
        with self._lock:
            self._close_open_file()
            self._unpublished = []
            self._discard_pending(keep=set())
            fsync_dir(self.directory)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
                self._unsynced = self._written = self._dropped = 0

    # -- helpers ----------------------------------------------------------------
    def _close_open_file(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            self._pending_name = None
            self._unsynced = self._written = self._dropped = 0

    def _publish_upto(self, seq: int) -> None:
        # No lock: the recorded intervals are closed files that only the control
        # thread touches; the process thread may keep writing the open interval
        # meanwhile (the member unblocks its permit before publishing).
        ready = [i for i in self._unpublished if i["seq"] <= seq]
        if not ready:
            return
        fault_points.hit(fault_points.Point.BEFORE_PUBLISH, self.member)
        for interval in ready:
            self._publish(interval)
        fault_points.hit(fault_points.Point.AFTER_PUBLISH, self.member)
        self._unpublished = [i for i in self._unpublished if i["seq"] > seq]
        fsync_dir(self.directory)

    def _publish(self, interval: _Interval) -> None:
        """Publish one sealed interval: link the final name, then unlink the pending
        one (step 4 of the module docstring); never overwrites a published file."""
        pending = self.directory / interval["pending"]
        final = self.directory / interval["final"]
        if pending.exists():
            try:
                os.link(pending, final)
            except FileExistsError:
                if not (os.path.samefile(pending, final) or filecmp.cmp(pending, final, shallow=False)):
                    raise FileExistsError(
                        f"file sink {self.name!r}: cannot publish checkpoint {interval['seq']}: {final.name} "
                        f"already exists in {self.directory} with other contents (a published file is never "
                        f"overwritten; is another process writing as member {self.member!r}?); "
                        f"the interval stays in {pending.name}"
                    ) from None
                # byte-identical: a crash between link and unlink published it already
            fault_points.hit(fault_points.Point.MID_PUBLISH, self.member)
            os.unlink(pending)
        elif not final.exists():
            raise FileNotFoundError(
                f"file sink {self.name!r}: interval of checkpoint {interval['seq']} is lost: "
                f"neither {pending.name} nor {final.name} exists in {self.directory}"
            )

    def _discard_pending(self, keep: set[str]) -> None:
        for path in self.directory.iterdir():
            if pending_owner(path.name) == self.member and path.name not in keep:
                path.unlink()

    def published_files(self) -> list[Path]:
        return sorted(p for p in self.directory.iterdir() if published_owner(p.name) == self.member)


class ConsoleSink(Operator):
    """Prints every record as a JSON line to ``stream`` (stdout). At-least-once:
    records replayed after a reset are printed again."""

    kind = "console_sink"

    def __init__(self, stream: TextIO | None = None, *, prefix: str = "", name: str | None = None) -> None:
        super().__init__(name)
        self.stream = stream
        self.prefix = prefix

    def process_batch(self, records: list[Any]) -> list[Any]:
        if records:
            stream = self.stream or sys.stdout
            stream.write("".join(self.prefix + to_json_line(r) for r in records))
            stream.flush()
        return []


class CollectSink(Operator):
    """Keeps records in memory (``self.records``); for tests and notebooks.
    Not exactly-once: a reset drops records collected since the checkpoint."""

    kind = "collect_sink"

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self.records: list[Any] = []
        self._marks: dict[int, int] = {}

    def process_batch(self, records: list[Any]) -> list[Any]:
        self.records.extend(records)
        return []

    def checkpoint(self, seq: int) -> bytes:
        self._marks[seq] = len(self.records)
        return json.dumps({"version": 1, "kind": self.kind, "count": len(self.records)}).encode()

    def reset(self, seq: int, data: bytes, attempt: int = 0) -> None:
        del self.records[json.loads(data)["count"] :]

    def reset_to_initial_state(self, attempt: int = 0) -> None:
        self.records.clear()
