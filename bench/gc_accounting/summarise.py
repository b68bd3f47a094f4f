"""Summarise the GC accounting of a benchmark run (see sitecustomize.py): per kind
of process (a pipeline member by the tree it ran from, a bare loop), the
collections and the thread CPU spent in them after the process's gc.freeze()
(from its first line with frozen objects to its last line).

    .venv/bin/python bench/gc_accounting/summarise.py DIR
"""

from __future__ import annotations

import collections
import json
import statistics
import sys
from pathlib import Path


def main(directory: str) -> None:
    groups: dict[str, list[tuple[float, list[int]]]] = collections.defaultdict(list)
    for path in Path(directory).glob("gc-*.jsonl"):
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if not lines:
            continue
        last = lines[-1]
        argv = " ".join(last["argv"])
        if "sink=" in argv:
            kind = f"member ({Path(last['tree'] or '?').parent.parent})"
        elif "bench-bare" in argv:
            kind = "bare loop"
        else:
            continue
        first = next((line for line in lines if line["frozen"] > 0), lines[0])
        cpu = sum(last["totals"][g][1] - first["totals"][g][1] for g in "012")
        counts = [last["totals"][g][0] - first["totals"][g][0] for g in "012"]
        groups[kind].append((cpu * 1000, counts))
    for kind, rows in sorted(groups.items()):
        counts = [round(statistics.median(r[1][g] for r in rows)) for g in range(3)]
        print(
            f"{kind}: {len(rows)} processes, GC CPU after the freeze median "
            f"{statistics.median(r[0] for r in rows):.1f} ms, collections gen 0/1/2 median {counts}"
        )


if __name__ == "__main__":
    main(sys.argv[1])
