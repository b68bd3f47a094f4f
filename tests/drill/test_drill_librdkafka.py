"""A fault drill with the members on librdkafka (confluent-kafka) instead of
kafka-python: the same region, the same exactly-once verdict. A member is
SIGKILLed while records flow; the runner restarts it, the region resets to its
last checkpoint, and the output holds every record exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest

from cr_consumer.drill.scenarios import DrillConfig, run_drill

from support.drill import SMALL, assert_exactly_once


@pytest.mark.slow
def test_kill_member_drill_with_librdkafka_exactly_once(bootstrap, tmp_path):
    report = run_drill(
        DrillConfig(
            scenario="kill-member", bootstrap=bootstrap, out=tmp_path, seed=700, kafka_client="librdkafka", **SMALL
        )
    )
    assert_exactly_once(report)
    [fault] = report["faults"]
    assert fault["fault"] == "kill-member"
    assert report["resets"] >= 2  # the start-up reset and the one the kill caused
    # the members really ran on librdkafka: each member registers naming its client
    logs = sorted((Path(report["out_dir"]) / "state" / "logs").glob("member-*.log"))
    assert len(logs) == SMALL["members"]
    for log in logs:
        text = log.read_text(errors="replace")
        assert "Kafka client librdkafka" in text, log
        assert "Kafka client kafka-python" not in text, log
