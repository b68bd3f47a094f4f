"""Where the publish gap after a membership change goes, from finished drill
directories (``bench/bench_rebalance_gap.py`` or ``crkafka drill``): reads the
timelines and the published files, computes nothing new in the drills.

Per drill (the fault's own row), seconds relative to the fault:

* ``last_publish``: the last published file before the fault (its mtime: the
  sink writes an interval's file at the drain that seals it);
* ``join``, ``reset``, ``resume``: the controller's first join, reset and
  reset RESUME after the fault (a restarted or added member's join resets the
  region);
* ``drain``: the first drain after that RESUME (the post-reset pacing:
  ``coordinator/region/timing.py``, POST_RESET_PERIOD_SHARE);
* ``first_publish``: the first published file after the fault, and ``gap``
  from ``last_publish`` to it.

Per reset RESUME with cooperative members (every trial, every reset):
``first_batch_s``, how long after the controller's RESUME each member
processed its first records (the drill probe's ``resume`` event), and the
earliest of them: a post-reset checkpoint sooner than that would publish nothing.

    .venv/bin/python bench/gap_timeline.py DRILL_DIR...
    .venv/bin/python bench/gap_timeline.py --json DRILL_DIR...
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from cr_consumer.drill.delivered import published_files


def _events(drill_dir: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted((drill_dir / "timeline").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                out.append(json.loads(line))
    out.sort(key=lambda e: e["t"])
    return out


def _publish_times(drill_dir: Path) -> list[float]:
    return sorted(p.stat().st_mtime for p in published_files(drill_dir / "output") if p.stat().st_size > 0)


def _first(events: list[dict[str, Any]], after: float | None, kind: str, phase: str | None = None) -> float | None:
    if after is None:
        return None
    for e in events:
        if e["t"] > after and e["ev"] == kind and (phase is None or e.get("ctl", {}).get("phase") == phase):
            return float(e["t"])
    return None


def decompose(drill_dir: Path) -> dict[str, Any]:
    """The fault's row (see the module docstring)."""
    events = _events(drill_dir)
    t_fault = next(e["t"] for e in events if e["ev"] == "fault")
    publishes = _publish_times(drill_dir)
    before = max((t for t in publishes if t <= t_fault), default=None)
    after = min((t for t in publishes if t > t_fault), default=None)
    join = _first(events, t_fault, "ctl_join")
    reset = _first(events, t_fault, "ctl_reset")
    resume = _first(events, reset, "ctl_resume")
    drain = _first(events, resume, "ctl_phase", "DRAINING")

    def rel(t: float | None) -> float | None:
        return None if t is None else round(t - t_fault, 3)

    return {
        "drill": drill_dir.name,
        "last_publish": rel(before),
        "join": rel(join),
        "reset": rel(reset),
        "resume": rel(resume),
        "drain": rel(drain),
        "first_publish": rel(after),
        "gap": None if before is None or after is None else round(after - before, 3),
    }


#: A member's first records count only this long after a RESUME: later, it had
#: nothing to process (no partition yet, or the input had ended).
FIRST_BATCH_WINDOW_S = 1.0


def first_batches(drill_dir: Path) -> list[dict[str, Any]]:
    """Every reset RESUME after the start: each member's delay to its first records
    (within FIRST_BATCH_WINDOW_S; a RESUME after which nobody processed within it is left out)."""
    events = _events(drill_dir)
    members = sorted({e["member"] for e in events if e["member"].startswith("member")})
    out = []
    resumes = [e["t"] for e in events if e["ev"] == "ctl_resume"]
    for i, t in enumerate(resumes):
        if i == 0:
            continue  # the start: nothing to catch up
        until = min(resumes[i + 1] if i + 1 < len(resumes) else float("inf"), t + FIRST_BATCH_WINDOW_S)
        delays = {}
        for m in members:
            first = next(
                (e["t"] for e in events if e["member"] == m and e["ev"] == "resume" and t - 0.05 <= e["t"] < until),
                None,
            )
            if first is not None:
                delays[m] = round(max(0.0, first - t), 3)
        if delays:
            out.append(
                {
                    "drill": drill_dir.name,
                    "resume": round(t - events[0]["t"], 1),
                    "first_batch_s": delays,
                    "earliest_s": min(delays.values()),
                }
            )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("drills", nargs="+", type=Path)
    ap.add_argument("--json", action="store_true", help="print the rows as JSON lines")
    args = ap.parse_args()
    earliest = []
    for d in args.drills:
        try:
            row = decompose(d)
        except (StopIteration, FileNotFoundError, ValueError) as exc:
            print(f"{d.name}: incomplete drill directory ({type(exc).__name__})", file=sys.stderr)
            continue
        batches = first_batches(d)
        earliest += [b["earliest_s"] for b in batches]
        if args.json:
            print(json.dumps({**row, "resumes": batches}))
        else:
            print("  ".join(f"{k} {v}" for k, v in row.items()))
    if earliest and not args.json:
        earliest.sort()
        print(
            f"{len(earliest)} reset RESUMEs: earliest member's first records after "
            f"median {statistics.median(earliest):.3f} s, p90 {earliest[int(0.9 * (len(earliest) - 1))]:.3f} s, "
            f"max {earliest[-1]:.3f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
