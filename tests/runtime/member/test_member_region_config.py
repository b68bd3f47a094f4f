"""The region settings a member joins with and builds its source from, typed
(``Member.region_config``): its ``--region-index`` and group name filled in,
and settings the region could not run with refused before any join."""

from __future__ import annotations

import pytest

from coordinator.protocol.region.config import RegionConfig
from cr_consumer.runtime.member.process import Member
from cr_consumer.runtime.member.setup import MemberSettings, SettingsError


def _settings(tmp_path, region: dict) -> MemberSettings:
    return MemberSettings(
        pipeline="p.py",
        bootstrap="127.0.0.1:9",
        coordinator="tcp://127.0.0.1:9",
        group="g",
        member="m0",
        output_dir=tmp_path / "out",
        state_dir=tmp_path / "state",
        region_index=3,
        region=region,
    )


def test_the_member_joins_with_its_settings_its_index_and_its_group_as_name(tmp_path):
    config = Member(_settings(tmp_path, {"mode": "operator_driven", "period_s": 2.0})).region_config()
    assert config == RegionConfig(name="g", index=3, mode="operator_driven", period_s=2.0)


@pytest.mark.parametrize("region", [{"period_s": -1.0}, {"mode": "sometimes"}, {"no_such_setting": 1}])
def test_unusable_region_settings_are_a_settings_error(tmp_path, region):
    with pytest.raises(SettingsError, match="region settings"):
        Member(_settings(tmp_path, region)).region_config()
