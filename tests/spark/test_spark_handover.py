"""Two queries in one consumer group (two planners, each driven like Spark drives
its source): the group splits the partitions, and when a rebalance moves a
partition from one query to the other nothing is lost or duplicated across the
two outputs: the giver commits its planned ranges before the taker's assignment
completes, and the taker starts at that commit. The first query then stops for
good with a batch in flight, and the second reads that batch. Default consumer
settings throughout."""

from __future__ import annotations

import time

from cr_consumer.spark.options import parse_options
from cr_consumer.testing.kafka_util import committed_offsets, create_topic, produce

from support.spark_like import SparkLikeQuery

N_PARTITIONS = 4
PER_PARTITION = 1500


def _options(bootstrap, topic, group, coordinator, starting):
    return parse_options(
        {
            "kafka.bootstrap.servers": bootstrap,
            "kafka.group.id": group,
            "subscribe": topic,
            "coordinator": coordinator,
            "startingOffsets": starting,
        }
    )


def test_two_queries_in_one_group_hand_partitions_over_exactly_once(bootstrap, coordinator, names):
    topic = create_topic(bootstrap, names.topic(), partitions=N_PARTITIONS)
    group = names.group()
    produce(bootstrap, topic, [b"a%d" % i for i in range(N_PARTITIONS * PER_PARTITION // 2)])
    first = SparkLikeQuery(_options(bootstrap, topic, group, coordinator, "earliest"), "query-a")
    second = SparkLikeQuery(_options(bootstrap, topic, group, coordinator, "committed"), "query-b")
    total = N_PARTITIONS * PER_PARTITION
    try:
        first.thread.start()
        deadline = time.monotonic() + 90
        while sum(first.output.values()) < total // 4:
            assert first.error is None, first.error
            assert time.monotonic() < deadline, "the first query read nothing"
            time.sleep(0.1)
        second.thread.start()  # joins the group: a rebalance moves partitions to it
        produce(bootstrap, topic, [b"b%d" % i for i in range(total // 2)])
        deadline = time.monotonic() + 180
        while sum(first.output.values()) + sum(second.output.values()) < total or not second.output:
            for q in (first, second):
                assert q.error is None, q.error
            assert time.monotonic() < deadline, (sum(first.output.values()), sum(second.output.values()))
            time.sleep(0.2)
        produce(bootstrap, topic, [b"c%d" % i for i in range(N_PARTITIONS * 100)])
        assert first.in_flight.wait(60), "the first query planned no batch of the last records"
        first.close()  # stops for good with a batch in flight: its partitions move to the second query
        assert first.log[2] is False, "the first query's last batch was not in flight at its stop"
        deadline = time.monotonic() + 120
        while sum(first.output.values()) + sum(second.output.values()) < total + N_PARTITIONS * 100:
            assert second.error is None, second.error
            assert time.monotonic() < deadline, (sum(first.output.values()), sum(second.output.values()))
            time.sleep(0.2)
        expected_commits = {p: PER_PARTITION + 100 for p in range(N_PARTITIONS)}
        deadline = time.monotonic() + 60
        while committed_offsets(bootstrap, group, topic) != expected_commits:
            assert time.monotonic() < deadline, committed_offsets(bootstrap, group, topic)
            time.sleep(0.2)
    finally:
        first.close()
        second.close()
    both = first.output + second.output
    dups = {k: c for k, c in both.items() if c > 1}
    assert not dups, f"read twice across the two queries: {sorted(dups)[:10]}"
    expected = {(p, o) for p in range(N_PARTITIONS) for o in range(PER_PARTITION + 100)}
    assert set(both) == expected, f"missing: {sorted(expected - set(both))[:10]}"
    assert first.output
    assert second.output
    # the first query held a rebalance until its in-flight batch was committed
    assert max(first.planner.members[0].handover_ms) > 0, first.planner.members[0].handover_ms
