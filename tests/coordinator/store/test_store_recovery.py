"""Start-up never drops acknowledged records silently: torn tail or corruption."""

from __future__ import annotations

import logging

import crc32c
import pytest

from coordinator.store import records
from coordinator.store.log import segment
from coordinator.store.state_store import StateStore


def _segment(path):
    (seg,) = [p for p in path.iterdir() if p.name.startswith("segment-") and p.name.endswith(".log")]
    return seg


def _ten_groups(path):
    """Ten groups, one acknowledged (synced) record each; returns the segment and record offsets."""
    store = StateStore(path)
    store.load()
    for g in range(10):
        store.put_initial_offsets(f"group-{g}", {("orders", p): 1000 * g + p for p in range(3)})
        store.sync()
    store.close()
    seg = _segment(path)
    offsets: list[int] = []
    segment.scan(seg.read_bytes(), lambda off, _p: offsets.append(off))
    return seg, offsets


def test_any_flipped_byte_of_a_record_mid_log_is_a_start_up_error(tmp_path):
    """Every byte of record 3 of 10 (header included) flipped in turn: start-up
    refuses, names the file and the offset, and changes nothing. Flips of the
    length field that make the record reach past the end of the file are
    included: the valid records after it still show it is not a torn tail."""
    seg, offsets = _ten_groups(tmp_path / "src")
    data = seg.read_bytes()
    start, end = offsets[3], offsets[4]
    for i in range(start, end):
        for mask in (0x01, 0x80):
            d = tmp_path / f"flip{i}-{mask}"
            d.mkdir()
            broken = bytearray(data)
            broken[i] ^= mask
            (d / seg.name).write_bytes(bytes(broken))
            with pytest.raises(segment.CorruptLog) as info:
                StateStore(d).load()
            assert str(d / seg.name) in str(info.value)
            assert f"at byte {start}" in str(info.value)
            assert (d / seg.name).read_bytes() == bytes(broken)
            assert [p.name for p in d.iterdir() if p.name != "LOCK"] == [seg.name]


def test_truncate_corrupt_cuts_at_the_damage_and_keeps_the_bytes(tmp_path, caplog):
    seg, offsets = _ten_groups(tmp_path)
    broken = bytearray(seg.read_bytes())
    broken[offsets[3] + segment.HEADER_SIZE + 10] ^= 0x20
    seg.write_bytes(bytes(broken))
    store = StateStore(tmp_path, truncate_corrupt=True)
    with caplog.at_level(logging.ERROR):
        store.load()
    assert store.groups() == [f"group-{g}" for g in range(3)]
    assert any("6 or more valid records after it are lost" in r.getMessage() for r in caplog.records)
    store.close()
    assert (tmp_path / f"{seg.name}.corrupt-{offsets[3]}").read_bytes() == bytes(broken[offsets[3] :])
    again = StateStore(tmp_path)  # the flag is needed once: the log is clean now
    again.load()
    assert len(again.groups()) == 3
    again.close()


def test_a_torn_multi_record_write_is_truncated_automatically(tmp_path, caplog):
    """The last write held three records (one group commit); the crash left the
    first whole, the second half-written and the third as zeros. Nothing good
    follows the damage, so it is a torn tail: cut with a WARNING."""
    seg, _offsets = _ten_groups(tmp_path)
    data = seg.read_bytes()
    batch = b"".join(
        segment.encode_record(records.encode(1.0, [records.control_entry("late", "t", [p], [p])])) for p in range(3)
    )
    first = len(batch) // 3
    torn = batch[:first] + batch[first : first + 20] + b"\0" * (len(batch) - first - 20)
    seg.write_bytes(data + torn)
    store = StateStore(tmp_path)
    with caplog.at_level(logging.WARNING):
        report = store.load()
    assert report.truncated_bytes == len(torn) - first
    assert store.get_initial_offsets("late") == {("t", 0): 0}
    assert len(store.groups()) == 11
    assert any("torn tail" in r.getMessage() for r in caplog.records)
    store.close()


