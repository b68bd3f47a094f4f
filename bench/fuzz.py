"""Wire fuzz of the coordinator: frames sent, crashes, peak RSS, RSS growth per request byte.

    python bench/fuzz.py [--frames 100000] [--seed 0] [--minutes M] [--minimize] [--corpus-out DIR] [--json FILE]

Runs one campaign (tests/fuzz/campaign.py) against a real coordinator process
over ZeroMQ on loopback: structure-aware hostile frames for every message
type, a ping barrier after each batch, a restart and a replay check of every
acknowledged write after any crash. ``--minimize`` shrinks each distinct
crash to a reproducer on a fresh state dir; ``--corpus-out`` writes them as
JSON (the regression corpus replayed by tests/coordinator/protocol/wire/test_fuzz_wire.py).
Exit code 1 when the coordinator crashed or the model found a lost write.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the fuzz package (before bench/, which holds this fuzz.py)
sys.path.insert(1, str(ROOT))

from fuzz.campaign import Campaign, minimize


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--minutes", type=float, default=None, help="stop after this long even if fewer frames were sent")
    p.add_argument("--minimize", action="store_true", help="shrink each distinct crash to a reproducer")
    p.add_argument("--corpus-out", default=None, help="write each distinct crash's reproducer here as JSON")
    p.add_argument("--json", default=None, help="write the figures here as JSON")
    p.add_argument("--work-dir", default=None, help="state dir and coordinator log (default: a temp dir)")
    p.add_argument(
        "--coordinator-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra cr-coordinator argument (repeat), e.g. --coordinator-arg=--max-groups=4",
    )
    p.add_argument("--verify-every", type=int, default=25, help="batches between two read-backs of every write")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)

    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="crfuzz-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()

    def log(line: str) -> None:
        if not args.quiet:
            print(f"[{time.monotonic() - t0:7.1f}s] {line}", flush=True)

    campaign = Campaign(
        work,
        args.frames,
        seed=args.seed,
        time_budget_s=args.minutes * 60 if args.minutes else None,
        coordinator_args=args.coordinator_arg,
        verify_every=args.verify_every,
        log=log,
    )
    report = campaign.run()
    first = {}
    for crash in report.crashes:
        first.setdefault(crash.signature, crash)
    if args.minimize or args.corpus_out:
        for crash in first.values():
            log(f"minimizing {crash.signature} ({len(crash.frames)} frames)")
            minimize(crash, work)
    if args.corpus_out:
        out = Path(args.corpus_out)
        out.mkdir(parents=True, exist_ok=True)
        for i, crash in enumerate(first.values()):
            if crash.reproducer is not None:
                (out / f"crash-s{args.seed}-{i}.json").write_text(json.dumps(crash.to_json(), indent=1) + "\n")
    print(report.summary())
    figures = {
        "frames": report.frames,
        "member_answer_frames": report.member_frames,
        "bytes": report.bytes,
        "crashes": len(report.crashes),
        "crash_signatures": report.signatures(),
        "violations": len(report.violations),
        "findings": report.findings,
        "acked_writes_checked": report.acked_writes,
        "peak_rss_mib": round(report.peak_rss_kb / 1024, 1),
        "rss_start_mib": round(report.rss_start_kb / 1024, 1),
        "rss_end_mib": round(report.rss_end_kb / 1024, 1),
        "rss_growth_bytes_per_request_byte": round(report.growth_per_byte, 4),
        "seconds": round(report.duration_s, 1),
        "seed": args.seed,
        "work_dir": str(work),
    }
    print(json.dumps(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
    return 1 if report.crashes or report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
