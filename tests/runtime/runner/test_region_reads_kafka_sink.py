"""A region reads another region's exactly-once Kafka output on the test broker, whose consumers
return aborted records (its fetch answers carry no aborted-transactions list): with
``crkafka.filter.aborted`` the reading source drops the aborted intervals of the first region
itself, and the second region's output holds every input record exactly once.

The first region's member-0 is killed (SIGKILL, the drills' fault point ``after-drain``) once its
interval's records are flushed into the log and before its checkpoint: that interval's
transaction is aborted by the reset that follows, so the first output holds aborted records
(checked: else the run proves nothing). The second half of the input trickles in while the fault
is armed, so the interval the kill lands on holds records of member-0's partitions: a burst
consumed before the arming left that interval empty, and nothing was aborted."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest

from coordinator.kafka.raw_batches import CommittedRead, read_committed
from cr_consumer.kafka.kafka_python.admin import admin_settings
from cr_consumer.runtime.fault_points import ENV_FAULT_DIR, Action, Point, arm, fired
from cr_consumer.testing.kafka_util import committed_offsets, create_topic, produce

from support.region import check_exactly_once, make_region, wait_region, write_module

pytestmark = pytest.mark.slow

PARTITIONS = 4
#: Bound on each stage's output reaching its count: ~5 s on a quiet machine; a relay whose every
#: poll also reads the log's markers took over 40 s at load 20 on 2 cores.
WAIT_S = 90.0
#: Pace of the second half of the input: 1,000 records over about 5 s, several checkpoint
#: periods, so every interval while the fault is armed has records of every partition.
TRICKLE_PAUSE_S = 0.005

TO_KAFKA = """
from cr_consumer.runtime import KafkaSource, Pipeline, replace

def build(ctx):
    return (Pipeline(KafkaSource(topics=[ctx.param("topic")], options={"start_position": "earliest"}))
            .map(lambda r: replace(r, value={"topic": r.topic, "partition": r.partition, "offset": r.offset}))
            .sink(ctx.kafka_sink(ctx.param("out"))))
"""

#: Reads the first region's output as a user would on this broker, and writes it on unchanged.
RELAY = """
import json
from cr_consumer.runtime import KafkaSource, Pipeline, replace

def build(ctx):
    source = KafkaSource(
        topics=[ctx.param("topic")],
        options={"start_position": "earliest"},
        kafka={"isolation.level": "read_committed", "crkafka.filter.aborted": "true"},
    )
    return (Pipeline(source)
            .map(lambda r: replace(r, value=json.loads(r.value)))
            .sink(ctx.kafka_sink(ctx.param("out"))))
"""


def committed(bootstrap: str, topic: str) -> list[CommittedRead]:
    settings = admin_settings(bootstrap, {}, request_timeout_ms=5_000, client_id="test-region-reads-sink")
    return [read_committed(settings, topic, p) for p in range(PARTITIONS)]


def rows(reads: list[CommittedRead]) -> list[dict]:
    return [json.loads(r.value or b"") for read in reads for r in read.records]


def wait_committed(region, bootstrap: str, topic: str, n: int, timeout: float) -> list[CommittedRead]:
    """The committed reads of ``topic`` once they hold ``n`` records; on a timeout the message
    says, per partition, what was committed, aborted and still open at the last look."""
    last: list[CommittedRead] = []

    def enough() -> list[CommittedRead] | None:
        last[:] = committed(bootstrap, topic)
        return last if sum(len(read.records) for read in last) >= n else None

    try:
        return wait_region(region, enough, timeout, f"{n} committed records in {topic}", interval=0.5)
    except AssertionError as exc:
        seen = [(len(r.records), r.aborted_records, len(r.open_transactions), r.stop) for r in last]
        raise AssertionError(f"(committed, aborted, open, stop) per partition {seen}; {exc}") from exc


def relay_diagnosis(bootstrap: str, mid: str, out: str, relay_group: str) -> str:
    """Where the relay stands when its output falls short: what its group committed on ``mid``
    against ``mid``'s end, and, per partition of ``mid``, the offsets of the committed records
    the relay has not written (held back behind an open transaction, or dropped as aborted)."""
    mid_reads = committed(bootstrap, mid)
    written = {(r["partition"], r["offset"]) for r in rows(committed(bootstrap, out))}
    missing: dict[int, list[int]] = {}
    for p, read in enumerate(mid_reads):
        for record in read.records:
            row = json.loads(record.value or b"")
            if (row["partition"], row["offset"]) not in written:
                missing.setdefault(p, []).append(record.offset)
    lacking = {p: (len(offsets), offsets[:5]) for p, offsets in missing.items()}
    ends = [read.stop for read in mid_reads]
    return (
        f"relay committed {committed_offsets(bootstrap, relay_group, mid)} of {mid} ends {ends};"
        f" {mid} offsets not relayed per partition (count, first) {lacking}"
    )


def trickle(first: int, last: int) -> Iterator[bytes]:
    for i in range(first, last):
        time.sleep(TRICKLE_PAUSE_S)
        yield b"v%d" % i


def test_a_region_reads_another_regions_kafka_output_with_its_aborted_intervals_dropped(bootstrap, names, tmp_path):
    topic = create_topic(bootstrap, names.topic(), partitions=PARTITIONS)
    mid = create_topic(bootstrap, names.topic("mid"), partitions=PARTITIONS)
    out = create_topic(bootstrap, names.topic("out"), partitions=PARTITIONS)
    faults = tmp_path / "faults"
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    second_dir.mkdir()
    produce(bootstrap, topic, (b"v%d" % i for i in range(1000)))
    first = make_region(
        first_dir,
        bootstrap,
        write_module(first_dir, "to_kafka", TO_KAFKA),
        topic,
        members=2,
        params={"topic": topic, "out": mid},
        env={ENV_FAULT_DIR: str(faults)},
    )
    second = make_region(
        second_dir,
        bootstrap,
        write_module(second_dir, "relay", RELAY),
        mid,
        members=2,
        params={"topic": mid, "out": out},
    )
    with first, second:
        wait_committed(first, bootstrap, mid, 200, WAIT_S)
        feeder = threading.Thread(target=produce, args=(bootstrap, topic, trickle(1000, 2000)), daemon=True)
        feeder.start()
        wait_committed(first, bootstrap, mid, 1100, WAIT_S)  # the trickle flows through the first region
        arm(faults, Point.AFTER_DRAIN, Action.CRASH, "member-0")
        wait_region(first, lambda: fired(faults), 30, "member-0 killed after a drain")
        feeder.join(WAIT_S)
        assert not feeder.is_alive(), "the second half of the input was not produced"
        wait_committed(first, bootstrap, mid, 2000, WAIT_S)
        try:
            wait_committed(second, bootstrap, out, 2000, WAIT_S)
        except AssertionError as exc:
            raise AssertionError(f"{relay_diagnosis(bootstrap, mid, out, second.group)}; {exc}") from exc
    reads = committed(bootstrap, mid)
    assert sum(read.aborted_records for read in reads) > 0, "no aborted interval in the first output"
    check_exactly_once(rows(reads), topic, {p: 500 for p in range(PARTITIONS)})
    relayed = committed(bootstrap, out)
    check_exactly_once(rows(relayed), topic, {p: 500 for p in range(PARTITIONS)})
    assert [read.open_transactions for read in relayed] == [()] * PARTITIONS
