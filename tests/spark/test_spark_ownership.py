"""A query stopped with a batch in flight, and restarted from its offset log (or
never): across every query of the group, each record is in exactly one output.

The queries are driven as Spark drives the source (``support/spark_like.py``),
with the default consumer settings; the rules are ``cr_consumer/spark/ownership.py``."""

from __future__ import annotations

import json
import time

from cr_consumer.spark.options import parse_options
from cr_consumer.testing.kafka_util import committed_offsets, create_topic, produce

from support.spark_like import SparkLikeQuery

N_PARTITIONS = 4


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


def _wait(cond, timeout_s, what, *queries):
    deadline = time.monotonic() + timeout_s
    while not cond():
        for q in queries:
            assert q.error is None, f"{q.name}: {q.error!r}"
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _stop_in_flight(query: SparkLikeQuery) -> None:
    query.hold_sink()
    assert query.held.wait(60), f"{query.name} planned no batch"
    query.close()
    assert query.log[2] is False, f"{query.name}'s last batch was not in flight at its stop"


def _exactly_once(outputs, per_partition: int) -> None:
    union = sum(outputs, start=type(outputs[0])())
    dups = sorted(k for k, c in union.items() if c > 1)
    assert not dups, f"read twice across the queries: {dups[:10]}"
    expected = {(p, o) for p in range(N_PARTITIONS) for o in range(per_partition)}
    assert set(union) == expected, f"missing: {sorted(expected - set(union))[:10]}"


def test_a_restart_with_its_partitions_back_replays_the_batch_in_flight(bootstrap, coordinator, names):
    topic = create_topic(bootstrap, names.topic(), partitions=N_PARTITIONS)
    group = names.group()
    produce(bootstrap, topic, [b"a%d" % i for i in range(N_PARTITIONS * 500)])
    first = SparkLikeQuery(_options(bootstrap, topic, group, coordinator, "earliest"), "run-1")
    second = first.restarted("run-2")
    try:
        first.thread.start()
        _wait(lambda: first.read_count() > 0, 90, "the first run's output", first)
        _stop_in_flight(first)
        in_flight_start = first.log[0]
        second = first.restarted("run-2")
        second.thread.start()
        _wait(
            lambda: first.read_count() + second.read_count() >= N_PARTITIONS * 500,
            120,
            "every record in the two runs' outputs",
            second,
        )
        _wait(
            lambda: committed_offsets(bootstrap, group, topic) == {p: 500 for p in range(N_PARTITIONS)},
            60,
            "the commits",
            second,
        )
    finally:
        first.close()
        second.close()
    # the restart held every partition: it replayed the whole batch in flight, none of it given up
    assert second.planner.stats["replayed_batches"] == 1
    assert second.planner.stats["replay_rows_given_up"] == 0
    assert sum(in_flight_start.positions.values()) < N_PARTITIONS * 500
    _exactly_once([first.output, second.output], 500)


def test_a_restart_after_another_query_read_its_batch_in_flight_reads_none_of_it(bootstrap, coordinator, names):
    topic = create_topic(bootstrap, names.topic(), partitions=N_PARTITIONS)
    group = names.group()
    produce(bootstrap, topic, [b"a%d" % i for i in range(N_PARTITIONS * 500)])
    a1 = SparkLikeQuery(_options(bootstrap, topic, group, coordinator, "earliest"), "a-run-1")
    b = SparkLikeQuery(_options(bootstrap, topic, group, coordinator, "committed"), "b")
    a2 = a1.restarted("a-run-2")
    try:
        a1.thread.start()
        _wait(lambda: a1.read_count() > 0, 90, "the first query's output", a1)
        b.thread.start()
        _wait(lambda: b.planner.members and b.planner.members[0].wait_joined(0), 120, "the second query's join", a1, b)
        _stop_in_flight(a1)  # stopped: the second query takes every partition and reads the batch in flight
        _wait(lambda: a1.read_count() + b.read_count() >= N_PARTITIONS * 500, 120, "every record", b)
        a2 = a1.restarted("a-run-2")  # the first query again, from its offset log
        a2.thread.start()
        _wait(lambda: a2.planner.stats["replayed_batches"] == 1, 120, "the replay", a2, b)
        produce(bootstrap, topic, [b"b%d" % i for i in range(N_PARTITIONS * 200)])
        _wait(
            lambda: a1.read_count() + b.read_count() + a2.read_count() >= N_PARTITIONS * 700,
            180,
            "every record after the restart",
            a2,
            b,
        )
        _wait(
            lambda: committed_offsets(bootstrap, group, topic) == {p: 700 for p in range(N_PARTITIONS)},
            60,
            "the commits",
            a2,
            b,
        )
    finally:
        for q in (a1, b, a2):
            q.close()
    # the second query had read the whole batch in flight: the replay gave it up
    assert a2.planner.stats["replay_rows_given_up"] > 0
    _exactly_once([a1.output, b.output, a2.output], 700)


