"""Longest time without newly published output around a membership change.

Runs the drills (``cr_consumer.drill``: the runner of ``crkafka run``, real
member processes, an embedded broker, a coordinator process) with a steady
input and a 1 s checkpoint period, and injects one fault per trial:

* ``kill-member``: kill -9 of one member of three (the runner restarts it);
* ``add-member``: a fourth member joins;
* ``remove-member``: one member of three stops cleanly (SIGTERM).

The Kafka session timeout is the operator's default (``DEFAULT_SESSION_TIMEOUT_MS``,
20 s, what ``crkafka run`` uses when not told otherwise), not the drills' 6 s.
The assignment strategy is the region runtime's default, cooperative-sticky;
``--eager`` measures the eager baseline (range, roundrobin).

Figures per trial, read from the drill directory afterwards:

* ``publish_gap_s``: the longest interval between two consecutive publishes
  of output (the mtimes of the published files, any member), from the last
  publish before the fault to the last publish of the run. The input is
  produced at a steady ``--rate`` until it runs out and the drill stops once
  every record is published, so every interval in that window had input
  waiting. ``publish_interval_before_s``: the median interval between
  checkpoints' first publishes in the 10 s before the fault (about the
  checkpoint period).
* ``processing_gap_s``: the longest interval after the fault in which no
  member processed a record (the members' ``batch`` timeline events, sampled
  every 0.25 s per member; from the last sample before the fault).
* ``survivor_gap_s``: for the members that neither failed nor joined, the
  longest interval between two of their own publishes in the same window
  (what a change confined to the partitions that moved would keep short).
* ``restart_s``: from the fault to the pipeline of the killed (or added)
  member's new process being built (its ``start`` timeline event); the
  runner's warm standby (the default) against cold restarts with
  ``--no-standby``, or both alternated in one run with ``--compare-standby``.
  ``join_s``: from the fault to the controller's ``ctl_join`` of that process.
* ``ok``: the drill's exactly-once verification (no record missing, none
  twice) and its own ``time_to_recover_s``.

Goals (issue): kill <= 2 s, add and remove <= 1.5 s, over >= 10 trials each.

    .venv/bin/python bench/bench_rebalance_gap.py --trials 3                  # ~12 min on 2 cores
    .venv/bin/python bench/bench_rebalance_gap.py --scenarios kill-member --trials 10 --json gaps.json
    .venv/bin/python bench/bench_rebalance_gap.py --trials 3 --eager   # the eager baseline
    .venv/bin/python bench/bench_rebalance_gap.py --scenarios kill-member --trials 5 --compare-standby
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from cr_consumer.drill.delivered import published_files
from cr_consumer.drill.scenarios import DrillConfig, run_drill
from cr_consumer.operator.config import DEFAULT_SESSION_TIMEOUT_MS

SCENARIOS = ("kill-member", "add-member", "remove-member")
#: Window before the fault whose publish intervals give the steady-state figure.
BEFORE_WINDOW_S = 10.0
#: publish_gap_while_input_s ends this long before the input does (the rate is
#: not exact, and the last records of a partition are published up to a period later).
INPUT_MARGIN_S = 5.0


def _events(timeline_dir: Path) -> list[dict]:
    out = []
    for path in sorted(timeline_dir.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                out.append(json.loads(line))
    out.sort(key=lambda e: e["t"])
    return out


#: Published file names of the drill pipeline's sink: <member>-<checkpoint seq>.jsonl
_PUBLISHED_NAME = re.compile(r"^(?P<member>.+)-(?P<seq>\d+)\.")


def _publishes(output_dir: Path) -> list[tuple[float, str, int]]:
    """(mtime, member, checkpoint seq) of every non-empty published file."""
    out = []
    for p in published_files(output_dir):
        st = p.stat()
        m = _PUBLISHED_NAME.match(p.name)
        if st.st_size > 0 and m:
            out.append((st.st_mtime, m["member"], int(m["seq"])))
    return out


def _longest_gap(times: list[float], start: float) -> float | None:
    """Longest interval between consecutive times, counting from the last time <= start."""
    times = sorted(times)
    before = [t for t in times if t <= start]
    window = ([before[-1]] if before else []) + [t for t in times if t > start]
    if len(window) < 2:
        return None
    return max(b - a for a, b in itertools.pairwise(window))


def analyse(drill_dir: Path, input_after_fault_s: float | None = None) -> dict:
    """The gap figures of one finished drill (see the module docstring).
    ``input_after_fault_s``: how long the input lasted after the fault; the
    longest publish gap up to INPUT_MARGIN_S before its end is also given
    (``publish_gap_while_input_s``): after it, records wait only on partitions
    still moving, and the gap measures the input's end, not the fault."""
    events = _events(drill_dir / "timeline")
    fault = next(e for e in events if e["ev"] == "fault")
    t_fault = fault["t"]
    changed = fault.get("member")
    members = {e["member"] for e in events if e["member"] != "drill"}
    publishes = _publishes(drill_dir / "output")
    times = sorted(t for t, _, _ in publishes)
    first_of_seq: dict[int, float] = {}
    for t, _, seq in publishes:
        first_of_seq[seq] = min(t, first_of_seq.get(seq, t))
    before = sorted(t for t in first_of_seq.values() if t_fault - BEFORE_WINDOW_S <= t <= t_fault)
    intervals_before = [b - a for a, b in itertools.pairwise(before)]
    batches = [e["t"] for e in events if e["ev"] == "batch" and e.get("n", 0) > 0]
    survivors = {
        m
        for m in members
        if m != changed and any(e["t"] < t_fault for e in events if e["member"] == m and e["ev"] == "batch")
    }
    survivor_gaps = {}
    for m in sorted(survivors):
        own = [t for t, who, _ in publishes if who == m]
        gap = _longest_gap(own, t_fault)
        if gap is not None:
            survivor_gaps[m] = round(gap, 3)
    gap = _longest_gap(times, t_fault)
    restart = next(
        (e["t"] - t_fault for e in events if e["ev"] == "start" and e["member"] == changed and e["t"] > t_fault), None
    )
    join = next(
        (
            e["t"] - t_fault
            for e in events
            if e["ev"] == "ctl_join" and e["t"] > t_fault and (e.get("ctl") or {}).get("member") == changed
        ),
        None,
    )
    while_input = None
    if input_after_fault_s is not None:
        end = t_fault + input_after_fault_s - INPUT_MARGIN_S
        while_input = _longest_gap([t for t in times if t <= end], t_fault)
    return {
        "publish_gap_while_input_s": round(while_input, 3) if while_input is not None else None,
        "publish_gap_s": round(gap, 3) if gap is not None else None,
        "publish_interval_before_s": round(statistics.median(intervals_before), 3) if intervals_before else None,
        "processing_gap_s": round(_longest_gap(batches, t_fault) or 0.0, 3),
        "survivor_gap_s": max(survivor_gaps.values()) if survivor_gaps else None,
        "survivor_gaps_s": survivor_gaps,
        "restart_s": round(restart, 3) if restart is not None else None,
        "join_s": round(join, 3) if join is not None else None,
        "published_files": len(times),
        "changed_member": changed,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--rate", type=float, default=3000.0, help="steady production rate, records/s")
    ap.add_argument("--seconds", type=float, default=40.0, help="input length at --rate")
    ap.add_argument("--fault-at", type=float, default=0.4, help="fraction of the input processed at the fault")
    ap.add_argument("--period", type=float, default=1.0, help="checkpoint period, s")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--session-timeout-ms", type=int, default=DEFAULT_SESSION_TIMEOUT_MS)
    ap.add_argument(
        "--eager",
        action="store_true",
        help="members rebalance eagerly (range,roundrobin; default: the runtime's cooperative-sticky)",
    )
    standby_mode = ap.add_mutually_exclusive_group()
    standby_mode.add_argument(
        "--no-standby",
        action="store_true",
        help="the runner keeps no warm standby: every restart and added member starts cold",
    )
    standby_mode.add_argument(
        "--compare-standby",
        action="store_true",
        help="run every trial twice, with the standby and cold (order alternating)",
    )
    ap.add_argument("--bootstrap", default=None, help="a Kafka cluster (default: an embedded broker per drill)")
    ap.add_argument("--out", default=None, help="drill directories here (default: a temporary directory)")
    ap.add_argument("--json", default=None, help="write the figures here")
    ap.add_argument(
        "--analyse",
        nargs="*",
        default=None,
        metavar="DRILL_DIR",
        help="only print the figures of finished drill directories (with --seconds/--fault-at of their run)",
    )
    args = ap.parse_args()
    if args.analyse is not None:
        for d in args.analyse:
            print(Path(d).name, json.dumps(analyse(Path(d), args.seconds * (1 - args.fault_at))))
        return 0
    scenarios = [s for s in args.scenarios.split(",") if s]
    for s in scenarios:
        if s not in SCENARIOS:
            raise SystemExit(f"unknown scenario {s!r}; known: {', '.join(SCENARIOS)}")
    messages = int(args.rate * args.seconds)
    out_dir = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench-rebalance-gap-"))
    modes = [True, False] if args.compare_standby else [not args.no_standby]
    label = {True: "", False: "/cold"} if args.compare_standby else {True: "", False: ""}
    results: dict[str, list[dict]] = {s + label[m]: [] for s in scenarios for m in modes}
    for trial in range(args.trials):
        for scenario in scenarios:  # alternated: load drifting over the run hits every scenario alike
            for standby in modes if trial % 2 == 0 else modes[::-1]:
                run_dir = out_dir / ("standby" if standby else "cold") if args.compare_standby else out_dir
                cfg = DrillConfig(
                    scenario=scenario,
                    members=3,
                    partitions=args.partitions,
                    messages=messages,
                    bootstrap=args.bootstrap,
                    out=run_dir,
                    seed=trial + 1,
                    rate=args.rate,
                    period_s=args.period,
                    session_timeout_ms=args.session_timeout_ms,
                    timeout_s=120.0 + args.seconds * 2,
                    fault_at=args.fault_at,
                    cooperative=not args.eager,
                    standby=standby,
                )
                t0 = time.monotonic()
                load = os.getloadavg()[0]
                report = run_drill(cfg, progress=lambda _msg: None)
                r = analyse(run_dir / f"{scenario}-s{trial + 1}", args.seconds * (1 - args.fault_at))
                r.update(
                    ok=report["ok"],
                    error=report.get("error"),
                    missing=report["missing"],
                    duplicates=report["duplicates"],
                    time_to_recover_s=report["time_to_recover_s"],
                    wall_s=round(time.monotonic() - t0, 1),
                    standby=standby,
                    load_before=round(load, 2),
                    load_after=round(os.getloadavg()[0], 2),
                )
                results[scenario + label[standby]].append(r)
                print(
                    f"{scenario + label[standby]:19s} trial {trial}: publish gap {r['publish_gap_s']} s (while "
                    f"input: {r['publish_gap_while_input_s']} s; before: every "
                    f"{r['publish_interval_before_s']} s), restart {r['restart_s']} s, join {r['join_s']} s, "
                    f"processing gap {r['processing_gap_s']} s, survivors' longest gap {r['survivor_gap_s']} s, "
                    f"exactly once {r['ok']}, recover {r['time_to_recover_s']} s, load {r['load_before']}"
                    f"-{r['load_after']}",
                    flush=True,
                )
    summary = {}
    for scenario, rs in results.items():
        gaps = [r["publish_gap_s"] for r in rs if r["publish_gap_s"] is not None]
        summary[scenario] = {
            "trials": len(rs),
            "all_exactly_once": all(r["ok"] for r in rs),
            "publish_gap_s": {
                "median": statistics.median(gaps) if gaps else None,
                "max": max(gaps, default=None),
                "all": gaps,
            },
            "processing_gap_s_median": statistics.median(r["processing_gap_s"] for r in rs) if rs else None,
            "survivor_gap_s_median": statistics.median(
                [r["survivor_gap_s"] for r in rs if r["survivor_gap_s"] is not None] or [0.0]
            ),
            "restart_s": sorted(r["restart_s"] for r in rs if r["restart_s"] is not None),
            "gap_while_input_s": sorted(
                r["publish_gap_while_input_s"] for r in rs if r["publish_gap_while_input_s"] is not None
            ),
            "publish_interval_before_s_median": statistics.median(
                [r["publish_interval_before_s"] for r in rs if r["publish_interval_before_s"]] or [0.0]
            ),
        }
    doc = {
        "settings": {
            "cooperative": not args.eager,
            "standby": modes,
            "rate": args.rate,
            "seconds": args.seconds,
            "period_s": args.period,
            "partitions": args.partitions,
            "session_timeout_ms": args.session_timeout_ms,
            "members": 3,
            "drills": str(out_dir),
        },
        "summary": summary,
        "trials": results,
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
