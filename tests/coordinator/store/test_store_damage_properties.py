"""Property tests of recovery: damage inside the log is never dropped silently,
a torn tail is always cut and keeps everything acknowledged."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.store.log import segment
from coordinator.store.state_store import StateStore


def _build() -> tuple[bytes, list[int], str]:
    """A segment of acknowledged records of every kind; returns (bytes, record offsets, name)."""
    with tempfile.TemporaryDirectory() as d:
        store = StateStore(Path(d))
        store.load()
        for g in range(6):
            store.put_initial_offsets(f"group-{g}", {("orders", p): 100 * g + p for p in range(4)})
            store.register_member(f"group-{g}", g, f"op-{g}")
            store.put_document("region", f"group-{g}", {"seq": g, "note": 'é\u2028"x"'})
            store.unregister_member(f"group-{g}", f"op-{g}")
            store.sync()
        store.close()
        (seg,) = Path(d).glob("segment-*.log")
        data = seg.read_bytes()
    offsets: list[int] = []
    segment.scan(data, lambda off, _p: offsets.append(off))
    return data, offsets, seg.name


DATA, OFFSETS, NAME = _build()
ENDS = [*OFFSETS[1:], len(DATA)]


def _expected(store: StateStore, groups: int) -> None:
    for g in range(groups):
        assert store.get_initial_offsets(f"group-{g}") == {("orders", p): 100 * g + p for p in range(4)}


def _load(data: bytes) -> tuple[StateStore | None, BaseException | None, bytes]:
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / NAME).write_bytes(data)
        store = StateStore(Path(d))
        try:
            store.load()
        except segment.CorruptLog as exc:
            return None, exc, (Path(d) / NAME).read_bytes()
        try:
            _expected(store, 0)
            return store, None, b""
        finally:
            store.close()


@st.composite
def mid_log_damage(draw):
    """Overwrite, delete or insert bytes inside one record that is not the last one."""
    k = draw(st.integers(0, len(OFFSETS) - 2))
    start, end = OFFSETS[k], ENDS[k]
    at = draw(st.integers(start, end - 1))
    kind = draw(st.sampled_from(["overwrite", "delete", "insert"]))
    if kind == "overwrite":
        new = draw(st.binary(min_size=1, max_size=min(16, end - at)))
        old = DATA[at : at + len(new)]
        if new == old:
            new = bytes(b ^ 0xFF for b in old)
        return k, DATA[:at] + new + DATA[at + len(new) :]
    if kind == "delete":
        n = draw(st.integers(1, min(16, end - at)))
        if at == start and n == end - start:
            n -= 1  # removing exactly one whole record leaves a well-formed log: not damage
        n = max(n, 1)
        return k, DATA[:at] + DATA[at + n :]
    inserted = draw(st.binary(min_size=1, max_size=16))
    if inserted[0] == DATA[at]:
        # Else inserting the byte already there (b"}" before the record's last "}")
        # leaves record k whole and puts the stray byte at the start of record k+1.
        inserted = bytes([inserted[0] ^ 0xFF]) + inserted[1:]
    return k, DATA[:at] + inserted + DATA[at:]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mid_log_damage())
def test_damage_inside_the_log_is_always_a_start_up_error_and_changes_nothing(case):
    k, data = case
    _store, error, after = _load(data)
    assert error is not None, f"damage in record {k} of {len(OFFSETS)} was not refused"
    assert f"at byte {OFFSETS[k]}:" in str(error)
    assert NAME in str(error)
    assert after == data


@settings(max_examples=200, deadline=None)
@given(st.integers(OFFSETS[-1] + 1, len(DATA) - 1), st.binary(max_size=64), st.booleans())
def test_a_torn_last_record_is_cut_and_keeps_every_earlier_record(cut, garbage, zeros):
    tail = b"\0" * len(garbage) if zeros else garbage
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / NAME).write_bytes(DATA[:cut] + tail)
        store = StateStore(Path(d))
        report = store.load()
        assert report.truncated_bytes == cut - OFFSETS[-1] + len(tail)
        _expected(store, 6)
        assert store.members("group-5") == ["op-5"]  # the last request (the unregister) was torn
        assert store.members("group-4") == []
        store.close()


def test_the_fixture_has_records_of_every_kind():
    assert len(OFFSETS) == 24
    assert DATA
    _store, error, _ = _load(DATA)
    assert error is None


@pytest.mark.parametrize("k", range(len(OFFSETS) - 1))
def test_zeroing_a_whole_record_mid_log_is_refused(k):
    data = DATA[: OFFSETS[k]] + b"\0" * (ENDS[k] - OFFSETS[k]) + DATA[ENDS[k] :]
    _, error, after = _load(data)
    assert error is not None
    assert f"at byte {OFFSETS[k]}" in str(error)
    assert after == data
