"""Recovery of the durable log on open: lock, leftovers, replay, torn-tail repair.

`coordinator.store.log.segment.SegmentLog.open` calls `lock_state_dir` and then
`recover`; this module owns the files in the state directory and what is done
to them when a coordinator starts. Appending and syncing are
`coordinator.store.log.segment`'s business.

Files in the state directory::

    segment-<generation:020d>.log        the active segment (exactly one after open)
    segment-<generation:020d>.log.tmp    a compaction in progress (deleted on open)
    segment-<generation:020d>.log.corrupt-<offset>   bytes cut off by recovery (kept for forensics)
    LOCK                                 flock'ed while a store has the directory open

Recovery on open:

1. Take the directory lock (`lock_state_dir`). A second coordinator on the same
   directory fails at start-up with `StateDirInUse`, a clear error. The kernel
   releases the lock when the process dies, so a restart after kill -9 works.
   ``cr-coordinator`` takes the lock with `hold_state_dir` before it binds and
   prints ``ready`` (the replay runs later, in the background); the store's
   own `lock_state_dir` then reuses that held lock.
2. Delete `*.tmp` files (a compaction that did not reach its rename) and every
   segment older than the newest one (a compaction that renamed but did not
   get to delete the old file). The rename is the commit point of a compaction,
   so the newest segment is always complete.
3. Scan the newest segment from offset 0, handing every record to the
   caller's `on_record(offset, payload)` (`coordinator.store.log.frame.scan`).
4. The first bad record ends the valid log. What happens depends on its kind
   (`coordinator.store.log.frame.DamageKind`; the reasoning is in docs/durable-state.md,
   "Torn tail or corruption"):
   - TORN (nothing good follows it: the end of an append cut by a crash) is
     truncated automatically and logged as a WARNING. Since a sync returns
     only after the bytes are on disk, a torn tail holds no acknowledged
     record.
   - CORRUPT (a good record follows it) and UNDECODABLE (CRC-valid but not a
     record) may hide acknowledged records: open fails with `CorruptLog`,
     naming the file and the byte offset, and changes nothing, unless the
     operator passed `truncate_corrupt` (`cr-coordinator --truncate-corrupt`);
     then the log is cut there too, logged as an ERROR with the number of
     good records lost.
   A cut first copies the bytes from the bad record on to
   `<segment>.corrupt-<offset>` and fsyncs it, then truncates the segment
   and fsyncs it; new appends follow the last good record.
5. A record whose CRC is valid but whose version is newer than this code
   understands is not corruption: open fails with `UnsupportedFormat` and
   truncates nothing (upgrade the coordinator). Any other exception of the
   callback (a `LogError` for a well-formed record that cannot be applied) also
   stops the open without truncating.

If a file was created, deleted or cut, `Recovery.dir_changed` tells the log to
fsync the directory before it acknowledges anything.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path

import attrs

from coordinator.store.log.frame import Damage, DamageKind, LogError, scan

log = logging.getLogger(__name__)

SEGMENT_RE = re.compile(r"^segment-(\d{20})\.log$")
LOCK_NAME = "LOCK"


class StateDirInUse(LogError):
    pass


class CorruptLog(LogError):
    """The segment is damaged where acknowledged records may lie; nothing was changed."""

    def __init__(self, path: Path, damage: Damage) -> None:
        super().__init__(
            f"{damage.describe(path)}. Not a torn tail, so records after it may have been "
            f"acknowledged; nothing was truncated. Keep a copy of {path.parent}, then restart "
            f"with --truncate-corrupt to cut the log at byte {damage.offset} "
            f"(the {damage.size} bytes cut would be kept in {path.name}.corrupt-{damage.offset})"
        )
        self.path, self.damage = path, damage


def segment_name(generation: int) -> str:
    return f"segment-{generation:020d}.log"


@attrs.frozen
class Recovery:
    """What `recover` found (and `SegmentLog.open` returns)."""

    path: Path
    generation: int
    records: int
    bytes: int  # valid bytes replayed
    truncated_bytes: int
    damage: Damage | None
    removed: tuple[str, ...]  # leftover files deleted (tmp files, superseded segments)
    dir_changed: bool  # a file was created, deleted or cut: the directory needs an fsync


#: Locks this process took ahead of its store (`hold_state_dir`): resolved dir -> fd.
_held: dict[Path, int] = {}


def hold_state_dir(state_dir: Path) -> Callable[[], None]:
    """Step 1 taken early, for the whole process: lock `state_dir` now, so a
    second coordinator fails before it reports ready. Returns the release
    function (call it after the store is closed)."""
    key = Path(state_dir).resolve()
    if key in _held:
        raise StateDirInUse(f"state dir {state_dir} is already held by this process")
    fd = lock_state_dir(Path(state_dir))
    _held[key] = fd

    def release() -> None:
        if _held.pop(key, None) is not None:
            os.close(fd)

    return release


def lock_state_dir(state_dir: Path) -> int:
    """Step 1: flock `state_dir/LOCK` (non-blocking) and write our pid; returns its fd.

    Closing the fd releases the lock. If this process holds the directory
    (`hold_state_dir`), returns a duplicate of the held fd: the flock belongs
    to the shared open file, so it stays held until both are closed.
    """
    held = _held.get(Path(state_dir).resolve())
    if held is not None:
        return os.dup(held)
    path = state_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise StateDirInUse(
                f"state dir {state_dir} is in use by another coordinator "
                f"(lock {path} is held); stop it or use another --state-dir"
            ) from exc
        raise
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def recover(
    state_dir: Path, on_record: Callable[[int, memoryview], None], *, truncate_corrupt: bool = False
) -> tuple[int, Recovery]:
    """Steps 2-6 (the caller holds the lock): returns an O_APPEND fd of the newest
    segment, positioned after its last good record, and what was found.

    Raises CorruptLog (nothing changed) for damage that is not a torn tail,
    unless `truncate_corrupt`."""
    generation, removed = _remove_leftovers(state_dir)
    path = state_dir / segment_name(generation)
    created = not path.exists()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        with open(path, "rb") as f:
            data = f.read()
        result = scan(data, on_record, path=path)
        truncated = 0
        if result.damage is not None:
            if result.damage.kind is not DamageKind.TORN and not truncate_corrupt:
                raise CorruptLog(path, result.damage)
            truncated = _cut_tail(path, fd, data, result.damage)
    except BaseException:
        os.close(fd)
        raise
    dir_changed = created or bool(removed) or result.damage is not None
    return fd, Recovery(
        path,
        generation,
        result.records,
        result.end,
        truncated,
        result.damage,
        tuple(removed),
        dir_changed,
    )


def _remove_leftovers(state_dir: Path) -> tuple[int, list[str]]:
    """Step 2: delete tmp files and superseded segments; returns the newest generation."""
    removed: list[str] = []
    generations = []
    for entry in os.listdir(state_dir):
        if entry.endswith(".tmp"):
            os.unlink(state_dir / entry)
            removed.append(entry)
            log.warning("removed %s: a compaction that did not finish", entry)
        elif m := SEGMENT_RE.match(entry):
            generations.append(int(m.group(1)))
    generations.sort()
    for old in generations[:-1]:
        os.unlink(state_dir / segment_name(old))
        removed.append(segment_name(old))
        log.warning("removed %s: superseded by a finished compaction", segment_name(old))
    return (generations[-1] if generations else 0), removed


def _cut_tail(path: Path, fd: int, data: bytes, damage: Damage) -> int:
    """Step 4: keep the bad bytes in `.corrupt-<offset>`, truncate the segment there."""
    keep = path.parent / f"{path.name}.corrupt-{damage.offset}"
    with open(keep, "wb") as f:
        f.write(data[damage.offset :])
        f.flush()
        os.fsync(f.fileno())
    os.ftruncate(fd, damage.offset)
    os.fsync(fd)
    if damage.kind is DamageKind.TORN:
        log.warning(
            "%s: torn tail at byte %d (%s): truncated %d bytes (copy kept in %s); "
            "appends continue after the last good record",
            path,
            damage.offset,
            damage.reason,
            damage.size,
            keep,
        )
    else:
        log.error(
            "--truncate-corrupt: %s; cut %d bytes at byte %d (copy kept in %s): the values written by "
            "%d or more valid records after it are lost",
            damage.describe(path),
            damage.size,
            damage.offset,
            keep,
            damage.valid_records_after,
        )
    return damage.size
