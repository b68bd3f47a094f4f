"""The membership and coordinator drills (``STEADY_INPUT_SCENARIOS``) with
incremental (cooperative) rebalancing, the region runtime's default, at a
steady input long enough (12 s, the fault after 3 s) for the rebalances to
happen while records flow. A real coordinator process, real member processes,
the session's broker; the output verified independently: no record missing,
none twice, and Kafka's committed offsets not behind the last checkpoint.
add-member moves a partition between live members (revoked in one rebalance,
assigned in the next); the drill waits (bounded, drill/settle.py) for the
group's commits before it stops the region, so the moving partition's commit
is checked too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cr_consumer.drill.scenarios import DrillConfig, run_drill

from support.drill import SMALL, STEADY_INPUT_SCENARIOS, assert_exactly_once

SEEDS = {"kill-member": 301, "add-member": 302, "remove-member": 303, "kill-coordinator": 304, "reset-storm": 305}
CONFIG = dict(SMALL, members=3, period_s=1.0, messages=24_000, rate=2000.0, fault_at=0.25, timeout_s=120.0)


def _settle(report: dict) -> dict:
    events = [json.loads(line) for line in (Path(report["out_dir"]) / "timeline" / "drill.jsonl").open()]
    [settle] = [e for e in events if e["ev"] == "settle"]
    return settle


def _drill(scenario: str, bootstrap: str, tmp_path: Path) -> dict:
    """The drill's report, checked as every basic drill's: exactly once, the fault
    fired, the start-up reset and one the fault caused unless it needs none (a
    graceful leave before its checkpoint answer resets nobody under cooperative
    rebalancing, docs/region.md), the plot drawn."""
    report = run_drill(
        DrillConfig(scenario=scenario, bootstrap=bootstrap, out=tmp_path, seed=SEEDS[scenario], **CONFIG)
    )
    assert_exactly_once(report)
    assert report["faults"]
    assert report["faults"][0]["fault"] == scenario
    assert report["resets"] >= (1 if scenario == "remove-member" else 2)
    assert Path(report["plot"]).stat().st_size > 10_000
    return report


@pytest.mark.slow
@pytest.mark.parametrize("scenario", [s for s in STEADY_INPUT_SCENARIOS if s != "reset-storm"])
def test_cooperative_drill_exactly_once(scenario, bootstrap, tmp_path):
    report = _drill(scenario, bootstrap, tmp_path)
    assert _settle(report)["settled"] is True


@pytest.mark.slow
def test_cooperative_reset_storm_output_is_exactly_once(bootstrap, tmp_path):
    """add-member, kill-member and kill-coordinator within a second; the drill
    waits for the group's commits before stopping the region, so the
    committed offsets are checked as in every other drill."""
    _drill("reset-storm", bootstrap, tmp_path)
