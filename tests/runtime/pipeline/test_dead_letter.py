"""The pipeline's error policies: fail (the default) and dead-letter, stage by stage, with the
source's undecodable records, the dead-letter headers, the counts and their metric. Real
operators and sinks, no broker needed."""

from __future__ import annotations

import json

import pytest
from prometheus_client import generate_latest

from cr_consumer.kafka.client import KafkaRecord
from cr_consumer.operator.config import MalformedPolicy
from cr_consumer.operator.process_thread import Decoder, Undecodable
from cr_consumer.runtime import CollectSink, FileSink, KafkaSource, Operator, Pipeline, Record, RecordOperator, replace
from cr_consumer.runtime.pipeline import dead_letter
from cr_consumer.runtime.pipeline.dead_letter import (
    DESERIALIZE_STAGE,
    HEADER_MESSAGE,
    HEADER_OFFSET,
    HEADER_PARTITION,
    HEADER_STAGE,
    HEADER_TOPIC,
    HEADER_TYPE,
    MAX_ERROR_TYPES,
    MAX_MESSAGE_CHARS,
    OTHER_TYPE,
)
from cr_consumer.runtime.pipeline.records import to_json_bytes, to_json_line

from support.metrics import promtool_problems

SOURCE = KafkaSource(topics=["t"])


def recs(n: int, partition: int = 0, topic: str = "t") -> list[Record]:
    """Values ``b"0"``, ``b"1"``, ...; every value divisible by 3 is poison (``b"x<n>"``)."""
    return [
        Record(topic, partition, o, 1000 + o, b"k%d" % o, b"x%d" % o if o % 3 == 0 else b"%d" % o, (("h", b"v"),))
        for o in range(n)
    ]


def parse(r):
    return replace(r, value=int(r.value))  # ValueError on b"x..."


def headers(record) -> dict[str, str]:
    return {name: value.decode() for name, value in record.headers if name.startswith("crkafka.")}


def test_map_poison_records_go_to_the_dead_letter_sink_with_their_headers():
    out, dlq = CollectSink(), CollectSink("dlq")
    p = Pipeline(SOURCE, dead_letter=dlq).map(parse).sink(out)
    p.process_batch(recs(10))
    assert [(r.offset, r.value) for r in out.records] == [(o, o) for o in range(10) if o % 3]
    assert [r.offset for r in dlq.records] == [0, 3, 6, 9]
    letter = dlq.records[1]
    assert (letter.topic, letter.partition, letter.offset, letter.timestamp) == ("t", 0, 3, 1003)
    assert (letter.key, letter.value) == (b"k3", b"x3")  # the record as the failing stage got it
    assert letter.headers[0] == ("h", b"v")  # its own headers first
    assert headers(letter) == {
        HEADER_STAGE: "01-map",
        HEADER_TYPE: "ValueError",
        HEADER_MESSAGE: "invalid literal for int() with base 10: b'x3'",
        HEADER_TOPIC: "t",
        HEADER_PARTITION: "0",
        HEADER_OFFSET: "3",
    }
    assert dict(p.dead_letter_counts()) == {("01-map", "ValueError"): 4}


def test_the_default_policy_fails_the_batch():
    out = CollectSink()
    p = Pipeline(SOURCE).map(parse).sink(out)
    with pytest.raises(ValueError, match="x0"):
        p.process_batch(recs(10))
    assert out.records == []
    assert p.operator_ids() == ["01-map", "02-collect_sink"]  # no dead-letter sink among the handlers
    assert dict(p.dead_letter_counts()) == {}


def test_filter_flat_map_and_a_record_operator_reject_record_by_record():
    class Explode(RecordOperator):
        kind = "explode"

        def process_record(self, record):
            yield record
            if record.offset == 4:
                raise RuntimeError("half emitted")  # nothing of this record is output
            yield replace(record, key=b"copy")

    out, dlq = CollectSink(), CollectSink("dlq")
    p = (
        Pipeline(SOURCE, dead_letter=dlq)
        .filter(lambda r: int(r.value) % 2 == 0)  # rejects 0, 3, 6, 9; drops the odd ones
        .flat_map(lambda r: [r] if r.offset != 2 else [r, 1 / 0])
        .then(Explode())
        .sink(out)
    )
    p.process_batch(recs(10))
    assert [(r.offset, r.key) for r in out.records] == [(8, b"k8"), (8, b"copy")]
    assert [(r.offset, headers(r)[HEADER_STAGE], headers(r)[HEADER_TYPE]) for r in dlq.records] == [
        (0, "01-filter", "ValueError"),
        (3, "01-filter", "ValueError"),
        (6, "01-filter", "ValueError"),
        (9, "01-filter", "ValueError"),
        (2, "02-flat_map", "ZeroDivisionError"),
        (4, "03-explode", "RuntimeError"),
    ]
    assert p.operator_ids() == ["01-filter", "02-flat_map", "03-explode", "04-collect_sink", "05-dlq"]


