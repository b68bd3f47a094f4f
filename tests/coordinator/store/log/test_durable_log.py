"""The durable log: framing, recovery of torn and corrupt tails, directory handling."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

from coordinator.store.log import segment
from coordinator.store.state_store import StateStore

from support.paths import REPO


def _segments(path):
    return sorted(p.name for p in path.iterdir() if p.name.startswith("segment-") and p.name.endswith(".log"))


def _only_segment(path):
    (name,) = _segments(path)
    return path / name


def test_encode_scan_roundtrip():
    payloads = [b"{}", b'{"e":[]}', "é".encode() * 1000]
    buf = b"".join(segment.encode_record(p) for p in payloads)
    seen = []
    result = segment.scan(buf, lambda off, p: seen.append((off, bytes(p))))
    assert [p for _, p in seen] == payloads
    assert seen[0][0] == 0
    assert seen[1][0] == segment.HEADER_SIZE + 1 + len(payloads[0])
    assert result.end == len(buf)
    assert result.records == 3
    assert result.damage is None


def _store_with_values(tmp_path, n):
    """n records, one control variable each, all synced (= acknowledged)."""
    store = StateStore(tmp_path)
    store.load()
    for i in range(n):
        store.put_initial_offsets("g", {("t", i): 100 + i})
        store.sync()
    store.close()
    return _only_segment(tmp_path)


def test_torn_tail_repaired_at_every_cut_point(tmp_path, caplog):
    seg = _store_with_values(tmp_path / "src", 5)
    data = seg.read_bytes()
    last = segment.scan(data, lambda off, p: None).end
    offsets = []
    segment.scan(data, lambda off, p: offsets.append(off))
    last_start = offsets[-1]
    assert last == len(data)
    for cut in range(last_start + 1, len(data)):  # every byte offset inside the last record
        d = tmp_path / f"cut{cut}"
        d.mkdir()
        (d / seg.name).write_bytes(data[:cut])
        caplog.clear()
        store = StateStore(d)
        with caplog.at_level(logging.WARNING, logger="coordinator.store.log.segment"):
            report = store.load()
        assert report.truncated_bytes == cut - last_start
        assert report.records == 4
        assert store.get_initial_offsets("g") == {("t", i): 100 + i for i in range(4)}
        assert any(f"torn tail at byte {last_start}" in r.getMessage() for r in caplog.records)
        # new appends follow the last good record and replay
        store.put_initial_offsets("g", {("t", 4): 999})
        store.close()
        assert os.path.getsize(d / seg.name) > last_start
        again = StateStore(d)
        assert again.load().truncated_bytes == 0
        assert again.get_initial_offsets("g")[("t", 4)] == 999
        again.close()
        assert (d / f"{seg.name}.corrupt-{last_start}").read_bytes() == data[last_start:cut]


def test_cut_at_record_boundary_is_clean(tmp_path):
    seg = _store_with_values(tmp_path, 3)
    offsets = []
    segment.scan(seg.read_bytes(), lambda off, p: offsets.append(off))
    os.truncate(seg, offsets[-1])
    store = StateStore(tmp_path)
    assert store.load().truncated_bytes == 0
    assert store.get_initial_offsets("g") == {("t", 0): 100, ("t", 1): 101}
    store.close()


def test_zero_filled_tail_is_truncated(tmp_path):
    seg = _store_with_values(tmp_path, 3)
    size = seg.stat().st_size
    with open(seg, "ab") as f:
        f.write(b"\0" * 4096)  # a file extended by a crash but never written
    store = StateStore(tmp_path)
    assert store.load().truncated_bytes == 4096
    assert len(store.get_initial_offsets("g")) == 3
    store.close()
    assert seg.stat().st_size == size


def test_corrupt_crc_in_the_middle_refuses_to_start_unless_told_to_cut(tmp_path, caplog):
    seg = _store_with_values(tmp_path, 5)
    data = bytearray(seg.read_bytes())
    offsets = []
    segment.scan(bytes(data), lambda off, p: offsets.append(off))
    data[offsets[2] + segment.HEADER_SIZE + 5] ^= 0xFF  # flip one payload byte of record 3
    seg.write_bytes(bytes(data))
    with pytest.raises(segment.CorruptLog) as info:
        StateStore(tmp_path).load()
    message = str(info.value)
    assert str(seg) in message
    assert f"at byte {offsets[2]}" in message
    assert "--truncate-corrupt" in message
    assert f"valid record at byte {offsets[3]}" in message
    assert "CRC mismatch" in message
    assert seg.read_bytes() == bytes(data)  # nothing truncated
    assert not list(tmp_path.glob("*.corrupt-*"))
    # The operator's explicit choice: cut at the bad record, keep the cut bytes.
    store = StateStore(tmp_path, truncate_corrupt=True)
    with caplog.at_level(logging.WARNING, logger="coordinator.store.log.segment"):
        report = store.load()
    assert report.records == 2
    assert report.truncated_bytes == len(data) - offsets[2]
    assert store.get_initial_offsets("g") == {("t", 0): 100, ("t", 1): 101}
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert errors
    assert "2 or more valid records after it are lost" in errors[0].getMessage()
    store.close()
    assert (tmp_path / f"{seg.name}.corrupt-{offsets[2]}").read_bytes() == bytes(data[offsets[2] :])


def test_undecodable_payload_with_good_crc_refuses_to_start(tmp_path):
    seg = _store_with_values(tmp_path, 2)
    size = seg.stat().st_size
    with open(seg, "ab") as f:
        f.write(segment.encode_record(b"not json"))
    with pytest.raises(segment.CorruptLog, match=f"at byte {size}: a CRC-valid record"):
        StateStore(tmp_path).load()
    assert seg.stat().st_size == size + segment.HEADER_SIZE + 1 + len(b"not json")
    store = StateStore(tmp_path, truncate_corrupt=True)
    report = store.load()
    assert report.records == 2
    assert report.truncated_bytes == segment.HEADER_SIZE + 1 + len(b"not json")
    store.close()


def test_newer_format_version_refuses_to_start_and_truncates_nothing(tmp_path):
    seg = _store_with_values(tmp_path, 2)
    with open(seg, "ab") as f:
        f.write(segment.encode_record(b"{}", version=segment.FORMAT_VERSION + 1))
    size = seg.stat().st_size
    store = StateStore(tmp_path)
    with pytest.raises(segment.UnsupportedFormat, match="upgrade the coordinator"):
        store.load()
    assert seg.stat().st_size == size
    # the lock was released: a fixed coordinator can open the directory
    os.truncate(seg, size - segment.HEADER_SIZE - 3)
    again = StateStore(tmp_path)
    again.load()
    again.close()


def test_second_store_on_the_same_dir_is_refused(tmp_path):
    first = StateStore(tmp_path)
    first.load()
    with pytest.raises(segment.StateDirInUse, match="in use by another coordinator"):
        StateStore(tmp_path).load()
    first.close()
    second = StateStore(tmp_path)
    second.load()
    second.close()


def test_leftovers_of_an_interrupted_compaction_are_removed(tmp_path):
    seg = _store_with_values(tmp_path, 3)
    # a compaction that crashed before its rename...
    (tmp_path / (segment.segment_name(1) + ".tmp")).write_bytes(b"partial")
    store = StateStore(tmp_path)
    store.load()
    store.close()
    assert _segments(tmp_path) == [seg.name]
    assert not list(tmp_path.glob("*.tmp"))
    # ... and one that renamed but did not delete the old segment: the newest wins
    newer = tmp_path / segment.segment_name(1)
    store = StateStore(tmp_path / "other")
    store.load()
    store.put_initial_offsets("g", {("t", 0): 7})
    store.close()
    newer.write_bytes(_only_segment(tmp_path / "other").read_bytes())
    store = StateStore(tmp_path)
    store.load()
    assert store.get_initial_offsets("g") == {("t", 0): 7}
    store.close()
    assert _segments(tmp_path) == [newer.name]


def test_sync_is_one_fsync_for_many_appends(tmp_path):
    store = StateStore(tmp_path)
    store.load()
    base = store.stats().fsyncs
    for i in range(50):
        store.put_initial_offsets(f"g{i}", {("t", 0): i})
    store.sync()
    assert store.stats().fsyncs == base + 1
    store.close()


FAIL_CHILD = """
import json, resource, signal, sys
from coordinator.store.log.segment import LogFailed
from coordinator.store.state_store import StateStore
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
store = StateStore(sys.argv[1])
store.load()
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))
acked = -1
error = None
for i in range(100_000):
    try:
        store.put_initial_offsets("g", {("t", i): i})
        if i % 7 == 6:
            store.sync()
            acked = i
    except LogFailed as exc:
        error = str(exc)
        break
later = []
for call in (lambda: store.put_initial_offsets("g", {("u", 0): 1}), store.sync):
    try:
        call()
        later.append("accepted")
    except LogFailed:
        later.append("refused")
store.close()
print(json.dumps({"acked": acked, "error": error, "later": later}))
"""


def test_a_failed_write_makes_the_log_fail_stop_and_loses_nothing_acknowledged(tmp_path):
    """A real write failure (file size limit, EFBIG): every later write and sync is
    refused; a restart keeps every value acknowledged before the failure."""
    repo = REPO
    out = subprocess.run(
        [sys.executable, "-c", FAIL_CHILD, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=repo,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["error"]
    assert "restart the coordinator" in result["error"]
    assert result["later"] == ["refused", "refused"]
    assert result["acked"] > 100
    store = StateStore(tmp_path)
    store.load()
    got = store.get_initial_offsets("g")
    assert all(got.get(("t", i)) == i for i in range(result["acked"] + 1))
    assert ("u", 0) not in got
    store.close()
