"""The drills' dead-letter path (``--dead-letter``): poison records reach the pipeline, which
dead-letters them (undecodable ones at the deserialiser, marked ones at its map), and every good
record is exactly once in the output, every poison record exactly once in the dead-letter output,
read by its ``crkafka.source.*`` headers. With the file sink in the poison scenario, and with the
Kafka sink while a member is killed, its open transactions in both topics aborted and replayed.
Same small scale as the other drills."""

from __future__ import annotations

import pytest

from cr_consumer.drill.config import POISON_RATIO, DrillConfig
from cr_consumer.drill.pipeline import SinkKind
from cr_consumer.drill.scenarios import run_drill

from support.drill import SMALL, assert_exactly_once


def _assert_dead_lettered_once(report: dict) -> None:
    assert_exactly_once(report)
    assert report["poison"] > 0, report
    assert report["dead_letters"] == report["poison"], report
    assert report["dead_letter_missing"] == 0, report["examples"]
    assert report["dead_letter_duplicates"] == 0, report["examples"]
    assert report["dead_letter_unexpected"] == 0, report["examples"]


def test_the_cli_options_reach_the_drill_config():
    import argparse

    from cr_consumer.cli.drill import add_arguments, configs

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    [cfg] = configs(parser.parse_args(["--scenario", "kill-member", "--sink", "kafka", "--dead-letter", "--poison"]))
    assert (cfg.sink, cfg.dead_letter, cfg.poison_ratio) == (SinkKind.KAFKA, True, POISON_RATIO)
    [plain] = configs(parser.parse_args(["--scenario", "kill-member"]))
    assert (plain.dead_letter, plain.poison_ratio) == (False, 0.0)
    [poison] = configs(parser.parse_args(["--scenario", "poison"]))
    assert poison.poison_ratio == POISON_RATIO


@pytest.mark.slow
def test_poison_dead_lettered_exactly_once_with_the_file_sink(bootstrap, tmp_path):
    report = run_drill(
        DrillConfig(scenario="poison", bootstrap=bootstrap, out=tmp_path, seed=801, dead_letter=True, **SMALL)
    )
    _assert_dead_lettered_once(report)


@pytest.mark.slow
def test_poison_dead_lettered_exactly_once_with_the_kafka_sink_and_a_member_killed(bootstrap, tmp_path):
    report = run_drill(
        DrillConfig(
            scenario="kill-member",
            bootstrap=bootstrap,
            out=tmp_path,
            seed=802,
            sink=SinkKind.KAFKA,
            dead_letter=True,
            poison=True,
            **SMALL,
        )
    )
    assert report["sink"] == "kafka"
    assert report["faults"][0]["fault"] == "kill-member", report["faults"]
    _assert_dead_lettered_once(report)
