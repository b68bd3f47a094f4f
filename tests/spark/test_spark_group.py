"""The source group without Spark: a rebalance mid-stream resets the members to
the last handed-out end, and the batches stay exactly once."""

from __future__ import annotations

import collections
import os
import threading
import time

import pytest
from kafka import KafkaConsumer

from cr_consumer.spark.group import SourceGroup
from cr_consumer.spark.offsets import SourceOffset
from cr_consumer.spark.options import parse_options
from cr_consumer.testing.broker import ENV_BOOTSTRAP, EmbeddedBroker
from cr_consumer.testing.kafka_util import create_topic, produce


def test_rebalance_resets_to_last_end_without_gap_or_duplicate(bootstrap, coordinator, names):
    topic = create_topic(bootstrap, names.topic(), partitions=4)
    group_id = names.group()
    n = 8000
    produce(bootstrap, topic, [b"v%d" % i for i in range(n)])
    options = parse_options({
        "kafka.bootstrap.servers": bootstrap, "group.id": group_id, "subscribe": topic, "coordinator": coordinator,
        "members": "2", "startPosition": "beginning", "maxRecordsPerBatch": "400", "kafka.max.poll.records": "100",
        "kafka.session.timeout.ms": "6000", "kafka.heartbeat.interval.ms": "1000",
    })
    group = SourceGroup(options)
    seen: collections.Counter = collections.Counter()
    intruder_done = threading.Event()
    intruder_assigned = threading.Event()

    def intruder():
        # a third member joins (rebalance), holds partitions for a moment, leaves (rebalance)
        c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group_id, enable_auto_commit=False,
                          session_timeout_ms=6000, heartbeat_interval_ms=1000, auto_offset_reset="latest")
        try:
            deadline = time.monotonic() + 30
            while not c.assignment() and time.monotonic() < deadline:
                c.poll(timeout_ms=100, max_records=1)
            intruder_assigned.set()
            c.poll(timeout_ms=500, max_records=1)
        finally:
            c.close()
            intruder_done.set()

    start = SourceOffset.initial()
    thread = None
    try:
        deadline = time.monotonic() + 120
        while sum(seen.values()) < n or not intruder_done.is_set():
            assert time.monotonic() < deadline, f"stuck at {sum(seen.values())}/{n}, stats {group.stats}"
            batches, end = group.next_batch(start)
            for b in batches:
                seen.update(zip(b.column("partition").to_pylist(), b.column("offset").to_pylist()))
            if end != start:
                group.commit(start)  # Spark commits the previous end after planning the next
                # every batch covers exactly its offset range
                rows = collections.Counter(p for b in batches for p in b.column("partition").to_pylist())
                for (t, p), stop in end.positions.items():
                    assert rows.get(p, 0) == stop - end.start_of((t, p), start), (p, start, end)
            start = end
            if thread is None and sum(seen.values()) >= 1000:
                thread = threading.Thread(target=intruder, name="intruder")
                thread.start()
            time.sleep(0.02)
        assert intruder_assigned.is_set()
    finally:
        if thread is not None:
            thread.join(30)
        group.close()
    dups = {k: c for k, c in seen.items() if c > 1}
    assert not dups, f"duplicates: {list(dups)[:10]}"
    assert set(seen) == {(p, o) for p in range(4) for o in range(n // 4)}
    assert group.stats["resets"] >= 1, group.stats


def test_pattern_new_topic_and_every_batch_replays_identically(bootstrap, coordinator, names):
    """subscribePattern picks up a topic created mid-stream (its partitions enter the
    offset with a ``from`` entry), and re-reading any batch by its offset range
    (what readBetweenOffsets does after a crash) gives exactly the batch's records."""
    from cr_consumer.spark.replay import read_range

    prefix = names.topic("pat")
    first = create_topic(bootstrap, f"{prefix}-a", partitions=2)
    produce(bootstrap, first, [b"a%d" % i for i in range(600)])
    options = parse_options({
        "kafka.bootstrap.servers": bootstrap, "group.id": names.group(), "subscribePattern": f"{prefix}-.*",
        "coordinator": coordinator, "members": "2", "startPosition": "beginning", "maxRecordsPerBatch": "200",
        "kafka.max.poll.records": "100", "kafka.session.timeout.ms": "6000", "kafka.heartbeat.interval.ms": "1000",
    })
    group = SourceGroup(options)
    batches_seen: list[tuple[SourceOffset, SourceOffset, list]] = []
    total: collections.Counter = collections.Counter()
    start = SourceOffset.initial()
    second = None
    try:
        deadline = time.monotonic() + 120
        while sum(total.values()) < 1000:
            assert time.monotonic() < deadline, f"stuck at {sum(total.values())}/1000, stats {group.stats}"
            batches, end = group.next_batch(start)
            if end != start:
                rows = sorted((r["topic"], r["partition"], r["offset"]) for b in batches for r in b.to_pylist())
                total.update(rows)
                batches_seen.append((start, end, rows))
                group.commit(start)
            start = end
            if second is None and sum(total.values()) >= 600:
                second = create_topic(bootstrap, f"{prefix}-b", partitions=2)
                produce(bootstrap, second, [b"b%d" % i for i in range(400)])
            time.sleep(0.02)
    finally:
        group.close()
    assert not [k for k, c in total.items() if c > 1], "duplicates"
    assert {(t, p) for t, p, _ in total} == {(first, 0), (first, 1), (second, 0), (second, 1)}
    assert any((second, 0) in end.first or (second, 1) in end.first for _, end, _ in batches_seen)
    for s, e, rows in batches_seen:
        replayed = sorted((r["topic"], r["partition"], r["offset"]) for b in read_range(options, s, e) for r in b.to_pylist())
        assert replayed == rows, (s, e)


def _drive(group: SourceGroup, start: SourceOffset, *, min_epoch: int, seen: collections.Counter,
           timeout: float = 60) -> SourceOffset:
    """Plan batches the way Spark does (commit the previous end after planning
    the next) until a batch with records ends at ``min_epoch`` or later."""
    deadline = time.monotonic() + timeout
    while True:
        assert time.monotonic() < deadline, f"stuck at epoch {start.epoch}, stats {group.stats}"
        batches, end = group.next_batch(start)
        if end != start:
            group.commit(start)
        for b in batches:
            seen.update(zip(b.column("topic").to_pylist(), b.column("partition").to_pylist(),
                            b.column("offset").to_pylist()))
        start = end
        if batches and end.epoch >= min_epoch:
            return end
        time.sleep(0.02)


def test_new_query_reusing_the_group_id_is_not_refused_by_earlier_retirements(bootstrap, coordinator, names):
    """An earlier query with the same group.id retired checkpoints up to 5 in
    this coordinator (its epochs; here sent directly, as that query's members
    did, so the Kafka group is not restarted: tansu sometimes leaves a group
    without a leader when all its members leave and new ones join at once).
    A new query numbers its epochs from 0; when Spark re-plans from its epoch-1
    end, the members reset to it, merging checkpoint 1 through the coordinator,
    and are not refused."""
    from coordinator.client import CoordinatorClient

    topic = create_topic(bootstrap, names.topic(), partitions=2)
    produce(bootstrap, topic, [b"v%d" % i for i in range(400)])
    group_id = names.group()
    with CoordinatorClient(coordinator, timeout=5.0) as client:
        client.register(group_id, 0, "crkafka-0")
        client.retire_checkpoint(group_id, 5)
        client.unregister(group_id, "crkafka-0")
    options = parse_options({
        "kafka.bootstrap.servers": bootstrap, "group.id": group_id, "subscribe": topic, "coordinator": coordinator,
        "members": "2", "startPosition": "beginning", "maxRecordsPerBatch": "40", "kafka.max.poll.records": "20",
        "kafka.session.timeout.ms": "6000", "kafka.heartbeat.interval.ms": "1000",
    })
    group = SourceGroup(options)
    seen: collections.Counter = collections.Counter()
    again: collections.Counter = collections.Counter()
    try:
        first = _drive(group, SourceOffset.initial(), min_epoch=1, seen=seen)
        assert first.epoch <= 5 and first.query, first
        _drive(group, first, min_epoch=first.epoch + 2, seen=seen)
        _drive(group, first, min_epoch=first.epoch + 1, seen=again)  # re-planned from `first`: a reset
    finally:
        group.close()
    assert group.stats["resets"] == 1, group.stats
    assert not [k for k, c in again.items() if c > 1], "duplicates"
    per_partition = collections.defaultdict(list)
    for _, p, o in again:
        per_partition[p].append(o)
    # the re-planned batches start exactly at `first`'s positions, without gaps; a
    # partition `first` does not name yet (its member was still joining) starts at
    # the start position, beginning = 0
    for p, offsets in per_partition.items():
        begin = first.positions.get((topic, p), 0)
        assert sorted(offsets) == list(range(begin, begin + len(offsets))), (p, begin, sorted(offsets)[:5])


@pytest.fixture
def private_bootstrap(tmp_path):
    """A broker of this test's own (unless a real cluster is given): deleting a
    topic on tansu disturbs the consumer groups of the other tests sharing the
    worker's broker (their members were seen rejoining for a minute after it)."""
    address = os.environ.get(ENV_BOOTSTRAP)
    if address:
        yield address
        return
    with EmbeddedBroker(log_path=tmp_path / "tansu.log") as broker:
        yield broker.bootstrap


def test_deleted_topic_is_dropped_from_commits_and_commits_stay_bounded(private_bootstrap, coordinator, names):
    """After a subscribed topic is deleted, its partition stays in the source's
    offsets but leaves the Kafka commits: the other topic's committed offsets
    keep following the batches, and no commit holds Spark's thread long."""
    bootstrap = private_bootstrap
    from kafka import KafkaAdminClient

    from cr_consumer.spark.members import COMMIT_TIMEOUT_S
    from cr_consumer.testing.kafka_util import committed_offsets

    prefix = names.topic("del")
    kept = create_topic(bootstrap, f"{prefix}-a", partitions=2)
    doomed = create_topic(bootstrap, f"{prefix}-b", partitions=1)
    produce(bootstrap, kept, [b"a%d" % i for i in range(100)])
    produce(bootstrap, doomed, [b"b%d" % i for i in range(50)])
    group_id = names.group()
    options = parse_options({
        "kafka.bootstrap.servers": bootstrap, "group.id": group_id, "subscribePattern": f"{prefix}-.*",
        "coordinator": coordinator, "members": "2", "startPosition": "beginning",
        "kafka.session.timeout.ms": "6000", "kafka.heartbeat.interval.ms": "1000",
    })
    group = SourceGroup(options)
    seen: collections.Counter = collections.Counter()
    slowest = 0.0

    def step(start: SourceOffset) -> SourceOffset:
        nonlocal slowest
        batches, end = group.next_batch(start)
        if end != start:
            t0 = time.monotonic()
            group.commit(start)
            slowest = max(slowest, time.monotonic() - t0)
        for b in batches:
            seen.update(zip(b.column("topic").to_pylist(), b.column("offset").to_pylist()))
        time.sleep(0.02)
        return end

    start = SourceOffset.initial()
    try:
        deadline = time.monotonic() + 60
        while sum(seen.values()) < 150:
            assert time.monotonic() < deadline, f"stuck at {sum(seen.values())}/150, stats {group.stats}"
            start = step(start)
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            admin.delete_topics([doomed])
        finally:
            admin.close()
        produce(bootstrap, kept, [b"c%d" % i for i in range(100)])
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, (
                f"committed {committed_offsets(bootstrap, group_id, kept)} never reached the batches' "
                f"{start.positions}; stats {group.stats}")
            start = step(start)
            want = {p: o for (t, p), o in start.positions.items() if t == kept}
            if sum(want.values()) == 200 and committed_offsets(bootstrap, group_id, kept) == want:
                break
        assert (doomed, 0) in start.positions  # the source's offsets still hold it
    finally:
        group.close()
    assert slowest < COMMIT_TIMEOUT_S + 5, slowest


def test_new_topic_written_before_assignment_is_read_from_earliest(bootstrap, coordinator, names):
    """startPosition=end applies to the topics of the query's first start; a
    topic that the pattern matches later is read from its earliest offset, so
    records written into it before the members are assigned it are in the
    batches, each once."""
    prefix = names.topic("ne")
    old = create_topic(bootstrap, f"{prefix}-a", partitions=2)
    produce(bootstrap, old, [b"old%d" % i for i in range(6)], single_record_batches=True)
    options = parse_options({
        "kafka.bootstrap.servers": bootstrap, "group.id": names.group(), "subscribePattern": f"{prefix}-.*",
        "coordinator": coordinator, "members": "2", "startPosition": "end",
        "kafka.session.timeout.ms": "6000", "kafka.heartbeat.interval.ms": "1000",
    })
    group = SourceGroup(options)
    seen: collections.Counter = collections.Counter()
    start = SourceOffset.initial()
    new = None
    try:
        deadline = time.monotonic() + 90
        while sum(c for (t, _, _), c in seen.items() if t == new) < 50:
            assert time.monotonic() < deadline, f"stuck at {dict(seen)}, stats {group.stats}"
            batches, end = group.next_batch(start)
            if end != start:
                group.commit(start)
            for b in batches:
                seen.update(zip(b.column("topic").to_pylist(), b.column("partition").to_pylist(),
                                b.column("offset").to_pylist()))
            start = end
            seeked = {tp: off for op in group.members for tp, off in op.offsets.snapshot().items()}
            if new is None and len(seeked) == 2:  # the first start is done: both partitions seeked
                assert sorted(seeked.values()) == [3, 3]  # end: the old records are skipped
                new = create_topic(bootstrap, f"{prefix}-b", partitions=2)
                produce(bootstrap, new, [b"b%d" % i for i in range(40)])
                assigned = {tp.topic for op in group.members for tp in op.offsets.assigned()}
                assert assigned == {old}, "the new topic's records must be written before its assignment"
                produce(bootstrap, new, [b"c%d" % i for i in range(10)])
            time.sleep(0.02)
    finally:
        group.close()
    assert not [k for k, c in seen.items() if c > 1], "duplicates"
    assert {(p, o) for t, p, o in seen if t == new} == {(p, o) for p in range(2) for o in range(25)}
    assert not [k for k in seen if k[0] == old]
