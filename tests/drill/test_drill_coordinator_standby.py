"""The coordinator drills with a standby coordinator (``DrillConfig.coordinator_standby``):
the coordinator keeps its log on the session's broker (``--state kafka``, a 2 s lease) with
one standby, the members and the drill's clients get both endpoints. Real coordinator
processes, real member processes, the session's broker; the output verified independently.

- kill-coordinator: kill -9 of the leader (not restarted); the standby takes over with a
  higher epoch and the region checkpoints on through it;
- pause-coordinator: SIGSTOP of the leader past the lease; the standby takes over with a
  higher epoch; the leader, continued, is fenced at its next write and exits 1; the region
  checkpoints on through the new leader.

Each asserts every record exactly once and committed offsets not behind (``assert_exactly_once``).
Small scale, the input flowing for about 8 s, the fault after a quarter of it, so the
takeover happens while records flow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cr_consumer.drill.config import DrillConfig
from cr_consumer.drill.scenarios import run_drill

from support.drill import SMALL, assert_exactly_once

SEEDS = {"kill-coordinator": 401, "pause-coordinator": 402}
#: 12,000 records at 1,500/s: the fault at 25 % lands about 2 s in, the takeover (the 2 s
#: lease, the fence, the replay) well before the input ends. A 4 s pause outlasts the lease.
CONFIG = dict(SMALL, messages=12_000, fault_at=0.25, pause_s=4.0, timeout_s=90.0)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["kill-coordinator", "pause-coordinator"])
def test_standby_coordinator_drill_exactly_once(scenario, bootstrap, tmp_path):
    report = run_drill(
        DrillConfig(
            scenario=scenario,
            bootstrap=bootstrap,
            out=tmp_path,
            seed=SEEDS[scenario],
            coordinator_standby=True,
            **CONFIG,
        )
    )
    assert_exactly_once(report)
    assert report["fault_fired"] is True
    [fault] = report["faults"]
    assert fault["fault"] == scenario
    takeover = report["takeover"]
    assert takeover is not None, report
    assert takeover["fault"] == scenario
    assert takeover["new_leader"] != takeover["old_leader"]
    assert takeover["epoch_after"] > takeover["epoch_before"]  # the new leader's fence raised it
    assert takeover["checkpoint_after"] is not None  # the region checkpointed on the new leader
    assert takeover["resume_after_takeover_s"] is not None
    if scenario == "pause-coordinator":
        assert takeover["old_leader_exit"] == 1  # fenced at its next write: fail-stop
    else:
        assert takeover["old_leader_exit"] is None  # killed, not restarted
    events = [json.loads(line) for line in (Path(report["out_dir"]) / "timeline" / "drill.jsonl").open()]
    assert [e["epoch"] for e in events if e["ev"] == "takeover"] == [takeover["epoch_after"]]
    if scenario == "pause-coordinator":
        assert [e["code"] for e in events if e["ev"] == "leader_exit"] == [1]
    print(
        f"{scenario}: takeover {takeover['takeover_s']} s, epoch {takeover['epoch_before']} -> "
        f"{takeover['epoch_after']}, resume after it {takeover['resume_after_takeover_s']} s, "
        f"resets {report['resets']}, recover {report['time_to_recover_s']} s, elapsed {report['elapsed_s']} s"
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(scenario="pause-broker"), "pauses"),
        (dict(scenario="pause-coordinator", pause_s=2.0), "past the lease"),
    ],
)
def test_coordinator_standby_refuses_what_it_cannot_drill(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DrillConfig(coordinator_standby=True, **kwargs)


def test_drill_cli_refuses_pause_broker_with_a_coordinator_standby():
    proc = subprocess.run(
        [sys.executable, "-m", "cr_consumer.cli.main", "drill", "--scenario", "pause-broker", "--coordinator-standby"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "--coordinator-standby keeps the coordinator's log on the broker" in proc.stderr
