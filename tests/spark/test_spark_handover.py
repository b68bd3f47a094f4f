"""Two queries in one consumer group (two planners, each driven like Spark drives
its source): the group splits the partitions, and when a rebalance moves a
partition from one query to the other nothing is lost or duplicated across the
two outputs: the giver commits its planned ranges before the taker's assignment
completes, and the taker starts at that commit."""

from __future__ import annotations

import collections
import threading
import time

from cr_consumer.spark.executor import read_range
from cr_consumer.spark.offsets import SourceOffset
from cr_consumer.spark.options import parse_options
from cr_consumer.spark.planner import QueryPlanner, batch_ranges
from cr_consumer.testing.kafka_util import committed_offsets, create_topic, produce

N_PARTITIONS = 4
PER_PARTITION = 1500


class SparkLikeQuery:
    """latestOffset -> read the ranges (the executors' work) -> commit the previous end, in a loop."""

    def __init__(self, options, name: str) -> None:
        self.options = options
        self.planner = QueryPlanner(options)
        self.seen: collections.Counter = collections.Counter()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=name)

    def _run(self) -> None:
        start = SourceOffset.initial()
        try:
            while not self.stop.is_set():
                end = self.planner.latest_offset(start, 300)
                for rng in batch_ranges(start, end, None):
                    for batch in read_range(self.options, rng):
                        self.seen.update(zip(batch.column("partition").to_pylist(), batch.column("offset").to_pylist()))
                if end != start:
                    time.sleep(0.3)  # the sink's work: a batch is in flight when a rebalance comes
                    self.planner.commit(start)  # Spark commits end[N] after planning N+1
                else:
                    time.sleep(0.05)
                start = end
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)
        self.planner.close()


def _options(bootstrap, topic, group, coordinator, starting):
    return parse_options({"kafka.bootstrap.servers": bootstrap, "kafka.group.id": group, "subscribe": topic,
                          "coordinator": coordinator, "startingOffsets": starting,
                          "kafka.session.timeout.ms": "6000", "kafka.heartbeat.interval.ms": "1000"})


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
        while sum(first.seen.values()) < total // 4:
            assert first.error is None, first.error
            assert time.monotonic() < deadline, "the first query read nothing"
            time.sleep(0.1)
        second.thread.start()  # joins the group: a rebalance moves partitions to it
        produce(bootstrap, topic, [b"b%d" % i for i in range(total // 2)])
        deadline = time.monotonic() + 180
        while sum(first.seen.values()) + sum(second.seen.values()) < total or not second.seen:
            for q in (first, second):
                assert q.error is None, q.error
            assert time.monotonic() < deadline, (sum(first.seen.values()), sum(second.seen.values()))
            time.sleep(0.2)
        first.close()  # leaves the group: its partitions move to the second query
        produce(bootstrap, topic, [b"c%d" % i for i in range(N_PARTITIONS * 100)])
        deadline = time.monotonic() + 120
        while sum(first.seen.values()) + sum(second.seen.values()) < total + N_PARTITIONS * 100:
            assert second.error is None, second.error
            assert time.monotonic() < deadline, (sum(first.seen.values()), sum(second.seen.values()))
            time.sleep(0.2)
        expected_commits = {p: PER_PARTITION + 100 for p in range(N_PARTITIONS)}
        deadline = time.monotonic() + 60  # idle: one empty batch delivers the last commit
        while committed_offsets(bootstrap, group, topic) != expected_commits:
            assert time.monotonic() < deadline, committed_offsets(bootstrap, group, topic)
            time.sleep(0.2)
    finally:
        first.close()
        second.close()
    both = first.seen + second.seen
    dups = {k: c for k, c in both.items() if c > 1}
    assert not dups, f"read twice across the two queries: {sorted(dups)[:10]}"
    expected = {(p, o) for p in range(N_PARTITIONS) for o in range(PER_PARTITION + 100)}
    assert set(both) == expected, f"missing: {sorted(expected - set(both))[:10]}"
    assert first.seen and second.seen
    # the first query held a rebalance until its in-flight batch was committed
    assert max(first.planner.members[0].handover_ms) > 0, first.planner.members[0].handover_ms