def test_a_stop_that_let_a_batch_finish_without_a_progress_event_commits_it_from_spark_s_commit_log(
    bootstrap, coordinator, names, tmp_path
):
    """``query.stop()`` lets a batch whose sink is committing finish (Spark's commit log has it),
    and its progress event may never come: the close reads Spark's commit log and commits it,
    but not a batch that is only planned."""
    from cr_consumer.spark.offsets import SourceOffset
    from cr_consumer.spark.planner import QueryPlanner
    from cr_consumer.spark.sink_notices import SinkNotice

    topic = create_topic(bootstrap, names.topic(), partitions=2)
    group = names.group()
    produce(bootstrap, topic, [b"a%d" % i for i in range(600)])
    planner = QueryPlanner(_options(bootstrap, topic, group, coordinator, "earliest"))
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}'
    (tmp_path / "offsets").mkdir()
    (tmp_path / "commits").mkdir()

    def spark_log(batch: int, end: SourceOffset, committed: bool) -> None:
        (tmp_path / "offsets" / str(batch)).write_text(f"v1\n{meta}\n{json.dumps(end.to_json())}\n")
        if committed:
            (tmp_path / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')

    try:
        ends = [SourceOffset.initial()]
        for batch in range(2):
            ends.append(planner.latest_offset(ends[-1], 100))
            spark_log(batch, ends[-1], committed=True)
            if batch == 0:  # the progress event of batch 0 tells the checkpoint location
                planner.sink_notice(SinkNotice(ends[-1], f"file:{tmp_path}"))
        # batch 1 is in Spark's commit log, but its progress event never came and no next
        # batch was planned; a later batch is in the offset log only (in flight at the stop)
        in_flight = SourceOffset(
            epoch=ends[-1].epoch + 1, positions={k: v + 10 for k, v in ends[-1].positions.items()}, query=ends[-1].query
        )
        spark_log(2, in_flight, committed=False)
        assert committed_offsets(bootstrap, group, topic) == {p: o for (_, p), o in ends[1].positions.items()}
    finally:
        planner.close()
    assert committed_offsets(bootstrap, group, topic) == {p: o for (_, p), o in ends[2].positions.items()}


def test_a_notice_of_an_end_never_handed_to_spark_commits_nothing(bootstrap, coordinator, names):
    """The notices' socket is reachable by any local process: a well-formed notice of the
    query's own id whose end the runner never planned is dropped, not committed."""
    from cr_consumer.spark.offsets import SourceOffset
    from cr_consumer.spark.planner import QueryPlanner
    from cr_consumer.spark.sink_notices import SinkNotice

    topic = create_topic(bootstrap, names.topic(), partitions=2)
    group = names.group()
    produce(bootstrap, topic, [b"a%d" % i for i in range(200)])
    planner = QueryPlanner(_options(bootstrap, topic, group, coordinator, "earliest"))
    try:
        end = planner.latest_offset(SourceOffset.initial(), 50)
        forged = SourceOffset(
            epoch=end.epoch + 5, positions={k: v + 40 for k, v in end.positions.items()}, query=end.query
        )
        planner.sink_notice(SinkNotice(forged, "file:/nonexistent"))
        assert committed_offsets(bootstrap, group, topic) == {}
        planner.sink_notice(SinkNotice(end))  # the end it planned: committed
        assert committed_offsets(bootstrap, group, topic) == {p: o for (_, p), o in end.positions.items()}
    finally:
        planner.close()
    assert committed_offsets(bootstrap, group, topic) == {p: o for (_, p), o in end.positions.items()}


def test_a_partition_revoked_while_a_batch_is_planned_is_left_out_of_that_batch(bootstrap, coordinator, names):
    """The revocation lands between the planner reading its assignment and handing the
    batch to Spark (here: the second query joins while the first asks for the high
    watermarks). The revoked partitions' handover saw the previous end, so the batch
    must not read them: their next owner starts at that end."""
    topic = create_topic(bootstrap, names.topic(), partitions=N_PARTITIONS)
    group = names.group()
    produce(bootstrap, topic, [b"a%d" % i for i in range(N_PARTITIONS * 300)])
    first = SparkLikeQuery(_options(bootstrap, topic, group, coordinator, "earliest"), "first", limit=200)
    second = SparkLikeQuery(_options(bootstrap, topic, group, coordinator, "committed"), "second")
    probe_ends = first.planner.probe.ends
    raced: list[tuple[set, set]] = []

    def ends_while_revoked(owned):
        if first.read_count() > 0 and not raced:  # once: the second query joins now
            produce(bootstrap, topic, [b"b%d" % i for i in range(N_PARTITIONS * 100)])
            second.thread.start()
            _wait(lambda: set(first.planner.assigned()) != set(owned), 120, "the revocation", second)
            raced.append((set(owned), set(first.planner.assigned())))
        return probe_ends(owned)

    first.planner.probe.ends = ends_while_revoked
    try:
        first.thread.start()
        _wait(lambda: raced, 180, "the revocation during planning", first, second)
        _wait(
            lambda: first.read_count() + second.read_count() >= N_PARTITIONS * 400, 180, "every record", first, second
        )
        _wait(
            lambda: committed_offsets(bootstrap, group, topic) == {p: 400 for p in range(N_PARTITIONS)},
            60,
            "the commits",
            first,
            second,
        )
    finally:
        first.close()
        second.close()
    owned, held = raced[0]
    assert owned - held, raced  # partitions were revoked during the planning
    _exactly_once([first.output, second.output], 400)
