"""The heartbeat's Kafka group report (coordinator/region/messages.py): the
cooperative fields are optional (an older member sends three), validated when
present, and carried only for a cooperative member."""

from __future__ import annotations

import pytest

from coordinator.region.messages import RegionHeartbeat
from coordinator.wire.errors import Invalid

BASE = {"region": "r", "member": "m0", "incarnation": "i1"}
EAGER = {"member_id": "k-m0", "generation": 4, "rebalancing": True}


def test_an_older_members_report_is_unchanged():
    assert RegionHeartbeat.from_body({**BASE, "kafka": EAGER}).kafka == EAGER


def test_a_cooperative_report_carries_its_pending_reset():
    hb = RegionHeartbeat.from_body({**BASE, "kafka": {**EAGER, "cooperative": True, "reset_pending": True}})
    assert hb.kafka == {**EAGER, "cooperative": True, "reset_pending": True}
    hb = RegionHeartbeat.from_body({**BASE, "kafka": {**EAGER, "cooperative": False, "reset_pending": True}})
    assert hb.kafka == EAGER


@pytest.mark.parametrize("extra", [{"cooperative": "yes"}, {"cooperative": True, "reset_pending": 1}])
def test_bad_cooperative_fields_are_refused(extra):
    with pytest.raises(Invalid, match="must be true or false"):
        RegionHeartbeat.from_body({**BASE, "kafka": {**EAGER, **extra}})
