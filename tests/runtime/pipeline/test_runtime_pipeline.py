"""Pipelines, operators, the keyed aggregate, sinks and the checkpoint store:
real files, real fsync/rename, no broker needed."""

from __future__ import annotations

import io
import json

import pytest

from cr_consumer.runtime import (
    CollectSink,
    ConsoleSink,
    DirectoryCheckpointStore,
    FileSink,
    KafkaSource,
    KeyedAggregate,
    Pipeline,
    Record,
    replace,
)
from cr_consumer.runtime.pipeline.checkpoint_store import CheckpointNotFound
from cr_consumer.runtime.pipeline.records import decode_json_value, to_json_line


def recs(partition: int, start: int, n: int, topic: str = "t") -> list[Record]:
    return [Record(topic, partition, o, 1000 + o, b"k%d" % (o % 3), b"v%d" % o) for o in range(start, start + n)]


def read_published(directory) -> list[dict]:
    out = []
    for path in sorted(directory.glob("*.jsonl")):
        out.extend(json.loads(line) for line in path.read_text().splitlines())
    return out


def test_map_filter_flat_map_chain_in_batches():
    sink = CollectSink()
    p = (
        Pipeline(KafkaSource(topics=["t"]))
        .map(lambda r: replace(r, value=r.value.upper()))
        .filter(lambda r: r.offset % 2 == 0)
        .flat_map(lambda r: [r, replace(r, key=b"copy")])
        .sink(sink)
    )
    p.process_batch(recs(0, 0, 10))
    assert [(r.offset, r.key) for r in sink.records][:4] == [(0, b"k0"), (0, b"copy"), (2, b"k2"), (2, b"copy")]
    assert len(sink.records) == 10
    assert all(r.value.startswith(b"V") for r in sink.records)
    assert p.operator_ids() == ["01-map", "02-filter", "03-flat_map", "04-collect_sink"]


def test_kafka_source_needs_topics_or_pattern():
    with pytest.raises(ValueError, match="exactly one"):
        KafkaSource()
    with pytest.raises(ValueError, match="exactly one"):
        KafkaSource(topics=["a"], pattern="a.*")


def test_pipeline_rejects_non_state_handler():
    class NotAHandler:
        def process_batch(self, records):
            return records

    with pytest.raises(TypeError, match="not a state handler"):
        Pipeline(KafkaSource(topics=["t"])).then(NotAHandler())


def test_json_line_bytes_utf8_and_base64_marker():
    line = to_json_line(Record("t", 1, 7, None, b"\xff\x00", "text"))
    doc = json.loads(line)
    assert doc == {
        "topic": "t",
        "partition": 1,
        "offset": 7,
        "timestamp": None,
        "key": {"base64": "/wA="},
        "value": "text",
    }
    assert decode_json_value(doc["key"]) == b"\xff\x00"
    assert json.loads(to_json_line(Record("t", 0, 0, 5, None, {"n": [1, b"x"]})))["value"] == {"n": [1, "x"]}
    with pytest.raises(TypeError, match="t/0@3"):
        to_json_line(Record("t", 0, 3, None, None, object()))


def test_aggregate_checkpoint_and_restore():
    agg = KeyedAggregate(lambda r: r.key.decode(), lambda s, r: s + int(r.value[1:]), 0)
    out = agg.process_batch(recs(0, 0, 6))
    assert [(r.key, r.value, r.offset) for r in out][:4] == [("k0", 0, 0), ("k1", 1, 1), ("k2", 2, 2), ("k0", 3, 3)]
    data = agg.checkpoint(1)
    assert json.loads(data)["version"] == 1
    agg.process_batch(recs(0, 6, 6))
    assert agg.state["k0"] == 0 + 3 + 6 + 9
    agg.reset(1, data)
    assert agg.state == {"k0": 3, "k1": 5, "k2": 7}
    agg.reset_to_initial_state()
    assert agg.state == {}
    with pytest.raises(ValueError, match="version"):
        agg.reset(1, b'{"version": 9, "kind": "aggregate", "entries": []}')


def test_aggregate_bytes_and_tuple_keys_roundtrip():
    agg = KeyedAggregate(lambda r: r.key, lambda s, r: (s or 0) + 1)
    agg.process_batch([Record("t", 0, 0, None, b"\xfe", 1), Record("t", 0, 1, None, b"ok", 1)])
    data = agg.checkpoint(3)
    agg.reset_to_initial_state()
    agg.reset(3, data)
    assert agg.state == {b"\xfe": 1, "ok": 1}  # valid UTF-8 bytes come back as str (documented)


