"""No member is left in CR_RESET_PENDING: an operator-driven region whose
member is revoked (a new topic matches its pattern) while the coordinator
is paused past the control channel's LOST_AFTER_S and the sources'
coordinator_timeout_s. Its forced reset request is made while the channel
is not joined; after the pause the member rejoins
with the same incarnation, which does not reset the region by itself. A
dropped request left the source paused in CR_RESET_PENDING with no records
flowing, so no trigger ever again: the region hung. Real coordinator, real
member processes, real broker."""

from __future__ import annotations

import os
import signal
import time

import pytest

from cr_consumer.runtime.member.coordinator_link import LOST_AFTER_S
from cr_consumer.testing.kafka_util import create_topic, produce

from support.region import make_region, published, wait_region, write_module

pytestmark = pytest.mark.slow

# Eager rebalancing: a new topic matching the pattern revokes every partition,
# also the ones this member fetched from (cooperative, the runtime's default,
# only adds the new topic's partitions: nothing to reset).
PATTERN_DRIVEN = """
from cr_consumer.runtime import KafkaSource, Pipeline

def build(ctx):
    return (Pipeline(KafkaSource(pattern=ctx.param("pattern"),
                                 options={"start_position": "earliest", "trigger_count": 100,
                                          "coordinator_timeout_s": 2.0},
                                 kafka={"partition.assignment.strategy": "range,roundrobin"}))
            .sink(ctx.file_sink()))
"""


def test_member_revoked_while_the_coordinator_is_paused_is_reset(bootstrap, names, tmp_path):
    prefix = names.topic("pat")
    first = create_topic(bootstrap, f"{prefix}-a", partitions=2)
    pipeline = write_module(tmp_path, "pattern_driven", PATTERN_DRIVEN)
    produce(bootstrap, first, [b"v%d" % i for i in range(1000)])
    out = tmp_path / "out"

    def of_first() -> set[tuple[int, int]]:
        return {(r["partition"], r["offset"]) for r in published(out) if r["topic"] == first}

    # member_timeout_s past the pause: the member stays known, so its rejoin is a
    # retry of the same incarnation and resets nothing by itself
    with make_region(
        tmp_path,
        bootstrap,
        pipeline,
        first,
        members=1,
        operator_driven=True,
        period_s=60.0,
        member_timeout_s=60.0,
        params={"pattern": f"^{prefix}-.*"},
    ) as region:
        # every trigger served: none left queued at the coordinator
        wait_region(region, lambda: len(of_first()) >= 1000, 40, "1000 records of the first topic published")
        pid = region.coordinator_proc.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(LOST_AFTER_S + 0.5)  # the member's channel counts itself not joined
            produce(bootstrap, first, [b"v%d" % i for i in range(1000, 1400)])  # fetched (triggers dropped) ...
            time.sleep(1.0)
            create_topic(bootstrap, f"{prefix}-b", partitions=2)  # ... then revoked: CR_RESET_PENDING
            # the source gives up setting the group's reset-pending flag
            # (coordinator_timeout_s) and asks for a reset while not joined
            time.sleep(5.0)
        finally:
            os.kill(pid, signal.SIGCONT)
        produce(bootstrap, first, [b"v%d" % i for i in range(1400, 4000)])
        # the tail below the last trigger may wait
        wait_region(
            region, lambda: len(of_first()) >= 3600, 60, "3600 records of the first topic published", interval=0.2
        )
        status = region.wait_until(
            lambda s: (
                s.phase == "RUNNING"
                and all(not (m.kafka is not None and m.kafka.rebalancing) for m in s.members.values())
            ),
            30,
        )
        assert status.reset.resets >= 2
    offsets = sorted(of_first())
    assert len(offsets) == len(set(offsets))
