"""The basic drill scenarios that change no membership end to end: a real
coordinator process, real member processes (`crkafka member`), the session's
broker; the output verified independently. Small scale. The membership and
coordinator scenarios (kill-member, add-member, remove-member,
kill-coordinator, reset-storm) run at a steady input in
test_drill_cooperative.py; the untimely-fault scenarios in test_drill_faults.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cr_consumer.drill.config import BASIC_SCENARIOS, DrillConfig
from cr_consumer.drill.scenarios import run_drill

from support.drill import SMALL, STEADY_INPUT_SCENARIOS, assert_exactly_once

SEEDS = {name: 100 + i for i, name in enumerate(BASIC_SCENARIOS)}
#: The basic scenarios run here; poison runs through the CLI (below).
SCENARIOS = [s for s in BASIC_SCENARIOS if s != "poison" and s not in STEADY_INPUT_SCENARIOS]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_drill_scenario_exactly_once(scenario, bootstrap, tmp_path):
    report = run_drill(DrillConfig(scenario=scenario, bootstrap=bootstrap, out=tmp_path, seed=SEEDS[scenario], **SMALL))
    assert_exactly_once(report)
    assert report["faults"]
    assert report["faults"][0]["fault"] == scenario
    # the start-up reset, and one the fault caused unless it needs none: with
    # cooperative rebalancing (the default) a new topic's partitions reset
    # nobody (docs/region.md)
    assert report["resets"] >= (1 if scenario == "new-topic" else 2)
    if scenario == "new-topic":
        assert any("-new" in (f.get("topic") or "") for f in report["faults"])
        assert report["produced"] > SMALL["messages"]
    if scenario == "sink-failure":
        assert report["fault_fired"] is True
    assert Path(report["plot"]).stat().st_size > 10_000


@pytest.mark.slow
def test_drill_cli_poison_json_report_and_exit_code(bootstrap, tmp_path):
    """The poison scenario through `crkafka drill --json`: undecodable records are
    counted by the verifier and skipped by the pipeline; exit code 0."""
    cmd = [
        sys.executable,
        "-m",
        "cr_consumer.cli.main",
        "--log-level",
        "WARNING",
        "drill",
        "--scenario",
        "poison",
        "--members",
        "2",
        "--partitions",
        "4",
        "--messages",
        "4000",
        "--rate",
        "1500",
        "--bootstrap",
        bootstrap,
        "--out",
        str(tmp_path),
        "--seed",
        str(SEEDS["poison"]),
        "--timeout",
        "75",
        "--json",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
    report = json.loads(proc.stdout)
    assert_exactly_once(report)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert report["poison"] > 0
    assert "published" in proc.stderr  # progress lines while it runs
    assert Path(report["plot"]).is_file()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--scenario", "nope"], "invalid choice"),
        (["--scenario", "kill-member", "--members", "0"], "must be >= 1"),
        (["--scenario", "kill-member", "--bootstrap", "localhost"], "is not HOST:PORT"),
        (["--scenario", "kill-member", "--rate", "-5"], "must be >= 0"),
        (["--scenario", "remove-member", "--members", "1"], "needs --members >= 2"),
        (["--scenario", "kill-member", "--partitions", "8", "--messages", "3"], "must be >= --partitions"),
        (["--scenario", "kill-member", "--sink", "s3"], "invalid choice"),
    ],
)
def test_drill_cli_rejects_bad_arguments(argv, message):
    proc = subprocess.run(
        [sys.executable, "-m", "cr_consumer.cli.main", "drill", *argv], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert message in proc.stderr
