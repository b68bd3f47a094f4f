"""Soak: N randomly seeded drills in a row (zero missing, zero duplicated).

Each drill picks its scenario and seed from a master RNG (``--seed``), runs at
small scale against one broker (embedded unless $KAFKA_BOOTSTRAP_SERVERS) and
is verified independently. The draw includes every scenario of
``crkafka drill``, the untimely faults too (pauses of ``--pause`` seconds, the
member runtime's fault points); pause-broker runs against a broker of its own
(the drill starts it, so pausing it leaves the shared one alone) and is left
out of the draw against an external cluster. One JSON line per drill goes to stdout and to
``OUT/soak.jsonl``; the summary (per scenario: runs, passed, missing,
duplicates, errors) at the end. Exit code 0 only if every drill passed.

    .venv/bin/python bench/soak.py [--count 100] [--seed 1] [--scenarios all|basic|untimely|kill-member,...]
                                   [--pause 10] [--kafka-client kafka-python|librdkafka]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cr_consumer.drill.faults import PAUSE_S
from cr_consumer.drill.scenarios import (
    BASIC_SCENARIOS,
    EMBEDDED_BROKER_ONLY,
    SCENARIOS,
    UNTIMELY_SCENARIOS,
    DrillConfig,
    run_drill,
)
from cr_consumer.testing.broker import ENV_BOOTSTRAP, bootstrap_or_embedded

#: Names for sets of scenarios in --scenarios.
SETS = {"all": SCENARIOS, "basic": BASIC_SCENARIOS, "untimely": UNTIMELY_SCENARIOS}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--scenarios",
        default="all",
        help="comma-separated scenarios to draw from, or a set: all (default), basic, untimely",
    )
    ap.add_argument("--members", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--messages", type=int, default=4000)
    ap.add_argument("--rate", type=float, default=1500.0)
    ap.add_argument("--timeout", type=float, default=60.0, help="bound on one drill (s)")
    ap.add_argument(
        "--pause", type=float, default=PAUSE_S, help=f"length of the pause scenarios' SIGSTOP (s, default {PAUSE_S:g})"
    )
    ap.add_argument(
        "--kafka-client",
        choices=("kafka-python", "librdkafka"),
        default=None,
        help="the members' Kafka client (default kafka-python)",
    )
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    names = [n for s in args.scenarios.split(",") if s.strip() for n in SETS.get(s.strip(), (s.strip(),))]
    unknown = [s for s in names if s not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenarios {unknown}; known: {', '.join(SCENARIOS)}")
    external = os.environ.get(ENV_BOOTSTRAP)
    if external and any(s in EMBEDDED_BROKER_ONLY for s in names):
        print(
            f"soak: leaving {', '.join(EMBEDDED_BROKER_ONLY)} out of the draw (needs the embedded broker; "
            f"the drills run against {external})",
            file=sys.stderr,
        )
        names = [s for s in names if s not in EMBEDDED_BROKER_ONLY]
        if not names:
            ap.error("no scenario left to draw")
    logging.basicConfig(level=logging.WARNING)
    out = Path(args.out or tempfile.mkdtemp(prefix="soak-"))
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    per = defaultdict(lambda: defaultdict(int))
    t0 = time.time()
    with bootstrap_or_embedded() as (bootstrap, _pid), open(out / "soak.jsonl", "a") as log_file:
        for i in range(args.count):
            scenario = rng.choice(names)
            seed = rng.randrange(1, 2**31)
            own_broker = scenario in EMBEDDED_BROKER_ONLY  # the drill pauses a broker of its own
            cfg = DrillConfig(
                scenario=scenario,
                members=args.members,
                partitions=args.partitions,
                messages=args.messages,
                rate=args.rate,
                bootstrap=None if own_broker else bootstrap,
                out=out,
                seed=seed,
                timeout_s=args.timeout,
                keep_output=False,
                pause_s=args.pause,
                kafka_client=args.kafka_client,
            )
            r = run_drill(cfg, progress=lambda m: None)
            row = {
                "i": i,
                **{
                    k: r[k]
                    for k in (
                        "scenario",
                        "seed",
                        "ok",
                        "produced",
                        "delivered",
                        "missing",
                        "duplicates",
                        "resets",
                        "time_to_resume_s",
                        "elapsed_s",
                        "error",
                        "fault_fired",
                    )
                },
            }
            fault = (r["faults"] or [{}])[0]
            if "point" in fault:  # a fault point: which step, which action
                row["point"] = f"{fault['point']}/{fault.get('action', 'crash')}"
            print(json.dumps(row), flush=True)
            log_file.write(json.dumps(row) + "\n")
            log_file.flush()
            p = per[scenario]
            p["runs"] += 1
            p["passed"] += int(r["ok"])
            p["missing"] += r["missing"]
            p["duplicates"] += r["duplicates"]
            p["errors"] += int(r["error"] is not None)
    summary = {
        "drills": args.count,
        "passed": sum(p["passed"] for p in per.values()),
        "missing": sum(p["missing"] for p in per.values()),
        "duplicates": sum(p["duplicates"] for p in per.values()),
        "elapsed_s": round(time.time() - t0, 1),
        "out": str(out),
        "per_scenario": {k: dict(v) for k, v in sorted(per.items())},
    }
    print(json.dumps(summary, indent=2))
    return 0 if summary["passed"] == args.count else 1


if __name__ == "__main__":
    sys.exit(main())
