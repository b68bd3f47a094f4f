"""The crkafka source in a live query: exactly once, commits that follow Spark, idle commits."""

from __future__ import annotations

import collections
import threading
import time

import pytest

from cr_consumer.testing.kafka_util import committed_offsets, create_topic, produce

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark"), pytest.mark.timeout(600)]


def group_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """Committed offsets as a separate admin client sees them."""
    return committed_offsets(bootstrap, group, topic)


def wait_for(predicate, timeout_s: float, what: str, query=None):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if query is not None and query.exception() is not None:
            raise AssertionError(f"query failed while waiting for {what}: {query.exception()}")
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


@pytest.mark.parametrize("client", ["librdkafka", "kafka-python"])
def test_query_consumes_exactly_once_and_commits_each_batch(spark, bootstrap, coordinator, names, tmp_path, client):
    topic = create_topic(bootstrap, names.topic(), partitions=3)
    group = names.group()
    n = 6000
    produce(bootstrap, topic, [f"r{i}".encode() for i in range(n)])
    seen: collections.Counter = collections.Counter()
    checks: list[tuple[int, dict, dict]] = []  # (batch id, committed before the batch, completed before it)
    lock = threading.Lock()

    def sink(df, batch_id):
        committed = group_offsets(bootstrap, group, topic)
        with lock:
            completed = {}
            for p, o in seen:
                completed[p] = max(completed.get(p, 0), o + 1)
            checks.append((batch_id, committed, completed))
        rows = df.select("partition", "offset").collect()
        with lock:
            seen.update((r["partition"], r["offset"]) for r in rows)

    query = (
        spark.readStream.format("crkafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.group.id", group)
        .option("subscribe", topic)
        .option("coordinator", coordinator)
        .option("members", 2)
        .option("kafka.client", client)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 1500)
        .option("kafka.session.timeout.ms", 6000)
        .option("kafka.heartbeat.interval.ms", 1000)
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        wait_for(lambda: sum(seen.values()) >= n, 200, f"{n} records", query)
        per_partition = {p: n // 3 for p in range(3)}
        # idle input: the last batch's end is committed without a new batch
        wait_for(lambda: group_offsets(bootstrap, group, topic) == per_partition, 60, "the idle commit", query)
    finally:
        query.stop()
    assert query.exception() is None
    # query stop = SIGTERM in the source runner: the members close (leaving the
    # group) and unregister from the coordinator
    from coordinator.client import CoordinatorClient
    from cr_consumer.spark.control import coordinator_group, query_of_checkpoint

    query_id = query_of_checkpoint(tmp_path / "checkpoint")
    assert query_id, "the offset log records the query id"
    with CoordinatorClient(coordinator, timeout=5.0) as client:
        wait_for(lambda: client.members(coordinator_group(group, query_id)) == [], 60, "the members to leave")
    assert sum(seen.values()) == n, "duplicates"
    assert len(seen) == n, "duplicates"
    assert set(seen) == {(p, o) for p in range(3) for o in range(n // 3)}, "gaps"
    # Kafka's committed offsets never run ahead of the batches the sink completed,
    # and (commit lags one trigger) equal them whenever a batch starts
    behind = 0
    for batch_id, committed, completed in checks:
        for p, off in committed.items():
            assert off <= completed.get(p, 0), f"batch {batch_id}: committed {committed} ahead of completed {completed}"
        behind += committed != completed
    assert behind <= 1, f"committed offsets lagged the completed batches at {behind} batch starts: {checks}"