def test_aggregate_keeps_its_state_when_a_record_is_rejected():
    out, dlq = CollectSink(), CollectSink("dlq")

    def key(r):
        if r.offset == 5:
            raise KeyError("no key")
        return r.partition

    p = Pipeline(SOURCE, dead_letter=dlq).aggregate(key, lambda total, r: total + int(r.value), 0).sink(out)
    p.process_batch(recs(8))
    assert [r.value for r in out.records] == [1, 3, 7, 14]  # 1, +2, +4, +7 (0, 3, 6 poison; 5 has no key)
    assert p.operators[0].state == {0: 14}
    assert [(r.offset, headers(r)[HEADER_TYPE]) for r in dlq.records] == [
        (0, "ValueError"),
        (3, "ValueError"),
        (5, "KeyError"),
        (6, "ValueError"),
    ]


def test_a_batch_operator_fails_the_batch_even_with_a_dead_letter_sink():
    class Whole(Operator):
        def process_batch(self, records):
            raise OSError("disk full")

    dlq = CollectSink("dlq")
    p = Pipeline(SOURCE, dead_letter=dlq).map(parse).then(Whole())
    with pytest.raises(OSError, match="disk full"):
        p.process_batch(recs(5))
    assert dlq.records == []


def test_a_failing_dead_letter_sink_fails_the_batch():
    class Broken(Operator):
        def process_batch(self, records):
            raise OSError("dead-letter topic unavailable")

    out = CollectSink()
    p = Pipeline(SOURCE, dead_letter=Broken()).map(parse).sink(out)
    with pytest.raises(OSError, match="unavailable"):
        p.process_batch(recs(5))
    assert dict(p.dead_letter_counts()) == {}  # nothing counted that the sink did not take


def test_undecodable_records_of_the_source_are_dead_lettered():
    raw = [KafkaRecord("t", 2, o, 50 + o, 0, None, b"%d" % o if o % 2 else b"\xff%d" % o, []) for o in range(6)]
    decoder = Decoder(None, lambda v: v.decode("utf-8"), MalformedPolicy.DEAD_LETTER)
    batch = decoder(raw)
    assert [type(r) for r in batch] == [Undecodable, KafkaRecord] * 3
    assert decoder.n_dropped == 0  # handed on, not dropped

    out, dlq = CollectSink(), CollectSink("dlq")
    p = Pipeline(SOURCE, dead_letter=dlq).map(lambda r: r._replace(value=int(r.value))).sink(out)
    assert p.source.options["on_malformed"] is MalformedPolicy.DEAD_LETTER  # the default with a dead-letter sink
    p.process_batch(batch)
    assert [(r.offset, r.value) for r in out.records] == [(1, 1), (3, 3), (5, 5)]
    assert [(r.offset, r.value, headers(r)[HEADER_STAGE]) for r in dlq.records] == [
        (0, b"\xff0", DESERIALIZE_STAGE),
        (2, b"\xff2", DESERIALIZE_STAGE),
        (4, b"\xff4", DESERIALIZE_STAGE),
    ]
    assert headers(dlq.records[0])[HEADER_TYPE] == "UnicodeDecodeError"


def test_source_malformed_policy_and_the_dead_letter_sink_go_together():
    explicit = KafkaSource(topics=["t"], options={"on_malformed": "skip"})
    assert Pipeline(explicit, dead_letter=CollectSink()).source.options["on_malformed"] == "skip"
    assert "on_malformed" not in Pipeline(SOURCE).source.options
    with pytest.raises(ValueError, match="needs Pipeline"):
        Pipeline(KafkaSource(topics=["t"], options={"on_malformed": "dead_letter"}))
    with pytest.raises(TypeError, match="no process_batch"):
        Pipeline(SOURCE, dead_letter=object())


def test_message_bounded_and_bare_values_take_the_batch_provenance():
    dlq = CollectSink("dlq")

    def boom(value):
        raise ValueError("y" * (10 * MAX_MESSAGE_CHARS))

    p = Pipeline(SOURCE, dead_letter=dlq).map(lambda r: {"bare": r.offset}).map(boom)
    p.process_batch(recs(2, partition=7))
    letter = dlq.records[0]
    assert (letter.topic, letter.partition, letter.offset, letter.value) == ("t", 7, -1, {"bare": 0})
    message = headers(letter)[HEADER_MESSAGE]
    assert len(message) == MAX_MESSAGE_CHARS
    assert message.endswith("...")


