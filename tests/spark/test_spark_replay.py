"""readBetweenOffsets' re-read: exactly the records of a batch's offset range."""

from __future__ import annotations

from cr_consumer.spark.offsets import SourceOffset
from cr_consumer.spark.options import parse_options
from cr_consumer.spark.replay import batch_ranges, read_range
from cr_consumer.testing.kafka_util import create_topic, produce


def test_replay_reads_exact_offset_range(bootstrap, names):
    topic = create_topic(bootstrap, names.topic(), partitions=2)
    produce(bootstrap, topic, [f"v{i}".encode() for i in range(40)])  # 20 per partition, offsets 0..19
    opts = parse_options({"kafka.bootstrap.servers": bootstrap, "group.id": names.group(),
                          "subscribe": topic, "coordinator": "tcp://127.0.0.1:1"})
    start = SourceOffset(epoch=1, positions={(topic, 0): 5})
    # partition 1 first appears in this batch, starting at offset 3
    end = SourceOffset(epoch=2, positions={(topic, 0): 12, (topic, 1): 9}, first={(topic, 1): 3})
    assert batch_ranges(start, end) == {(topic, 0): (5, 12), (topic, 1): (3, 9)}
    batches = read_range(opts, start, end, batch_rows=4)
    rows = [r for b in batches for r in b.to_pylist()]
    got = sorted((r["partition"], r["offset"]) for r in rows)
    assert got == [(0, o) for o in range(5, 12)] + [(1, o) for o in range(3, 9)]
    assert all(b.num_rows <= 4 for b in batches)
    # values are those produced: partition p holds values v(2*offset + p)
    assert all(r["value"] == f"v{2 * r['offset'] + r['partition']}".encode() for r in rows)
    # an empty batch reads nothing and opens no consumer
    assert read_range(opts, end, SourceOffset(epoch=3, positions=end.positions)) == []
