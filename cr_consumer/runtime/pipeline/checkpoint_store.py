"""Where a member keeps its operators' checkpoints.

Interface (:class:`CheckpointStore`): ``save(seq, operator_id, data)``,
``load(seq, operator_id) -> bytes``, ``retire(seq)`` (delete every checkpoint
with id <= seq: the region will never reset to them), ``latest() -> int | None``
and ``seal(seq)`` (all operators of ``seq`` are saved).

:class:`DirectoryCheckpointStore` is the default: ``ROOT/<seq:010d>/<operator_id>.ckpt``.

1. ``save`` writes ``<operator_id>.ckpt.tmp``, fsyncs it and renames it over
   the final name: a reader sees the whole old file or the whole new one, never
   a torn one.
2. ``seal(seq)``, after every operator of the member is saved, writes the
   ``SEALED`` marker the same way, then fsyncs the checkpoint's directory and
   the root: one directory fsync makes every rename of step 1 durable, so a
   sealed checkpoint survives a power cut; ``latest()`` only returns sealed
   checkpoints, and the member acknowledges a checkpoint only after the seal.
3. ``retire(seq)`` deletes the directories of checkpoints <= seq (marker first,
   so a crash mid-delete leaves an unsealed directory that ``retire`` finishes
   later). It does not fsync: a retired checkpoint that reappears after a power
   cut is never reset to, and the next retire deletes it.

Operator ids must be simple names (letters, digits, ``-``, ``_``, ``.``).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Protocol

from coordinator.protocol.common.osutil import fsync_dir

_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
SEALED = "SEALED"


class CheckpointNotFound(KeyError):
    pass


class CheckpointStore(Protocol):
    def save(self, seq: int, operator_id: str, data: bytes) -> None: ...

    def load(self, seq: int, operator_id: str) -> bytes: ...

    def seal(self, seq: int) -> None: ...

    def retire(self, seq: int) -> None: ...

    def latest(self) -> int | None: ...


def _atomic_write(path: Path, data: bytes, *, sync_dir: bool = True) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync_dir:
        fsync_dir(path.parent)


class DirectoryCheckpointStore:
    """Checkpoints as files under ``root`` (see the module docstring)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _dir(self, seq: int) -> Path:
        if not isinstance(seq, int) or seq < 0:
            raise ValueError(f"checkpoint seq must be a non-negative int, got {seq!r}")
        return self.root / f"{seq:010d}"

    @staticmethod
    def _check_id(operator_id: str) -> None:
        if not _ID.match(operator_id or ""):
            raise ValueError(f"operator id {operator_id!r}: use letters, digits, '-', '_' and '.' only")

    def save(self, seq: int, operator_id: str, data: bytes) -> None:
        self._check_id(operator_id)
        d = self._dir(seq)
        d.mkdir(parents=True, exist_ok=True)
        _atomic_write(d / f"{operator_id}.ckpt", bytes(data), sync_dir=False)  # seal() syncs the directory

    def load(self, seq: int, operator_id: str) -> bytes:
        self._check_id(operator_id)
        path = self._dir(seq) / f"{operator_id}.ckpt"
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise CheckpointNotFound(f"no checkpoint {seq} for operator {operator_id!r} in {self.root}") from None

    def has(self, seq: int) -> bool:
        return (self._dir(seq) / SEALED).exists()

    def seal(self, seq: int) -> None:
        d = self._dir(seq)
        _atomic_write(d / SEALED, b"1\n")  # fsyncs d: the operators' renames are durable too
        fsync_dir(self.root)  # and d's own entry

    def seqs(self) -> list[int]:
        out = []
        for p in self.root.iterdir():
            if p.is_dir() and p.name.isdigit():
                out.append(int(p.name))
        return sorted(out)

    def retire(self, seq: int) -> None:
        for s in self.seqs():
            if s <= seq:
                d = self._dir(s)
                (d / SEALED).unlink(missing_ok=True)
                shutil.rmtree(d)

    def latest(self) -> int | None:
        sealed = [s for s in self.seqs() if self.has(s)]
        return sealed[-1] if sealed else None
