"""Run a command under py-spy and summarise where its time went.

py-spy (``pip install py-spy``; not a dependency of the project) samples the
Python stacks of a process from outside. With ``gil=True`` only the thread
holding the GIL is sampled, so the shares are of the GIL's time, the resource
the operator's threads contend for. ``--threads`` puts the thread at the root
of every stack, which gives the per-thread split.

    from profile_util import py_spy_record, summarise
    py_spy_record(["python", "x.py"], Path("x.txt"), gil=True)
    print(summarise(Path("x.txt")))

or ``.venv/bin/python bench/profile_util.py x.txt`` to summarise a recorded file.
"""

from __future__ import annotations

import collections
import re
import shutil
import subprocess
import sys
from pathlib import Path

#: The thread frame py-spy --threads puts at the root of a stack: 'thread (15150): cr-event-m0'.
_THREAD = re.compile(r"^thread \(\w+\)")


def py_spy() -> str | None:
    """The py-spy executable next to this interpreter, else on PATH, else None."""
    here = Path(sys.executable).with_name("py-spy")
    return str(here) if here.exists() else shutil.which("py-spy")


def py_spy_record(
    cmd: list[str] | None,
    out: Path,
    *,
    gil: bool = True,
    rate: int = 250,
    pid: int | None = None,
    duration_s: int | None = None,
    timeout_s: float = 600,
) -> str:
    """Record ``cmd`` (or attach to ``pid`` for ``duration_s``) to ``out`` as
    collapsed stacks; returns the command's stdout (empty when attaching)."""
    exe = py_spy()
    if exe is None:
        raise RuntimeError("py-spy is not installed (pip install py-spy)")
    args = [exe, "record", "--format", "raw", "--threads", "--rate", str(rate), "-o", str(out), "--nonblocking"]
    if gil:
        args.append("--gil")
    if pid is not None:
        args += ["--pid", str(pid)] + (["--duration", str(duration_s)] if duration_s else [])
    else:
        args += ["--subprocesses", "--", *(cmd or [])]
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0 and not out.exists():
        raise RuntimeError(f"py-spy failed: {done.stderr[-2000:]}")
    return done.stdout


def _frame_name(frame: str) -> str:
    # 'function (path/to/file.py:123)' -> 'function (file.py)'
    m = re.match(r"^(.*?) \((.*?)(?::\d+)?\)$", frame)
    if not m:
        return frame
    return f"{m[1]} ({Path(m[2]).name})"


def summarise(path: Path, top: int = 15) -> dict:
    """Self time by function, inclusive time by function, and samples per thread."""
    self_t: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        names = [f for f in frames if not f.startswith("process ") and not _THREAD.search(f)]
        thread = next((f for f in frames if _THREAD.search(f)), "?")
        threads[re.sub(r"^thread \(\w+\):? ?", "", thread) or thread] += n
        if names:
            self_t[_frame_name(names[-1])] += n
        for name in {_frame_name(f) for f in names}:
            incl[name] += n

    def share(c: collections.Counter[str]) -> list[tuple[str, float]]:
        return [(k, round(v / total, 3)) for k, v in c.most_common(top)]

    return {"samples": total, "self": share(self_t), "inclusive": share(incl), "threads": share(threads)}


def print_summary(title: str, s: dict) -> None:
    print(f"== {title}: {s['samples']} samples")
    for what in ("threads", "self", "inclusive"):
        print(f"  {what}:")
        for name, frac in s[what]:
            print(f"    {frac * 100:5.1f} %  {name}")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print_summary(p, summarise(Path(p)))
