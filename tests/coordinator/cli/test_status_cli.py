"""``crkafka status``: regions, members and per-partition committed/end/lag read from Kafka.

A real coordinator process, members joined through the real control channel,
and the session's broker: the group's committed offsets are set with the admin
API, the records are produced in multi-record batches (where a broker's
ListOffsets may answer the last batch's base offset instead of the end).
"""

from __future__ import annotations

import json
import subprocess
import sys

from kafka import KafkaAdminClient, TopicPartition
from kafka.structs import OffsetAndMetadata

from coordinator.cli.status import COUNT_MAX, JSON_VERSION
from coordinator.protocol.common.waiting import wait_until
from coordinator.protocol.region.replies import RegionPhase
from coordinator.protocol.region.status import RegionStatus
from cr_consumer.testing.kafka_util import create_topic, produce

from support.scripted_member import all_regions, member


def _steady(region: RegionStatus | None, members: int) -> bool:
    """All ``members`` joined and a checkpoint completed since the last of them did."""
    if region is None:
        return False
    resets, checkpoints = region.recent_resets, region.recent_checkpoints
    return len(region.members) == members and bool(checkpoints) and (not resets or checkpoints[0].t > resets[0].t)


def _status(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cr_consumer.cli.main", "status", *args], capture_output=True, text=True, timeout=timeout
    )


def test_regions_members_and_lag(coordinator, bootstrap, names):
    endpoint = coordinator.endpoint
    region, failing = names.group("orders"), names.group("payments")
    topic = create_topic(bootstrap, names.topic(), 2)
    produce(bootstrap, topic, [b"v" * 20] * 1000)  # 500 per partition, batched
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.alter_group_offsets(
            region,
            {
                TopicPartition(topic, 0): OffsetAndMetadata(100, "", -1),
                TopicPartition(topic, 1): OffsetAndMetadata(200, "", -1),
            },
        )
    finally:
        admin.close()
    members = [
        member(endpoint, region, "m-1").start(),
        member(endpoint, region, "m-2", partition=1).start(),
        member(endpoint, failing, "p-1", fail_drain=True).start(),
    ]
    try:
        wait_until(lambda: _steady(all_regions(endpoint).get(region), 2), 30, "two members and a checkpoint")
        wait_until(
            lambda: (r := all_regions(endpoint).get(failing)) is not None and r.phase is RegionPhase.FAILED,
            30,
            "FAILED",
        )

        r = _status("--coordinator", endpoint, "--bootstrap", bootstrap, "--json")
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert doc["version"] == JSON_VERSION == 2
        assert doc["errors"] == []
        assert doc["coordinator"]["reachable"]
        assert doc["coordinator"]["loaded"]
        by_name = doc["regions"]
        assert by_name[region]["phase"] in ("RUNNING", "DRAINING", "CHECKPOINTING")
        assert by_name[region]["last_consistent"] >= 1
        assert by_name[region]["recent_checkpoints"]
        assert [m["name"] for m in by_name[region]["members"]] == ["m-1", "m-2"]
        assert by_name[failing]["phase"] == "FAILED"
        assert "sink refused the batch" in by_name[failing]["failed_reason"]
        assert by_name[failing]["recent_resets"]
        rows = {
            (p["group"], p["topic"], p["partition"]): (p["committed"], p["end"], p["lag"])
            for p in doc["lag"]["partitions"]
        }
        assert rows == {(region, topic, 0): (100, 500, 400), (region, topic, 1): (200, 500, 300)}

        r = _status("--coordinator", endpoint, "--bootstrap", bootstrap)
        assert r.returncode == 0, r.stderr
        out = r.stdout
        assert "regions (2)" in out
        assert "members (3)" in out
        assert f"lag (Kafka {bootstrap})" in out
        assert f"{failing} FAILED: " in out
        assert "sink refused the batch" in out
        lag_rows = [line.split() for line in out.splitlines() if line.startswith(region) and topic in line]
        assert sorted(lag_rows) == [
            [region, topic, "0", "100", "500", "400"],
            [region, topic, "1", "200", "500", "300"],
        ]

        r = _status("--coordinator", endpoint, "--bootstrap", bootstrap, "--json", "--watch", "0.2", "--count", "2")
        assert r.returncode == 0, r.stderr
        docs = [json.loads(line) for line in r.stdout.splitlines()]
        assert len(docs) == 2
        assert all(len(d["lag"]["partitions"]) == 2 for d in docs)
        assert docs[1]["time"] > docs[0]["time"]

        # an unreachable broker: named, exit 2, no traceback; the coordinator's part is still printed
        r = _status("--coordinator", endpoint, "--bootstrap", "127.0.0.1:1", "--timeout", "1")
        assert r.returncode == 2
        assert "127.0.0.1:1" in r.stderr
        assert "Traceback" not in r.stderr
        assert "regions (2)" in r.stdout
    finally:
        for m in members:
            m.stop()


def test_unreachable_coordinator_is_named_and_exits_2():
    r = _status("--coordinator", "tcp://127.0.0.1:1", "--timeout", "1", timeout=30)
    assert r.returncode == 2
    assert "coordinator tcp://127.0.0.1:1" in r.stderr
    assert "no reply from the coordinator" in r.stderr
    assert "Traceback" not in r.stderr
    r = _status("--coordinator", "tcp://127.0.0.1:1", "--timeout", "1", "--json", timeout=30)
    assert r.returncode == 2
    assert json.loads(r.stdout)["coordinator"]["reachable"] is False


def test_bad_flags_exit_2_without_traceback():
    for args in (
        ["--watch", "0"],
        ["--timeout", "soon"],
        ["--count", "3"],
        ["--watch", "1", "--count", "0"],
        ["--watch", "1", "--count", str(COUNT_MAX + 1)],
    ):
        r = _status("--coordinator", "tcp://127.0.0.1:1", *args, timeout=30)
        assert r.returncode == 2, args
        assert "Traceback" not in r.stderr