def test_a_bad_last_record_with_garbage_after_it_is_a_torn_tail(tmp_path):
    """Header intact, length inside the file, CRC bad, and only unparseable
    bytes after it: what a crash in the middle of one append leaves."""
    seg, _offsets = _ten_groups(tmp_path)
    data = seg.read_bytes()
    last = segment.encode_record(records.encode(1.0, [records.control_entry("late", "t", [0], [5])]))
    garbled = last[:20] + bytes(b ^ 0x5A for b in last[20:]) + b"\xff" * 100
    seg.write_bytes(data + garbled)
    store = StateStore(tmp_path)
    assert store.load().truncated_bytes == len(garbled)
    assert len(store.groups()) == 10
    store.close()


def _raw_record(version: int, payload: bytes) -> bytes:
    """A CRC-valid record framed by hand (encode_record refuses what these tests need)."""
    body = bytes((version,)) + payload
    return segment.HEADER.pack(len(body), crc32c.crc32c(body)) + body


def test_a_complete_record_over_the_frame_limit_stops_start_up(tmp_path):
    """No writer produces a record over 64 MiB; a complete, CRC-valid one is not a
    torn write: start-up refuses it naming the file and offset, and changes nothing."""
    name = "g" * 7000
    entries = [records.control_entry(f"{name}-{g:05d}", "orders", [0], [g]) for g in range(10_001)]
    payload = records.encode(1.0, entries)
    assert len(payload) > segment.MAX_RECORD_BYTES
    first = segment.encode_record(records.encode(1.0, [records.control_entry("ok", "t", [0], [1])]))
    seg = tmp_path / segment.segment_name(0)
    seg.write_bytes(first + _raw_record(segment.FORMAT_VERSION, payload))
    size = seg.stat().st_size
    with pytest.raises(segment.CorruptLog, match=f"at byte {len(first)}.*over the .*frame limit"):
        StateStore(tmp_path).load()
    assert seg.stat().st_size == size


def test_a_record_of_a_lower_format_version_stops_start_up(tmp_path):
    """Version 2 is the only one read: a CRC-valid version-1 record is undecodable."""
    seg = tmp_path / segment.segment_name(0)
    seg.write_bytes(_raw_record(1, records.encode(1.0, [records.control_entry("g", "t", [0], [1])])))
    with pytest.raises(segment.CorruptLog, match=r"format version 1 \(this coordinator reads version 2\)"):
        StateStore(tmp_path).load()


def test_the_coordinator_refuses_a_corrupt_log_until_told_to_truncate(tmp_path):
    """Through the process: a flipped byte mid-log stops start-up with the file and
    offset in the log; `--truncate-corrupt` then starts it with what precedes it."""
    from coordinator.client import CoordinatorClient
    from coordinator.launcher import CoordinatorProcess, CoordinatorStartError

    state = tmp_path / "state"
    seg, offsets = _ten_groups(state)
    broken = bytearray(seg.read_bytes())
    broken[offsets[3] + segment.HEADER_SIZE + 10] ^= 0x20
    seg.write_bytes(bytes(broken))
    proc = CoordinatorProcess(state)
    with pytest.raises(CoordinatorStartError) as info:
        proc.start()
    proc.terminate()
    assert proc.returncode == 1
    assert f"{seg} at byte {offsets[3]}" in str(info.value)
    assert "--truncate-corrupt" in str(info.value)
    assert seg.read_bytes() == bytes(broken)
    proc = CoordinatorProcess(state, extra_args=["--truncate-corrupt"])
    proc.start()
    try:
        with CoordinatorClient(proc.endpoint, timeout=10) as c:
            assert sorted(c.status().registry.groups) == [f"group-{g}" for g in range(3)]
    finally:
        proc.terminate()
    assert (state / f"{seg.name}.corrupt-{offsets[3]}").exists()
