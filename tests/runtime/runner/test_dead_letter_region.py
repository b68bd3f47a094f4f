"""A dead-letter pipeline as a region of real member processes on the real broker: poison
records (a ``map`` raising, bytes the source cannot deserialise) go to the dead-letter file
sink, every other record to the output file sink, each exactly once across a member's kill -9."""

from __future__ import annotations

import pytest

from cr_consumer.testing.kafka_util import create_topic, produce

from support.region import check_exactly_once, make_region, published, wait_region, write_module

pytestmark = pytest.mark.slow

DEAD_LETTER = """
from cr_consumer.runtime import KafkaSource, Pipeline, replace

def decode(value):
    return value.decode("utf-8")

def parse(r):
    kind, _, n = r.value.partition("-")
    if kind != "value":
        raise ValueError(f"not a value: {r.value!r}")
    return replace(r, value=f"VALUE-{int(n)}")

def build(ctx):
    source = KafkaSource(
        topics=[ctx.param("topic")], options={"start_position": "earliest", "value_deserializer": decode}
    )
    return Pipeline(source, dead_letter=ctx.file_sink("dlq", name="dlq")).map(parse).sink(ctx.file_sink())
"""

PARTITIONS = 4


def value(i: int) -> bytes:
    """Record ``i``: every 7th from 3 poison for the map, every 11th from 5 not UTF-8."""
    if i % 11 == 5:
        return b"\xff\xfe-%d" % i
    if i % 7 == 3:
        return b"poison-%d" % i
    return b"value-%d" % i


def test_poison_records_dead_lettered_exactly_once_across_a_member_kill(bootstrap, names, tmp_path):
    topic = create_topic(bootstrap, names.topic(), partitions=PARTITIONS)
    pipeline = write_module(tmp_path, "dead_letter", DEAD_LETTER)
    total = 8000
    produce(bootstrap, topic, [value(i) for i in range(total // 2)])  # round robin: i to partition i % 4
    out, dlq = tmp_path / "out", tmp_path / "out" / "dlq"
    with make_region(tmp_path, bootstrap, pipeline, topic, members=3) as region:
        wait_region(region, lambda: len(published(out)) >= 500 and published(dlq), 40, "output and dead letters")
        victim = region.live_members()[0]
        region.kill(victim)
        produce(bootstrap, topic, [value(i) for i in range(total // 2, total)])
        wait_region(region, lambda: len(published(out)) + len(published(dlq)) >= total, 60, f"{total} records")
        status = region.wait_until(lambda s: s.phase == "RUNNING" and len(s.members) == 3, 30)
        assert region.restarts()[victim] == 1
        assert status.reset.resets >= 2  # the start and the victim's restart
        # two more checkpoints: nothing may be published twice later
        done = status.last_consistent or 0
        final = region.wait_until(lambda s: (s.last_consistent or 0) >= done + 2, 30)
        rows, letters = published(out), published(dlq)
    # crkafka status's dead_letters: each process's count since it started (a replayed record
    # counts again, and the victim's first process is gone): every member reports one
    counts = {name: m.dead_letters for name, m in final.members.items()}
    assert all(isinstance(c, int) for c in counts.values()), counts
    assert sum(counts.values()) > 0, counts
    check_exactly_once(rows + letters, topic, {p: total // PARTITIONS for p in range(PARTITIONS)})
    assert {r["value"] for r in rows} == {f"VALUE-{i}" for i in range(total) if value(i).startswith(b"value")}
    undecodable = sorted(i for i in range(total) if i % 11 == 5)
    poison = sorted(i for i in range(total) if i % 7 == 3 and i % 11 != 5)
    assert sorted(r["offset"] * PARTITIONS + r["partition"] for r in letters) == sorted(undecodable + poison)
    texts = sorted(r["value"] for r in letters if isinstance(r["value"], str))
    assert texts == sorted(f"poison-{i}" for i in poison)
    assert sum(isinstance(r["value"], dict) and "base64" in r["value"] for r in letters) == len(undecodable)
    for r in letters:  # the file sink writes each dead-letter record's headers
        h = dict(r["headers"])
        assert h["crkafka.error.stage"] == ("01-map" if isinstance(r["value"], str) else "00-deserialize")
        assert h["crkafka.error.type"] == ("ValueError" if isinstance(r["value"], str) else "UnicodeDecodeError")
        assert [h["crkafka.source.topic"], h["crkafka.source.partition"], h["crkafka.source.offset"]] == [
            topic,
            str(r["partition"]),
            str(r["offset"]),
        ]
