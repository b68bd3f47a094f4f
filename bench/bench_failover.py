"""Failover of the coordinator on its Kafka log: kill -9 of the leader -> a standby serving, and
-> the region running again, with the members following by themselves.

Each trial, on a fresh log topic of ``$KAFKA_BOOTSTRAP_SERVERS`` or an embedded broker:

1. a leader (``cr-coordinator --state kafka --log-lease LEASE``) and a standby (``--standby``),
   each on its own endpoint and state directory;
2. two region members (the tests' scripted member: the runtime's real control channel, no Kafka
   consumer) given both endpoints, the leader's first; the region checkpoints every 0.1 s
   (``FAST_REGION``) until it has three checkpoints;
3. SIGKILL of the leader at t0; then, polled every 20 ms: the standby answers a ping
   (*serving*), and the region on the standby has a consistent checkpoint newer than the one it
   took over with (*running*: both members followed, joined, were reset and checkpointed).

Reported per trial and as p50 / max; the targets are serving <= 4 s p50 and <= 6 s max, running
<= lease + 1.5 s.

    .venv/bin/python bench/bench_failover.py [--trials 7] [--lease 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # tests/ for support.scripted_member

from coordinator.client import CoordinatorClient
from coordinator.launcher import CoordinatorProcess
from coordinator.protocol.common.waiting import wait_until
from coordinator.protocol.wire.errors import CoordinatorUnavailable
from cr_consumer.testing.broker import bootstrap_or_embedded

from support.scripted_member import member, region_status

#: Polling interval of the measured conditions: the figures' resolution.
POLL_S = 0.02
#: Bound of each wait: far above any failover the targets allow.
WAIT_S = 60.0


def _checkpoints(endpoint: str, region: str) -> int | None:
    try:
        return region_status(endpoint, region).region.last_consistent or 0
    except CoordinatorUnavailable:
        return None


def _serves(endpoint: str) -> bool:
    try:
        with CoordinatorClient(endpoint, timeout=0.2, try_timeout=0.2) as client:
            client.ping()
    except CoordinatorUnavailable:
        return False
    return True


def trial(bootstrap: str, lease_s: float, work: Path) -> dict[str, float]:
    topic = f"bench-failover-{uuid.uuid4().hex[:10]}"
    args = ["--state", "kafka", "--kafka-bootstrap", bootstrap, "--log-topic", topic, "--log-lease", f"{lease_s:g}s"]
    region = f"bench-region-{uuid.uuid4().hex[:8]}"
    leader = CoordinatorProcess(work / "leader", extra_args=args).start()
    standby = CoordinatorProcess(work / "standby", extra_args=[*args, "--standby"]).start(serve=False)
    assert leader.endpoint is not None
    assert standby.endpoint is not None
    members = [member(f"{leader.endpoint},{standby.endpoint}", region, f"m{i}", partition=i) for i in range(2)]
    try:
        for m in members:
            m.start()
        wait_until(lambda: (_checkpoints(leader.endpoint or "", region) or 0) >= 3, WAIT_S, "3 checkpoints")
        leader.kill()
        t0 = time.monotonic()
        wait_until(lambda: _serves(standby.endpoint or ""), WAIT_S, "the standby to serve", interval=POLL_S)
        serving = time.monotonic() - t0
        taken_over = _checkpoints(standby.endpoint, region) or 0
        wait_until(
            lambda: (_checkpoints(standby.endpoint or "", region) or 0) > taken_over,
            WAIT_S,
            "a checkpoint on the new leader",
            interval=POLL_S,
        )
        running = time.monotonic() - t0
    finally:
        for m in members:
            m.stop()
        leader.kill()
        standby.kill()
    return {"serving_s": round(serving, 3), "running_s": round(running, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--lease", type=float, default=2.0, help="the log lease, seconds")
    args = parser.parse_args()
    results = []
    with bootstrap_or_embedded() as (bootstrap, _pid), tempfile.TemporaryDirectory() as tmp:
        for i in range(args.trials):
            results.append(trial(bootstrap, args.lease, Path(tmp) / f"t{i}"))
            print(json.dumps(results[-1]), flush=True)
    summary = {
        "lease_s": args.lease,
        "trials": args.trials,
        **{
            f"{key}_{stat}": round(fn([r[key] for r in results]), 3)
            for key in ("serving_s", "running_s")
            for stat, fn in (("p50", statistics.median), ("max", max))
        },
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
