"""Timeline events of a drill: who did what, when, as JSON lines.

Writers
-------
* Every member process runs the drill pipeline's :class:`~cr_consumer.drill.pipeline.Probe`
  operator, which appends events to ``<timeline dir>/<member>-<pid>.jsonl``:
  ``batch`` (records processed since the last sample, at most every
  ``SAMPLE_PERIOD_S``), ``drain``, ``checkpoint`` (seq), ``complete`` (seq: the
  region declared it consistent), ``reset`` (seq, attempt), ``reset_initial``,
  ``resume`` (first batch after a reset) and ``partitions`` (the set of
  partitions this member receives records from changed: a rebalance).
* The drill itself appends ``fault`` and ``phase`` events to ``drill.jsonl``,
  and its fault tasks (``fault_tasks.py``) ``fault_fired`` (an armed fault
  point fired: point, member, pid), ``fault_pause`` / ``fault_continue``
  (SIGSTOP / SIGCONT of a process) and ``fault_hold`` (kill-member-long: how
  long the member was down and what ended the hold).

One line per event: ``{"v": 1, "t": <unix time, s>, "member": str, "ev": str, ...}``.
Each writer owns its file and writes whole lines with one ``write`` call on a
line-buffered file, so a reader that tails the files sees only whole lines
(a partial last line is left for the next read).

Reader
------
:class:`TimelineReader` tails every ``*.jsonl`` file of the directory
incrementally (``poll()`` returns the new events) and keeps all events seen.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, TextIO

TIMELINE_VERSION = 1
#: At most one ``batch`` sample per member per this period: enough resolution for
#: the throughput plot without writing a line per batch.
SAMPLE_PERIOD_S = 0.25

#: One event as read back from its line: its fields depend on ``ev`` (see the
#: module docstring) and are not validated, hence Any.
Event = dict[str, Any]


class TimelineWriter:
    """Appends events of one process to one file (thread-safe)."""

    def __init__(self, path: str | os.PathLike[str], member: str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.member = member
        self._lock = threading.Lock()
        self._file: TextIO | None = open(self.path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 (closed in close())

    def event(self, ev: str, t: float | None = None, member: str | None = None, **fields: Any) -> None:
        """Append one event; ``t`` defaults to now (a fault is stamped with its
        start), ``member`` to this writer's (controller events are relayed)."""
        doc = {"v": TIMELINE_VERSION, "t": time.time() if t is None else t, "member": member or self.member, "ev": ev}
        doc.update(fields)
        line = json.dumps(doc, separators=(",", ":")) + "\n"
        with self._lock:
            if self._file is not None:
                self._file.write(line)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


class TimelineReader:
    """Tails every ``*.jsonl`` file in ``directory`` (see the module docstring)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._pos: dict[Path, int] = {}
        self.events: list[Event] = []

    def poll(self) -> list[Event]:
        new: list[Event] = []
        if not self.directory.is_dir():
            return new
        for path in sorted(self.directory.glob("*.jsonl")):
            pos = self._pos.get(path, 0)
            try:
                with open(path, "rb") as f:
                    f.seek(pos)
                    chunk = f.read()
            except FileNotFoundError:
                continue
            end = chunk.rfind(b"\n")
            if end < 0:
                continue
            for line in chunk[: end + 1].splitlines():
                if line.strip():
                    try:
                        new.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise ValueError(f"timeline file {path} has a malformed line: {line[:200]!r}") from exc
            self._pos[path] = pos + end + 1
        new.sort(key=lambda e: e["t"])
        self.events.extend(new)
        return new

    def all_events(self) -> list[Event]:
        self.poll()
        return sorted(self.events, key=lambda e: e["t"])
