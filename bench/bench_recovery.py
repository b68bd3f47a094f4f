"""Recovery time of a consistent region after kill -9.

Two faults, several trials each, every trial a full drill (real coordinator and
member processes, embedded broker unless $KAFKA_BOOTSTRAP_SERVERS) whose
output is verified exactly-once:

* kill-member: SIGKILL of one member process. Reported: kill -> the
  controller's first RESUME, kill -> the RESUME after the last reset it
  caused (the restarted member is back and the Kafka group's rebalance has
  been reset for), that last value minus the broker's session timeout (the
  recovery beyond waiting for the dead consumer to expire; since the restarted
  member removes its predecessor's consumer from the group, the recovery no
  longer waits for the session timeout, so this is negative), and kill -> the first consistent checkpoint
  after that RESUME (the group has finished its join and drains succeed).
* kill-coordinator: SIGKILL of the coordinator, restarted at once on the same
  endpoint and state. Reported: kill -> the controller's RESUME after the
  reset to the last consistent checkpoint (includes the coordinator's restart).

Times come from the controller's own event clock (region_status events), the
fault from the drill's clock, same host. Input keeps flowing (rate-limited
production) across the whole recovery. Goal: < 1 s each.

    .venv/bin/python bench/bench_recovery.py [--trials 5] [--members 2] [--partitions 4]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cr_consumer.drill.scenarios import DrillConfig, run_drill
from cr_consumer.testing.broker import bootstrap_or_embedded


def _stats(xs: list[float]) -> dict:
    xs = [x for x in xs if x is not None]
    if not xs:
        return {"n": 0}
    return {"n": len(xs), "p50": round(statistics.median(xs), 3), "max": round(max(xs), 3), "min": round(min(xs), 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--members", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--messages", type=int, default=12_000)
    ap.add_argument("--rate", type=float, default=1_000.0)
    ap.add_argument("--session-timeout-ms", type=int, default=6000)
    ap.add_argument("--seed", type=int, default=500)
    ap.add_argument("--out", default=None)
    ap.add_argument(
        "--keep", action="store_true", help="keep every drill's directory (logs, timeline), not only failed ones"
    )
    ap.add_argument(
        "--scenarios",
        default="kill-member,kill-coordinator",
        help="comma-separated subset of kill-member,kill-coordinator",
    )
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    out = Path(args.out or tempfile.mkdtemp(prefix="bench-recovery-"))
    session_s = args.session_timeout_ms / 1000
    rows: dict[str, list[dict]] = {"kill-member": [], "kill-coordinator": []}
    chosen = [x.strip() for x in args.scenarios.split(",") if x.strip()]
    unknown = set(chosen) - set(rows)
    if unknown:
        ap.error(f"--scenarios: unknown {sorted(unknown)}; choose from {sorted(rows)}")
    with bootstrap_or_embedded() as (bootstrap, _pid):
        for i in range(args.trials):
            for scenario in chosen:
                cfg = DrillConfig(
                    scenario=scenario,
                    members=args.members,
                    partitions=args.partitions,
                    messages=args.messages,
                    rate=args.rate,
                    bootstrap=bootstrap,
                    out=out,
                    seed=args.seed + i,
                    fault_at=0.25,
                    session_timeout_ms=args.session_timeout_ms,
                    timeout_s=120.0,
                    keep_output=args.keep,
                )
                r = run_drill(cfg, progress=lambda m: None)
                row = {
                    k: r[k]
                    for k in (
                        "seed",
                        "ok",
                        "missing",
                        "duplicates",
                        "resets",
                        "time_to_detect_s",
                        "time_to_first_resume_s",
                        "time_to_resume_s",
                        "time_to_recover_s",
                        "times_from",
                        "error",
                    )
                }
                row["dir"] = r.get("out_dir")
                rows[scenario].append(row)
                print(json.dumps({"scenario": scenario, **row}), flush=True)
    km, kc = rows["kill-member"], rows["kill-coordinator"]
    summary = {
        "trials": args.trials,
        "session_timeout_s": session_s,
        "kill_member_to_first_resume_s": _stats([r["time_to_first_resume_s"] for r in km]),
        "kill_member_to_last_resume_s": _stats([r["time_to_resume_s"] for r in km]),
        "kill_member_to_last_resume_minus_session_s": _stats(
            [r["time_to_resume_s"] - session_s for r in km if r["time_to_resume_s"] is not None]
        ),
        "kill_member_to_checkpoint_s": _stats([r["time_to_recover_s"] for r in km]),
        "kill_member_resets": _stats([r["resets"] for r in km]),
        "kill_coordinator_to_resume_s": _stats([r["time_to_resume_s"] for r in kc]),
        "kill_coordinator_to_checkpoint_s": _stats([r["time_to_recover_s"] for r in kc]),
        "kill_coordinator_to_first_resume_s": _stats([r["time_to_first_resume_s"] for r in kc]),
        "drills_ok": sum(r["ok"] for r in km + kc),
        "drills": len(km) + len(kc),
    }
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