def test_error_types_are_bounded_and_exported():
    dlq = CollectSink("dlq")
    kinds = [type(f"Error{i}", (Exception,), {}) for i in range(MAX_ERROR_TYPES + 5)]

    def fail(r):
        raise kinds[r.offset]("bad")

    p = Pipeline(SOURCE, dead_letter=dlq).map(fail)
    p.process_batch(recs(len(kinds)))
    counts = p.dead_letter_counts()
    assert sum(counts.values()) == len(kinds) == len(dlq.records)
    assert len(counts) == MAX_ERROR_TYPES + 1
    assert counts[("01-map", OTHER_TYPE)] == 5
    text = generate_latest(p.prometheus_registry).decode()
    name = dead_letter.METRIC + "_total"
    assert f'{name}{{error_type="other",stage="01-map"}} 5.0' in text
    assert text.count(name + "{") == MAX_ERROR_TYPES + 1
    assert promtool_problems(text) == ""


def test_file_sink_as_dead_letter_sink_publishes_with_the_region(tmp_path):
    out, dlq = FileSink(tmp_path / "out", "m0"), FileSink(tmp_path / "dlq", "m0", name="dlq")
    p = Pipeline(SOURCE, dead_letter=dlq).map(parse).sink(out)
    handlers = dict(zip(p.operator_ids(), p.operators, strict=True))
    assert list(handlers) == ["01-map", "02-file_sink", "03-dlq"]
    p.process_batch(recs(6))
    data = {op_id: op.checkpoint(1) for op_id, op in handlers.items()}
    p.process_batch(recs(9)[6:])  # after the checkpoint: discarded by the reset below
    for op_id, op in reversed(handlers.items()):
        op.reset(1, data[op_id])
    rows = [json.loads(line) for f in sorted((tmp_path / "dlq").glob("*.jsonl")) for line in f.read_text().splitlines()]
    assert [r["offset"] for r in rows] == [0, 3]
    good = [json.loads(line) for f in (tmp_path / "out").glob("*.jsonl") for line in f.read_text().splitlines()]
    assert [r["value"] for r in good] == [1, 2, 4, 5]


def test_headers_written_by_the_file_sink_only_when_a_record_has_some():
    plain = [KafkaRecord("t", 0, o, 7, 0, None, b"v%d" % o, ()) for o in range(3)]
    tagged = KafkaRecord("t", 0, 4, 7, 0, None, b"v4", (("d", b"y"),))
    mixed = Record("t", 0, 3, 7, None, b"v3", (("a", b"x"), ("b", b"\xff"), ("c", None)))
    expected = {3: [["a", "x"], ["b", {"base64": "/w=="}], ["c", None]], 4: [["d", "y"]]}
    batches = (plain, [*plain, tagged], [*plain, mixed, tagged], [replace(r, value={"n": 1}) for r in [*plain, mixed]])
    for batch in batches:
        lines = [json.loads(line) for line in to_json_bytes(batch, ',"member":"m"').decode().splitlines()]
        assert lines == [json.loads(to_json_line(r, ',"member":"m"')) for r in batch]  # the two paths agree
        assert [line.get("headers") for line in lines] == [expected.get(r.offset) for r in batch]
        assert all(list(line)[-2:] in (["value", "member"], ["headers", "member"]) for line in lines)


def test_the_dead_letter_sink_is_not_a_stage_too():
    dlq = CollectSink("dlq")
    with pytest.raises(ValueError, match="cannot be a stage"):
        Pipeline(SOURCE, dead_letter=dlq).map(parse).sink(dlq)


def test_the_first_record_of_each_stage_and_error_type_is_logged(caplog):
    p = Pipeline(SOURCE, dead_letter=CollectSink("dlq")).map(parse)
    with caplog.at_level("WARNING", logger=dead_letter.__name__):
        p.process_batch(recs(10))
        p.process_batch(recs(10, partition=1))
    assert [r.getMessage().partition(" (")[0] for r in caplog.records] == [
        "stage 01-map: dead-lettering the record at topic t partition 0 offset 0: ValueError: "
        "invalid literal for int() with base 10: b'x0'"
    ]
    assert p.dead_letter_counts() == {("01-map", "ValueError"): 8}


def test_an_error_whose_str_raises_is_dead_lettered_all_the_same():
    class Odd(Exception):
        def __str__(self):
            raise RuntimeError("no text")

    def fail(r):
        raise Odd

    dlq = CollectSink("dlq")
    Pipeline(SOURCE, dead_letter=dlq).map(fail).process_batch(recs(1))
    assert headers(dlq.records[0])[HEADER_MESSAGE] == "(the error's str() raised RuntimeError)"
    assert headers(dlq.records[0])[HEADER_TYPE].endswith("Odd")
