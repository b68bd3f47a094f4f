"""The changelog's change-set format and topic name (``cr_consumer/state/changelog.py``, steps
1-3), no broker."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cr_consumer.state.changelog import (
    ChangelogFormatError,
    ChangeSet,
    changelog_topic,
    decode_changes,
    encode_changes,
    key_of,
)

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False), st.text()
)
KEYS = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3), max_leaves=8).map(key_of)
STATES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=10,
).filter(lambda v: v is not None)
OFFSETS = st.integers(0, 2**63 - 1)
CHANGES = st.lists(st.tuples(KEYS, OFFSETS, st.none() | STATES), max_size=30)
HEADERS = [("cr.v", b"2"), ("cr.seq", b"3"), ("cr.n", b"1")]


def _decode_all(records: list[Any]) -> list[ChangeSet]:
    return [decode_changes(0, n, None, r.value, r.headers) for n, r in enumerate(records)]


@given(changes=CHANGES, seq=OFFSETS, chunk=st.integers(1, 400), base=st.booleans())
def test_change_sets_decode_to_their_changes_in_order(changes: list[Any], seq: int, chunk: int, base: bool) -> None:
    records = encode_changes(seq, changes, chunk_bytes=chunk, base=base)
    decoded = _decode_all(records)
    assert all(d.seq == seq and d.base == base for d in decoded)
    assert [c for d in decoded for c in d.changes] == changes
    # each record within the bound, unless it is a single entry
    assert all(len(r.value) <= chunk or len(d.changes) == 1 for r, d in zip(records, decoded, strict=True))


def test_the_encoding_is_compact_json_and_ascii_headers() -> None:
    (stored,) = encode_changes(12, [(("é", 1), 3400, {"n": [1, 2.5]}), ("k", 3401, None)])
    assert stored.value == '[[["é",1],3400,{"n":[1,2.5]}],["k",3401,null]]'.encode()  # a delete: a null state
    assert stored.headers == (("cr.v", b"2"), ("cr.seq", b"12"), ("cr.n", b"2"))
    (base,) = encode_changes(12, [("k", 3401, 1)], base=True)
    assert base.headers[-1] == ("cr.base", b"1")
    assert encode_changes(1, []) == []


def test_a_large_checkpoint_is_split_into_bounded_records() -> None:
    changes = [(f"customer-{i}", i, {"orders": i, "cents": 7 * i}) for i in range(20_000)]
    records = encode_changes(5, changes, chunk_bytes=64 * 1024)
    assert len(records) > 10
    assert all(len(r.value) <= 64 * 1024 for r in records)
    assert [c for d in _decode_all(records) for c in d.changes] == changes


@pytest.mark.parametrize(
    ("key", "value", "headers", "problem"),
    [
        (None, b'[["k",1,1]]', HEADERS[1:], "format version None"),
        (None, b'[["k",1,1]]', [("cr.v", b"1"), *HEADERS[1:]], "format version b'1'"),
        (None, b'[["k",1,1]]', [*HEADERS, ("cr.seq", b"3")], "header cr.seq appears twice"),
        (None, b'[["k",1,1]]', [*HEADERS, ("cr.other", b"3")], r"unknown headers \['cr.other'\]"),
        (None, b'[["k",1,1]]', HEADERS[:2], "no header cr.n"),
        (None, b'[["k",1,1]]', [*HEADERS, ("cr.base", b"0")], "header cr.base is b'0'"),
        (None, b'[["k",1,1]]', [*HEADERS[:2], ("cr.n", None)], "no header cr.n"),
        (None, b'[["k",1,1]]', [HEADERS[0], ("cr.seq", b"-1"), HEADERS[2]], "header cr.seq is b'-1'"),
        (None, b'[["k",1,1]]', [HEADERS[0], ("cr.seq", b"03"), HEADERS[2]], "header cr.seq is b'03'"),
        (None, b'[["k",1,1]]', [HEADERS[0], ("cr.seq", b" 3"), HEADERS[2]], "header cr.seq is b' 3'"),
        (None, b'[["k",1,1]]', [*HEADERS[:2], ("cr.n", str(2**63).encode())], "header cr.n is"),
        (b'"k"', b'[["k",1,1]]', HEADERS, "a change set has no key"),
        (None, None, HEADERS, "no value"),
        (None, b"k", HEADERS, "not the JSON"),
        (None, b'{"k":1}', HEADERS, "not an array of 1 entries"),
        (None, b'[["k",1,1],["j",1,1]]', HEADERS, "not an array of 1 entries"),
        (None, b"[]", [*HEADERS[:2], ("cr.n", b"0")], "at least one"),
        (None, b'["k"]', HEADERS, r"entry 0 is not \[key, src, state\]"),
        (None, b'[["k",1]]', HEADERS, r"entry 0 is not \[key, src, state\]"),
        (None, b'[["k",1,1,1]]', HEADERS, r"entry 0 is not \[key, src, state\]"),
        (None, b'[["k",-1,1]]', HEADERS, "entry 0: src -1 is not an offset"),
        (None, b'[["k",true,1]]', HEADERS, "entry 0: src True is not an offset"),
        (None, b'[["k",1.5,1]]', HEADERS, "entry 0: src 1.5 is not an offset"),
        (None, b'[[{"a":1},1,1]]', HEADERS, "may not be a JSON object"),
        (None, b'[[["a",{"b":1}],1,1]]', HEADERS, "a key must be a JSON scalar or array"),
        (None, b'[["k",1,NaN]]', HEADERS, "NaN is not JSON"),
        (None, b'[["k",1,{"a":1,"a":2}]]', HEADERS, "repeats a key"),
        (None, b"\xff", HEADERS, "not the JSON"),
        (None, b'[["k",1,1]', HEADERS, "not the JSON"),
    ],
)
def test_a_malformed_record_is_named_by_partition_and_offset(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]], problem: str
) -> None:
    with pytest.raises(ChangelogFormatError, match=rf"^t partition 3 offset 17: .*{problem}"):
        decode_changes(3, 17, key, value, headers, topic="t")


def test_other_headers_are_left_alone() -> None:
    change_set = decode_changes(0, 0, None, b'[["k",41,1]]', [("trace", b"x"), *HEADERS])
    assert change_set == ChangeSet(3, (("k", 41, 1),))


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (("k", 1, {1: "a"}), "key 'k'.*JSON object keys must be strings"),
        (("k", 1, [b"x"]), "key 'k' is not JSON"),
        (("k", 1, float("nan")), "key 'k' is not JSON"),
        (("k", -1, 1), "key 'k': src -1 is not an offset"),
        (("k", True, 1), "key 'k': src True is not an offset"),
        ((float("inf"), 1, 1), "key inf is not JSON"),
    ],
)
def test_what_is_not_json_is_refused_before_it_is_written(change: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        encode_changes(1, [("fine", 0, 1), change])


@pytest.mark.parametrize("bad", [-1, 2**63, True])
def test_seq_is_a_kafka_offset(bad: int) -> None:
    with pytest.raises(ValueError, match=r"seq must be an int in 0\.\.2"):
        encode_changes(bad, [("k", 0, 1)])


def test_changelog_topic_names() -> None:
    assert changelog_topic("orders", "agg-1", "in_put") == "orders.agg-1.in_put.changelog"
    with pytest.raises(ValueError, match=r"characters \[' ', '/'\]"):
        changelog_topic("my group", "op/1", "t")
    assert len(changelog_topic("g" * 230, "op", "t" * 5)) == 249  # Kafka's longest
    with pytest.raises(ValueError, match="is 250 characters long"):
        changelog_topic("g" * 231, "op", "t" * 5)
    with pytest.raises(ValueError, match="the operator id is empty"):
        changelog_topic("g", "", "t")