def test_file_sink_publishes_only_completed_checkpoints(tmp_path):
    sink = FileSink(tmp_path, "m1")
    sink.process_batch(recs(0, 0, 5))
    sink.drain()
    data1 = sink.checkpoint(1)
    assert read_published(tmp_path) == []  # checkpointed but not complete: not visible
    assert not list(tmp_path.glob("*.jsonl"))
    sink.notify_checkpoint_complete(1)
    assert [r["offset"] for r in read_published(tmp_path)] == [0, 1, 2, 3, 4]
    assert (tmp_path / "m1-0000000001.jsonl").exists()
    assert read_published(tmp_path)[0]["member"] == "m1"
    # the next interval is written, then the region resets to checkpoint 1: discarded
    sink.process_batch(recs(0, 5, 5))
    sink.checkpoint(2)  # checkpoint 2 never completes
    sink.process_batch(recs(0, 10, 2))
    sink.reset(1, data1)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".pending")]
    assert [r["offset"] for r in read_published(tmp_path)] == [0, 1, 2, 3, 4]
    # replay after the reset
    sink.process_batch(recs(0, 5, 3))
    sink.checkpoint(3)
    sink.retire_checkpoint(3)  # retire publishes too
    assert [r["offset"] for r in read_published(tmp_path)] == list(range(8))
    sink.close()


def test_file_sink_reset_publishes_checkpointed_interval_after_crash(tmp_path):
    """Crash between checkpoint and publish: a new sink (new process) resetting to
    that checkpoint publishes the pending file exactly once, idempotently."""
    sink = FileSink(tmp_path, "m2")
    sink.process_batch(recs(1, 0, 4))
    data = sink.checkpoint(7)
    sink.process_batch(recs(1, 4, 4))  # open interval, lost in the crash
    del sink  # crash: no publish, no close

    again = FileSink(tmp_path, "m2")
    again.reset(7, data)
    again.reset(7, data)  # a second reset attempt of the same checkpoint
    assert [r["offset"] for r in read_published(tmp_path)] == [0, 1, 2, 3]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".pending")]


def test_file_sink_reset_to_initial_discards_and_ignores_other_members(tmp_path):
    other = FileSink(tmp_path, "other")
    other.process_batch(recs(2, 0, 2))
    other.drain()
    sink = FileSink(tmp_path, "me")
    sink.process_batch(recs(0, 0, 3))
    sink.checkpoint(1)
    sink.reset_to_initial_state()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) == 1
    assert names[0].startswith(".other-")
    assert read_published(tmp_path) == []


def test_file_sink_rejects_bad_member_name(tmp_path):
    with pytest.raises(ValueError, match="member name"):
        FileSink(tmp_path, "a/b")


def test_console_sink_writes_json_lines():
    buf = io.StringIO()
    ConsoleSink(buf).process_batch(recs(0, 0, 2))
    assert [json.loads(x)["offset"] for x in buf.getvalue().splitlines()] == [0, 1]


def test_directory_store_save_load_seal_retire(tmp_path):
    store = DirectoryCheckpointStore(tmp_path / "ck")
    assert store.latest() is None
    store.save(1, "01-source", b"a")
    store.save(1, "02-sink", b"b")
    assert store.latest() is None  # not sealed
    store.seal(1)
    store.save(2, "01-source", b"c")
    store.seal(2)
    store.save(2, "01-source", b"c2")  # overwrite is atomic
    assert store.load(2, "01-source") == b"c2"
    assert store.latest() == 2
    assert not list((tmp_path / "ck").rglob("*.tmp"))
    store.retire(1)
    assert store.seqs() == [2]
    with pytest.raises(CheckpointNotFound):
        store.load(1, "01-source")
    with pytest.raises(ValueError, match="operator id"):
        store.save(3, "../evil", b"x")


def test_batch_json_lines_equal_single_lines():
    from cr_consumer.runtime.pipeline.records import to_json_lines

    batch = [
        Record("t", 0, 1, 5, None, b"plain"),
        Record("t", 0, 2, None, b"\xff", b"\x00\xfe"),
        Record("u", 3, 3, 7, "k", {"a": [1, 2]}),
        Record("u", 3, 4, 8, 12, 3.5),
        Record("t", 0, 5, 9, b'q"uote', "line\nbreak"),
    ]
    assert to_json_lines(batch, ',"m":1') == "".join(to_json_line(r, ',"m":1') for r in batch)
    with pytest.raises(TypeError, match="u/3@9"):
        to_json_lines([Record("u", 3, 9, None, None, object())])


