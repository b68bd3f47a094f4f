"""The changelog's record format and topic name (``cr_consumer/state/changelog.py``, steps 1-2, 5), no broker."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cr_consumer.state.changelog import (
    ChangelogFormatError,
    ChangelogRecord,
    changelog_topic,
    decode_record,
    encode_record,
)

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False), st.text()
)
KEYS = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3), max_leaves=8)
STATES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=10,
).filter(lambda v: v is not None)
HEADERS = [("cr.v", b"1"), ("cr.seq", b"3"), ("cr.src", b"41")]


def as_key(value: object) -> object:
    return tuple(as_key(v) for v in value) if isinstance(value, list) else value


@given(key=KEYS, value=st.none() | STATES, seq=st.integers(0, 2**63 - 1), src=st.integers(0, 2**63 - 1))
def test_a_record_decodes_to_itself(key: Any, value: Any, seq: int, src: int) -> None:
    record = ChangelogRecord(key, value, seq, src)
    stored = encode_record(record)
    assert decode_record(0, 0, stored.key, stored.value, stored.headers) == record
    assert record.key == as_key(key)


def test_the_encoding_is_compact_json_and_ascii_headers() -> None:
    stored = encode_record(ChangelogRecord(["é", 1], {"n": [1, 2.5]}, 12, 3400))
    assert stored.key == '["é",1]'.encode()
    assert stored.value == b'{"n":[1,2.5]}'
    assert stored.headers == (("cr.v", b"1"), ("cr.seq", b"12"), ("cr.src", b"3400"))
    assert encode_record(ChangelogRecord("k", None, 0, 0)).value is None  # a delete: a tombstone


@pytest.mark.parametrize(
    ("key", "value", "headers", "problem"),
    [
        (b'"k"', b"1", HEADERS[1:], "format version None"),
        (b'"k"', b"1", [("cr.v", b"2"), *HEADERS[1:]], "format version b'2'"),
        (b'"k"', b"1", [*HEADERS, ("cr.seq", b"3")], "header cr.seq appears twice"),
        (b'"k"', b"1", [*HEADERS, ("cr.other", b"3")], r"unknown headers \['cr.other'\]"),
        (b'"k"', b"1", HEADERS[:2], "no header cr.src"),
        (b'"k"', b"1", [*HEADERS[:2], ("cr.src", None)], "no header cr.src"),
        (b'"k"', b"1", [HEADERS[0], ("cr.seq", b"-1"), HEADERS[2]], "header cr.seq is b'-1'"),
        (b'"k"', b"1", [HEADERS[0], ("cr.seq", b"03"), HEADERS[2]], "header cr.seq is b'03'"),
        (b'"k"', b"1", [HEADERS[0], ("cr.seq", b" 3"), HEADERS[2]], "header cr.seq is b' 3'"),
        (b'"k"', b"1", [*HEADERS[:2], ("cr.src", str(2**63).encode())], "header cr.src is"),
        (None, b"1", HEADERS, "no key"),
        (b"k", b"1", HEADERS, "not the JSON"),
        (b'{"a":1}', b"1", HEADERS, "may not be or hold a JSON object"),
        (b'["a",{"b":1}]', b"1", HEADERS, "may not be or hold a JSON object"),
        (b'"k"', b"NaN", HEADERS, "NaN is not JSON"),
        (b'"k"', b'{"a":1,"a":2}', HEADERS, "repeats a key"),
        (b'"k"', b"\xff", HEADERS, "not the JSON"),
        (b'"k"', b"null", HEADERS, "a state of JSON null"),
        (b'"k"', b"[1", HEADERS, "not the JSON"),
    ],
)
def test_a_malformed_record_is_named_by_partition_and_offset(
    key: bytes | None, value: bytes, headers: list[tuple[str, bytes | None]], problem: str
) -> None:
    with pytest.raises(ChangelogFormatError, match=rf"^t partition 3 offset 17: .*{problem}"):
        decode_record(3, 17, key, value, headers, topic="t")


def test_other_headers_are_left_alone() -> None:
    record = decode_record(0, 0, b'"k"', b"1", [("trace", b"x"), *HEADERS])
    assert record == ChangelogRecord("k", 1, 3, 41)


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("k", {1: "a"}, "JSON object keys must be strings"),
        ("k", [b"x"], "not JSON"),
        ("k", float("nan"), "not JSON"),
        ({"a": 1}, 1, "a key must be a JSON scalar or array"),
        (float("inf"), 1, "a key may not be inf"),
    ],
)
def test_what_is_not_json_is_refused_before_it_is_written(key: Any, value: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        encode_record(ChangelogRecord(key, value, 1, 1))


@pytest.mark.parametrize("bad", [-1, 2**63, True])
def test_seq_and_src_are_kafka_offsets(bad: int) -> None:
    with pytest.raises(ValueError, match=r"seq must be an int in 0\.\.2"):
        ChangelogRecord("k", 1, bad, 0)
    with pytest.raises(ValueError, match=r"src must be an int in 0\.\.2"):
        ChangelogRecord("k", 1, 0, bad)


def test_changelog_topic_names() -> None:
    assert changelog_topic("orders", "agg-1", "in_put") == "orders.agg-1.in_put.changelog"
    with pytest.raises(ValueError, match=r"characters \[' ', '/'\]"):
        changelog_topic("my group", "op/1", "t")
    assert len(changelog_topic("g" * 230, "op", "t" * 5)) == 249  # Kafka's longest
    with pytest.raises(ValueError, match="is 250 characters long"):
        changelog_topic("g" * 231, "op", "t" * 5)
    with pytest.raises(ValueError, match="the operator id is empty"):
        changelog_topic("g", "", "t")
