"""A member that dies between its checkpoint answer and the RESUME that publishes
its interval, and stays away past member_timeout_s while the region completes
checkpoints without it: a real coordinator process, real member processes, the
real broker. When it returns, the interval it sealed is published (its records
lie below the offsets the others continued from), so the output is exactly once."""

from __future__ import annotations

import time

import pytest

from cr_consumer.testing.kafka_util import create_topic, produce

from support.region import check_exactly_once, make_region, published, wait_rows, write_module

pytestmark = pytest.mark.slow

MEMBER_TIMEOUT_S = 3.0
#: The restarted member's start is held this long: past member_timeout_s and a
#: few checkpoint periods, so at least one checkpoint completes without it.
AWAY_S = MEMBER_TIMEOUT_S + 5.0

CRASH_BEFORE_PUBLISH = '''
import os, time
from pathlib import Path
from cr_consumer.runtime import FileSink, KafkaSource, Pipeline

class CrashBeforePublish(FileSink):
    """member-0, once: dies (kill -9 style) at the RESUME of a checkpoint whose
    interval holds records, after it answered that checkpoint, before publishing."""
    def __init__(self, directory, member, marker):
        super().__init__(directory, member)
        self.marker = marker
        self.written = {}
    def checkpoint(self, seq):
        self.written[seq] = self.records_written
        return super().checkpoint(seq)
    def notify_checkpoint_complete(self, seq):
        earlier = [w for s, w in self.written.items() if s < seq]
        fresh = self.written.get(seq, 0) - (max(earlier) if earlier else 0)
        if self.member == "member-0" and fresh > 0 and not self.marker.exists():
            self.marker.write_text(str(seq))
            os._exit(9)
        super().notify_checkpoint_complete(seq)

def build(ctx):
    state = Path(ctx.state_dir)
    crashed, held = state / "crashed-at", state / "held"
    if ctx.member == "member-0" and crashed.exists() and not held.exists():
        held.write_text("1")
        time.sleep(float(ctx.param("away_s")))  # the restarted process stays away
    return (Pipeline(KafkaSource(topics=[ctx.param("topic")], options={"start_position": "earliest"}))
            .sink(CrashBeforePublish(Path(ctx.output_dir), ctx.member, crashed)))
'''


def test_member_away_past_timeout_after_its_checkpoint_answer_loses_nothing(bootstrap, names, tmp_path):
    topic = create_topic(bootstrap, names.topic(), partitions=4)
    pipeline = write_module(tmp_path, "crash_before_publish", CRASH_BEFORE_PUBLISH)
    state = tmp_path / "state"
    n = 0

    def more(count: int) -> None:  # round-robin over the 4 partitions
        nonlocal n
        produce(bootstrap, topic, [b"value-%d" % i for i in range(n, n + count)])
        n += count

    more(2000)
    with make_region(
        tmp_path,
        bootstrap,
        pipeline,
        topic,
        members=3,
        member_timeout_s=MEMBER_TIMEOUT_S,
        params={"topic": topic, "away_s": str(AWAY_S)},
    ) as region:
        deadline = time.monotonic() + 60
        while not (state / "crashed-at").exists():  # records keep coming until member-0 has crashed
            assert time.monotonic() < deadline, region.status()
            more(200)
            time.sleep(0.3)
        crashed_at = int((state / "crashed-at").read_text())
        # the region completes a checkpoint without member-0, then member-0 returns
        region.wait_until(lambda s: "member-0" not in s.members and (s.last_consistent or 0) > crashed_at, 30)
        more(2000)
        region.wait_until(lambda s: "member-0" in s.members and s.phase == "RUNNING", 40)
        wait_rows(tmp_path / "out", n, 60, region)
        time.sleep(1.0)  # a few more checkpoints: nothing may be published twice later
        rows = published(tmp_path / "out")
    log = (state / "logs" / "member-0.log").read_text()
    assert "go back to its own checkpoint" in log  # the scenario happened: reset to its own, older checkpoint
    assert (tmp_path / "out" / f"member-0-{crashed_at:010d}.jsonl").exists()
    per_partition = {p: sum(1 for i in range(n) if i % 4 == p) for p in range(4)}
    check_exactly_once(rows, topic, per_partition)