def test_batch_json_lines_of_consumer_records_equal_single_lines():
    """The fast path for the source's own records (plain bytes, one partition)
    writes exactly what the general path writes, and falls back for anything else."""
    from kafka.consumer.fetcher import ConsumerRecord

    from cr_consumer.kafka.client import KafkaRecord, TimestampType
    from cr_consumer.runtime.pipeline.records import _plain_batch_json, to_json_bytes, to_json_lines

    def rec(i, key=None, value=b"x" * 100, tp=("t", 3), ts=1_700_000_000_000):
        return ConsumerRecord(tp[0], tp[1], -1, 1000 + i, ts, 0, key, value, [], None, -1, 100, -1)

    batches = {
        "plain": ([rec(i) for i in range(50)], True),
        "plain keys": ([rec(i, key=b"k%d" % i) for i in range(5)], True),
        "printable ascii": ([rec(0, value=b" ~!#$%&'()*+,-./09:;<=>?@AZ[]^_`az{|}", key=b"")], True),
        "quote": ([rec(0), rec(1, value=b'a"b')], False),
        "backslash": ([rec(0, value=b"a\\b")], False),
        "newline and DEL": ([rec(0, value=b"a\nb\x7f")], False),
        "non-ASCII UTF-8": ([rec(0, value="\u00e9".encode())], False),
        "not UTF-8": ([rec(0, value=b"\xff\x00")], False),
        "None and bytes keys": ([rec(0), rec(1, key=b"k")], False),
        "None value": ([rec(0, value=None), rec(1)], False),
        "decoded value": ([rec(0, value={"a": 1}), rec(1)], False),
        "two partitions": ([rec(0), rec(1, tp=("t", 4))], False),
        "two topics": ([rec(0), rec(1, tp=("u", 3))], False),
        "no timestamp": ([rec(0, ts=None)], False),
        "str value": ([rec(0), rec(1, value="x")], False),
        "bytearray value (bytes-like)": ([rec(0), rec(1, value=bytearray(b"x"))], True),
        "memoryview key (bytes-like)": ([rec(0, key=b"k"), rec(1, key=memoryview(b"k"))], True),
        "str key": ([rec(0, key=b"k"), rec(1, key="k")], False),
        "str offset": ([rec(0), rec(1)._replace(offset="7")], False),
        "bool partition": ([rec(0, tp=("t", True))], False),
        "empty values": ([rec(i, value=b"") for i in range(3)], True),
        "bool offset (an int)": ([rec(0)._replace(offset=True)], True),
        "client seam records": (
            [
                KafkaRecord("t", 3, 1000 + i, 1_700_000_000_000, TimestampType.CREATE_TIME, None, b"v%d" % i)
                for i in range(5)
            ],
            True,
        ),
        "pipeline records": ([Record("t", 3, i, 5, b"k", b"v") for i in range(5)], True),
        "pipeline record without timestamp": ([Record("t", 3, 1, None, b"k", b"v")], False),
        "no value attribute": ([(1, 2)], False),
        "percent signs": ([rec(i, key=b"%s%d", value=b"100%", tp=("t%d%%", 3)) for i in range(3)], True),
    }
    for name, (batch, fast) in batches.items():
        try:
            expected = "".join(to_json_line(r, ',"m":1') for r in batch)
            assert (
                to_json_bytes(batch, ',"m":"%s%d"') == "".join(to_json_line(r, ',"m":"%s%d"') for r in batch).encode()
            )
        except (TypeError, AttributeError):
            expected = None  # the general path refuses it: so must the batch
        if expected is None:
            with pytest.raises((TypeError, AttributeError)):
                to_json_lines(batch, ',"m":1')
            with pytest.raises((TypeError, AttributeError)):
                to_json_bytes(batch, ',"m":1')
        else:
            assert to_json_lines(batch, ',"m":1') == expected, name
            assert to_json_bytes(batch, ',"m":1') == expected.encode(), name
        assert (_plain_batch_json(batch, ',"m":1') is not None) == fast, name
        for line in (expected or "").splitlines():
            json.loads(line)


def test_file_sink_syncs_large_intervals_while_writing(tmp_path, monkeypatch):
    """Past SYNC_EVERY_BYTES the open pending file is fdatasync'ed as it grows;
    the published output is the same, each record once, in order."""
    from cr_consumer.runtime.pipeline import sinks

    monkeypatch.setattr(sinks, "SYNC_EVERY_BYTES", 300)
    sink = FileSink(tmp_path, "m4")
    for start in range(0, 40, 4):
        sink.process_batch(recs(2, start, 4))
        assert sink._unsynced < 300
    sink.drain()
    data = sink.checkpoint(1)
    assert sink._unsynced == 0
    sink.process_batch(recs(2, 40, 4))  # the next interval, discarded by the reset
    sink.reset(1, data)
    assert [r["offset"] for r in read_published(tmp_path)] == list(range(40))
    sink.close()
