"""The membership drills with eager rebalancing (``--eager``: every member's
consumer uses the range and round-robin assignors, the switch away from the
region runtime's cooperative-sticky default). A real coordinator process, real
member processes, the session's broker; the output verified independently (no
record missing, none twice, Kafka's committed offsets not behind the last
checkpoint). Eager rebalances revoke every member's partitions, so each
membership change resets the whole region."""

from __future__ import annotations

import pytest

from cr_consumer.drill.scenarios import DrillConfig, run_drill

from support.drill import SMALL, assert_exactly_once

SEEDS = {"kill-member": 301, "add-member": 302, "remove-member": 303}


@pytest.mark.slow
@pytest.mark.parametrize("scenario", sorted(SEEDS))
def test_eager_drill_exactly_once(scenario, bootstrap, tmp_path):
    report = run_drill(
        DrillConfig(
            scenario=scenario, bootstrap=bootstrap, out=tmp_path, seed=SEEDS[scenario], cooperative=False, **SMALL
        )
    )
    assert_exactly_once(report)
    assert report["faults"]
    assert report["faults"][0]["fault"] == scenario
