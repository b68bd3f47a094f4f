"""The warm standby's hand-over, against a cold start in the same run.

Each trial starts a real standby (``python -m cr_consumer.cli.standby``, the
runner's ``MemberLauncher.spawn_standby``) and times:

* ``ready_s``: from its spawn to its ``ready`` status line: the Python start-up
  and a member's imports, i.e. what a cold restart spends before its member
  code runs (the baseline);
* ``answer_ms``: from writing the hand-over to its ``took`` answer
  (``StandbyProc.hand_over``), once it has idled ``--idle`` seconds: what the
  runner's supervisor waits for, bounded by ``launch.HANDOFF_TIMEOUT_S``.

Printed per trial with the load average, then the medians and the ratio
answer / ready. No broker, no coordinator: the member handed over fails to
connect and is killed.

    .venv/bin/python bench/bench_standby_handover.py --trials 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coordinator.protocol.common.waiting import wait_until
from cr_consumer.runtime.runner.launch import HANDOFF_TIMEOUT_S, STANDBY_MODULE, MemberLauncher, member_argv
from cr_consumer.runtime.runner.member_proc import MemberProc
from cr_consumer.runtime.runner.standby_proc import StandbyState

PIPELINE = """
from cr_consumer.runtime import KafkaSource, Pipeline

def build(ctx):
    return Pipeline(KafkaSource(topics=["t"])).sink(ctx.file_sink())
"""
REGION = {
    "mode": "periodic",
    "period_s": 1.0,
    "drain_timeout_s": 30.0,
    "reset_timeout_s": 30.0,
    "max_consecutive_resets": 5,
    "member_timeout_s": 5.0,
}


def trial(work: Path, idle_s: float) -> tuple[float, float]:
    pipeline = work / "pipe.py"
    pipeline.write_text(PIPELINE)

    def argv(name: str, min_members: int) -> list[str]:
        return member_argv(
            sys.executable,
            str(pipeline),
            name=name,
            coordinator="tcp://127.0.0.1:1",
            bootstrap="127.0.0.1:1",
            group="g",
            output_dir=str(work / "out"),
            state_dir=str(work / "state"),
            region_index=0,
            min_members=min_members,
            region=REGION,
            params={},
            kafka_stdin=False,
        )

    launcher = MemberLauncher(argv, work, standby_argv=[sys.executable, "-m", STANDBY_MODULE, str(pipeline)])
    with open(work / "standby.log", "ab") as log_file:
        t0 = time.monotonic()
        standby = launcher.spawn_standby(log_file)

    def ready() -> bool:
        standby.poll()
        return standby.state is StandbyState.READY

    try:
        wait_until(ready, 120.0, "the standby's ready", interval=0.002)
        ready_s = time.monotonic() - t0
        time.sleep(idle_s)
        t1 = time.monotonic()
        launcher.hand_over(MemberProc("member-0"), standby)
        answer_ms = (time.monotonic() - t1) * 1000
    finally:
        if standby.proc.poll() is None:
            standby.proc.kill()
        standby.proc.wait(10)
        standby.close()
    return ready_s, answer_ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=7)
    ap.add_argument("--idle", type=float, default=0.5, help="seconds the standby waits before its hand-over")
    args = ap.parse_args()
    readies, answers = [], []
    for i in range(args.trials):
        with tempfile.TemporaryDirectory(prefix="standby-bench-") as d:
            ready_s, answer_ms = trial(Path(d), args.idle)
        readies.append(ready_s)
        answers.append(answer_ms)
        print(
            f"trial {i}: ready {ready_s:.3f} s, answer {answer_ms:.1f} ms (load {os.getloadavg()[0]:.2f})", flush=True
        )
    ready_med, answer_med = statistics.median(readies), statistics.median(answers)
    print(
        f"median ready {ready_med:.3f} s (cold start-up and imports), median answer {answer_med:.1f} ms "
        f"(max {max(answers):.1f} ms; bound {HANDOFF_TIMEOUT_S:.1f} s); answer / ready = "
        f"{answer_med / 1000 / ready_med:.4f}"
    )


if __name__ == "__main__":
    main()
