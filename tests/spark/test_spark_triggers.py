"""Queries that stop by themselves: trigger(availableNow=True) and trigger(once=True).

AvailableNow reads what the partitions held when the run started, in batches
under maxOffsetsPerTrigger, commits every batch's end to the group (the last
one included) and stops; the next run from the same checkpoint location reads
what arrived since. Once reads the whole backlog in one batch and commits it.
"""

from __future__ import annotations

import collections
import threading

import pytest

from cr_consumer.testing.kafka_util import committed_offsets, create_topic, produce

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark"), pytest.mark.timeout(600)]

#: Bound on one run that stops by itself (a group join, a few batches, the stop).
RUN_TIMEOUT_S = 240


class Output:
    """The rows a foreachBatch sink saw, the batch ids it ran, and a hook run inside the first batch."""

    def __init__(self, first_batch_hook=None) -> None:
        self.rows: collections.Counter = collections.Counter()
        self.batches: list[int] = []
        self._hook = first_batch_hook
        self._lock = threading.Lock()

    def __call__(self, df, batch_id) -> None:
        rows = df.select("partition", "offset").collect()
        with self._lock:
            self.batches.append(batch_id)
            self.rows.update((r["partition"], r["offset"]) for r in rows)
            hook, self._hook = self._hook, None
        if hook is not None:
            hook()


def start_query(spark, bootstrap, coordinator, topic, group, checkpoint, sink, **trigger):
    return (
        spark.readStream.format("crkafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.group.id", group)
        .option("subscribe", topic)
        .option("coordinator", coordinator)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 700)
        .option("kafka.session.timeout.ms", 6000)
        .option("kafka.heartbeat.interval.ms", 1000)
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**trigger)
        .start()
    )


def run_until_stopped(spark, bootstrap, coordinator, topic, group, checkpoint, sink, **trigger):
    query = start_query(spark, bootstrap, coordinator, topic, group, checkpoint, sink, **trigger)
    assert query.awaitTermination(RUN_TIMEOUT_S), "the query did not stop by itself"
    assert query.exception() is None, query.exception()


def offsets_of(counts: dict[int, int], since: dict[int, int] | None = None) -> set[tuple[int, int]]:
    since = since or {}
    return {(p, o) for p, n in counts.items() for o in range(since.get(p, 0), n)}


def test_available_now_reads_the_backlog_in_batches_commits_them_and_stops(
    spark, bootstrap, coordinator, names, tmp_path
):
    topic = create_topic(bootstrap, names.topic(), partitions=3)
    group = names.group()
    checkpoint = tmp_path / "checkpoint"
    produce(bootstrap, topic, [b"a%d" % i for i in range(3000)])  # 1000 per partition

    # records that arrive during the run (after its target was taken) wait for the next run
    first = Output(first_batch_hook=lambda: produce(bootstrap, topic, [b"late%d" % i for i in range(300)]))
    run_until_stopped(spark, bootstrap, coordinator, topic, group, checkpoint, first, availableNow=True)
    assert len(first.batches) > 1, "maxOffsetsPerTrigger splits the backlog into batches"
    assert sum(first.rows.values()) == len(first.rows) == 3000, "duplicates"
    assert set(first.rows) == offsets_of({p: 1000 for p in range(3)}), "gaps"
    # the last batch's end reached the group, though Spark delivers no commit() for it
    assert committed_offsets(bootstrap, group, topic) == {p: 1000 for p in range(3)}

    produce(bootstrap, topic, [b"b%d" % i for i in range(600)])  # 200 more per partition
    second = Output()
    run_until_stopped(spark, bootstrap, coordinator, topic, group, checkpoint, second, availableNow=True)
    assert min(second.batches) > max(first.batches)
    assert sum(second.rows.values()) == len(second.rows) == 900, "duplicates"
    assert set(second.rows) == offsets_of({p: 1300 for p in range(3)}, since={p: 1000 for p in range(3)})
    assert committed_offsets(bootstrap, group, topic) == {p: 1300 for p in range(3)}


def test_available_now_run_failed_mid_way_is_finished_by_the_next_run(spark, bootstrap, coordinator, names, tmp_path):
    """A run that fails in its second batch (offset log one batch ahead of the commit log,
    as after a driver's kill) is finished by the next run: the batch is replayed, every
    record is in the output once, and the group's commit is the end."""
    from pyspark.errors import StreamingQueryException

    topic = create_topic(bootstrap, names.topic(), partitions=2)
    group = names.group()
    checkpoint = tmp_path / "checkpoint"
    produce(bootstrap, topic, [b"a%d" % i for i in range(2000)])  # 1000 per partition
    committed: list[tuple[int, int]] = []

    def failing_sink(df, batch_id):
        if batch_id == 1:
            raise RuntimeError("the sink fails in the run's second batch")
        committed.extend((r["partition"], r["offset"]) for r in df.select("partition", "offset").collect())

    query = start_query(spark, bootstrap, coordinator, topic, group, checkpoint, failing_sink, availableNow=True)
    with pytest.raises(StreamingQueryException, match="second batch"):
        query.awaitTermination(RUN_TIMEOUT_S)
    assert 0 < len(committed) < 2000

    rest = Output()
    run_until_stopped(spark, bootstrap, coordinator, topic, group, checkpoint, rest, availableNow=True)
    assert min(rest.batches) == 1, "the failed batch is replayed under its batch id"
    union = collections.Counter(committed) + rest.rows
    assert sum(union.values()) == len(union) == 2000, "duplicates"
    assert set(union) == offsets_of({p: 1000 for p in range(2)}), "gaps"
    assert committed_offsets(bootstrap, group, topic) == {p: 1000 for p in range(2)}


def test_trigger_once_reads_the_whole_backlog_in_one_batch(spark, bootstrap, coordinator, names, tmp_path):
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    group = names.group()
    produce(bootstrap, topic, [b"a%d" % i for i in range(2000)])  # 1000 per partition
    out = Output()
    run_until_stopped(spark, bootstrap, coordinator, topic, group, tmp_path / "checkpoint", out, once=True)
    assert out.batches == [0], "one batch, whatever maxOffsetsPerTrigger says"
    assert sum(out.rows.values()) == len(out.rows) == 2000
    assert set(out.rows) == offsets_of({p: 1000 for p in range(2)})
