"""The runner's member command line carries every region setting: parsed back by
the member's own parser, it gives the settings the runner was given, so the
coordinator creates the region with them whichever member joins first."""

from __future__ import annotations

import argparse

from coordinator.protocol.region.config import RegionConfig
from cr_consumer.cli import member as member_cli
from cr_consumer.runtime.runner.launch import member_argv
from cr_consumer.runtime.runner.region_runner import Region


def _member_args(argv: list[str]) -> argparse.Namespace:
    rest = argv[argv.index("cr_consumer.cli.member") + 1 :]
    parser = argparse.ArgumentParser()
    parser.add_argument("--log-level")
    parser.add_argument("--log-format")
    member_cli.add_arguments(parser)
    return parser.parse_args(rest)


def test_every_region_setting_reaches_the_member_and_the_region_config(tmp_path):
    region = Region(
        "p.py",
        members=2,
        bootstrap="b:1",
        output_dir=tmp_path / "o",
        state_dir=tmp_path / "s",
        period_s=2.0,
        drain_timeout_s=7.0,
        reset_timeout_s=8.0,
        max_consecutive_resets=9,
        failure_memory_s=11.0,
        reset_backoff_s=0.25,
        reset_backoff_max_s=12.0,
        member_timeout_s=6.0,
    )
    argv = member_argv(
        "python",
        "p.py",
        name="member-0",
        coordinator="tcp://127.0.0.1:1",
        bootstrap="b:1",
        group="g",
        output_dir="o",
        state_dir="s",
        region_index=0,
        min_members=2,
        region=region.region_settings,
        params={},
        kafka_stdin=False,
    )
    settings = member_cli.region_settings(_member_args(argv), members=2)
    assert settings == {**region.region_settings, "min_members": 2}
    config = RegionConfig.from_dict({**settings, "name": "g"})
    assert (config.failure_memory_s, config.reset_backoff_s, config.reset_backoff_max_s) == (11.0, 0.25, 12.0)


def test_the_member_defaults_are_the_region_config_defaults():
    settings = member_cli.region_settings(
        _member_args(["x", "cr_consumer.cli.member", "p.py", "--coordinator", "tcp://127.0.0.1:1"])
    )
    defaults = RegionConfig(name="g")
    for key in (
        "period_s",
        "drain_timeout_s",
        "reset_timeout_s",
        "max_consecutive_resets",
        "failure_memory_s",
        "reset_backoff_s",
        "reset_backoff_max_s",
        "member_timeout_s",
    ):
        assert settings[key] == getattr(defaults, key), key
