"""Every record the store writes is bounded by bytes, far below the frame limit."""

from __future__ import annotations

import pytest

from coordinator.store import records
from coordinator.store.log import segment
from coordinator.store.state_store import StateStore

LONG = "n" * 7000  # 10,001 such names are > 64 MiB: one unbounded batch would exceed the frame
GROUPS = 10_001


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _record_sizes(path) -> list[int]:
    (seg,) = [p for p in path.iterdir() if p.name.startswith("segment-") and p.name.endswith(".log")]
    sizes: list[int] = []
    result = segment.scan(seg.read_bytes(), lambda _off, p: sizes.append(len(p)))
    assert result.damage is None
    return sizes


def _many_long_groups(path, **kw) -> StateStore:
    store = StateStore(path, **kw)
    store.load()
    for g in range(GROUPS):
        store.put_initial_offsets(f"{LONG}-{g:05d}", {("orders", 0): g})
    store.sync()
    return store


def test_compaction_of_many_long_named_groups_writes_bounded_records(tmp_path):
    store = _many_long_groups(tmp_path)
    store.compact()
    assert 0 < store.stats().largest_compaction_record_bytes <= records.BATCH_BYTES
    store.close()
    assert max(_record_sizes(tmp_path)) <= records.BATCH_BYTES
    again = StateStore(tmp_path)
    report = again.load()
    assert report.truncated_bytes == 0
    assert len(again.groups()) == GROUPS
    assert again.get_initial_offsets(f"{LONG}-10000") == {("orders", 0): 10_000}
    again.close()


def test_expiry_of_many_long_named_groups_writes_bounded_records_and_succeeds(tmp_path):
    clock = Clock()
    store = _many_long_groups(tmp_path, clock=clock, retention_s=10)
    before = len(_record_sizes(tmp_path))
    clock.now += 20
    assert store.expire() == GROUPS
    assert store.stats().expire_failures == 0
    assert store.groups() == []
    store.close()
    sizes = _record_sizes(tmp_path)
    assert len(sizes) - before >= 60
    assert max(sizes) <= records.BATCH_BYTES
    again = StateStore(tmp_path, clock=clock, retention_s=10)
    again.load()
    assert again.groups() == []
    assert again.expire() == 0
    again.close()


def test_activity_of_many_touched_groups_never_makes_a_write_too_large(tmp_path):
    """Reads touch groups between writes; their activity rides on the next record.
    10,001 long names would make that record exceed the frame: the activity goes
    into bounded records of its own and the write succeeds."""
    store = _many_long_groups(tmp_path)
    store.compact()
    for g in range(GROUPS):
        store.touch(f"{LONG}-{g:05d}")
    store.put_initial_offsets("small", {("t", 0): 1})
    store.sync()
    store.close()
    assert max(_record_sizes(tmp_path)) <= records.BATCH_BYTES
    again = StateStore(tmp_path)
    again.load()
    assert again.get_initial_offsets("small") == {("t", 0): 1}
    assert len(again.groups()) == GROUPS + 1
    again.close()


def test_writers_refuse_a_record_over_the_frame_limit_and_write_nothing(tmp_path):
    store = StateStore(tmp_path)
    store.load()
    store.put_initial_offsets("g", {("t", 0): 1})
    store.sync()
    size = store.stats().log_bytes
    with pytest.raises(segment.RecordTooLarge):
        store._log.append(b"x" * (segment.MAX_PAYLOAD_BYTES + 1))
    with pytest.raises(ValueError, match="too large for one log record"):
        store.put_document("ns", "big", {"blob": "x" * segment.MAX_RECORD_BYTES})
    with pytest.raises(ValueError, match="too large for one log record"):
        store.register_member("g" * segment.MAX_RECORD_BYTES, 0, "op")
    assert store.stats().log_bytes == size
    assert store.get_document("ns", "big") is None
    assert store.groups() == ["g"]
    store.put_initial_offsets("g", {("t", 1): 2})  # later writes are unaffected
    store.close()
    again = StateStore(tmp_path)
    again.load()
    assert again.get_initial_offsets("g") == {("t", 0): 1, ("t", 1): 2}
    again.close()
    rewrite = segment.SegmentRewrite(tmp_path, 9)
    with pytest.raises(segment.RecordTooLarge):
        rewrite.append(b"x" * (segment.MAX_PAYLOAD_BYTES + 1))
    assert rewrite.size == 0
    rewrite.abort()


def test_batcher_bounds_bytes_and_entries_and_splits_a_huge_control_entry():
    out: list[tuple[bytes, int]] = []
    batcher = records.Batcher(1.0, lambda p, _e, c: out.append((p, c)), max_bytes=4096, max_entries=50)
    batcher.add(records.control_entry("g", "t", list(range(500)), list(range(500))))
    for i in range(100):
        batcher.add(records.member_entry("g" * 100, f"m{i}", True))
    batcher.add_activity("g", 2.0)
    batcher.flush()
    assert all(len(p) <= 4096 for p, _ in out)
    assert all(c <= 50 for _, c in out)
    assert sum(c for _, c in out) == 600
    decoded = [records.decode(p) for p, _ in out]
    partitions = [p for _, _, es in decoded for e in es if e[0] == "c" for p in e[3]]
    assert partitions == list(range(500))
    with pytest.raises(segment.RecordTooLarge):
        batcher.add(records.document_entry("ns", "k", {"v": "x" * segment.MAX_RECORD_BYTES}))
