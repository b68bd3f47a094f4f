"""The drill scenarios of untimely faults, end to end and verified exactly once:
a member kept down past its member timeout, SIGSTOPped processes (member,
coordinator, broker), and a crash, pause or lost message at each step of the
region protocol (the member runtime's fault points). Same small scale as
test_drill_scenarios.py; pauses of 5 s (past the drills' 3 s member timeout)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cr_consumer.drill import faults
from cr_consumer.drill.config import SCENARIOS, UNTIMELY_SCENARIOS, DrillConfig
from cr_consumer.drill.scenarios import run_drill
from cr_consumer.testing.broker import ENV_BOOTSTRAP

from support.drill import FENCED_ZOMBIE_SEED, SMALL, assert_exactly_once

PAUSE_S = 5.0
SEEDS = {name: 300 + i for i, name in enumerate(UNTIMELY_SCENARIOS)}


@pytest.mark.slow
@pytest.mark.parametrize("scenario", UNTIMELY_SCENARIOS)
def test_untimely_fault_exactly_once(scenario, bootstrap, tmp_path, monkeypatch):
    if scenario == "pause-broker":  # the drill pauses a broker it starts itself
        monkeypatch.delenv(ENV_BOOTSTRAP, raising=False)
        bootstrap = None
    cfg = DrillConfig(
        scenario=scenario, bootstrap=bootstrap, out=tmp_path, seed=SEEDS[scenario], pause_s=PAUSE_S, **SMALL
    )
    report = run_drill(cfg)
    assert_exactly_once(report)
    assert report["fault_fired"] is True, report["faults"]
    [fault] = report["faults"]
    assert fault["fault"] == scenario
    if scenario in faults.POINT_SCENARIOS:
        point, action = faults.POINT_SCENARIOS[scenario]
        assert (fault["point"], fault["action"]) == (point.value, action.value)
    events = [json.loads(line) for line in (Path(report["out_dir"]) / "timeline" / "drill.jsonl").open()]
    kinds = [e["ev"] for e in events]
    if scenario.startswith("pause-"):
        assert "fault_pause" in kinds
        assert "fault_continue" in kinds
    if scenario in ("pause-member", "kill-member-long"):
        # the controller dropped the silent member, and the process came back and joined again
        victim = fault["member"]
        dropped = [
            e
            for e in events
            if e["ev"] == "ctl_leave"
            and e["ctl"]["member"] == victim
            and "stopped heartbeating" in e["ctl"].get("reason", "")
        ]
        assert dropped, kinds
        [cont] = [e for e in events if e["ev"] == "fault_continue"]
        assert any(
            e["ev"] == "ctl_join"
            and e["ctl"]["member"] == victim
            and e["ctl"]["pid"] == cont["pid"]
            and e["t"] >= dropped[0]["t"]
            for e in events
        ), "the paused process did not join again"
    if scenario == "kill-member-long":
        # held until the controller had dropped the dead member and completed a checkpoint
        # without it: the situation in which its sealed interval must not be lost
        [hold] = [e for e in events if e["ev"] == "fault_hold"]
        assert "completed without it" in hold["outcome"], hold


def test_pause_broker_is_refused_with_an_external_cluster():
    with pytest.raises(ValueError, match="needs the embedded broker"):
        DrillConfig(scenario="pause-broker", bootstrap="kafka.example:9092")


def test_pause_member_must_outlast_the_member_timeout():
    with pytest.raises(ValueError, match="past the member timeout"):
        DrillConfig(scenario="pause-member", pause_s=2.0)
    DrillConfig(scenario="pause-coordinator", pause_s=2.0)  # no such bound there


def test_every_scenario_has_a_fault_and_all_of_them_are_drawn():
    assert set(SCENARIOS) == set(faults.FAULTS)
    assert {
        "kill-member-long",
        "pause-member",
        "pause-coordinator",
        "pause-broker",
        "drop-resume",
        "crash-after-ack",
        "crash-before-publish",
        "crash-after-publish",
    } <= set(UNTIMELY_SCENARIOS)
    # fault-point draws every point but start-up, crashed and paused, and a dropped RESUME
    drawn = {(p.value, a.value) for p, a in faults.RANDOM_POINTS}
    assert ("member-start", "crash") not in drawn
    assert ("receive-resume", "drop") in drawn
    assert {p for p, _ in drawn} == {p.value for p in faults.Point if p not in faults.NOT_DRAWN}


def test_all_scenarios_leave_pause_broker_out_against_an_external_cluster(capsys, monkeypatch):
    import argparse

    from cr_consumer.cli.drill import add_arguments, configs

    monkeypatch.delenv(ENV_BOOTSTRAP, raising=False)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    external = configs(parser.parse_args(["--scenario", "all", "--bootstrap", "kafka.example:9092", "--seed", "1"]))
    assert [c.scenario for c in external] == [s for s in SCENARIOS if s != "pause-broker"]
    assert "skipping pause-broker" in capsys.readouterr().err
    embedded = configs(parser.parse_args(["--scenario", "all", "--seed", "1", "--pause", "4"]))
    assert [c.scenario for c in embedded] == list(SCENARIOS)
    assert {c.pause_s for c in embedded} == {4.0}


@pytest.mark.slow
def test_a_member_paused_past_its_session_timeout_does_not_publish_partitions_it_lost(bootstrap, tmp_path):
    cfg = DrillConfig(
        scenario="fault-point", bootstrap=bootstrap, out=tmp_path, seed=FENCED_ZOMBIE_SEED, pause_s=10.0, **SMALL
    )
    report = run_drill(cfg)
    [fault] = report["faults"]
    assert (fault["point"], fault["action"]) == ("receive-checkpoint", "pause"), fault
    assert report["fault_fired"] is True
    assert_exactly_once(report)
