"""StateStore: replay, first-writer-wins, registry, documents, retention, compaction, crash."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc

import pytest

from coordinator.store import compaction, maintenance
from coordinator.store.control_table import ControlTable, iter_snapshot
from coordinator.store.state_store import RegionIndexMismatch, StateStore

from support.paths import REPO


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _open(path, **kw) -> StateStore:
    store = StateStore(path, **kw)
    store.load()
    return store


def _reopen(store: StateStore, **kw) -> StateStore:
    """Close and load again. Activity is tracked for exactly the groups holding
    state (stats and expire rely on it): each listed group holds state, and the
    replay, which rebuilds activity from the state alone, lists the same groups."""
    groups = store.groups()
    assert all(store.region_index(g) is not None or store.group_count(g) for g in groups)
    assert store.stats().groups == len(groups)
    store.close()
    reopened = _open(store.state_dir, **kw)
    assert reopened.groups() == groups
    return reopened


def test_every_kind_of_state_is_replayed_after_close(tmp_path, store_log):
    store = _open(tmp_path, log=store_log())
    store.put_initial_offsets("g1", {("a", 0): 10, ("a", 2): 12, ("b", 1): 21})
    store.put_initial_offsets("g2", {("a", 0): 5})
    assert store.register_member("g1", 3, "op-b") == ["op-b"]
    assert store.register_member("g1", 3, "op-a") == ["op-a", "op-b"]
    store.put_document("region", "g1", {"seq": 7, "offsets": {"a": [1, 2]}})
    store.put_document("region", "gone", {"x": 1})
    store.put_document("region", "gone", None)
    store.sync()
    store = _reopen(store, log=store_log())
    assert store.get_initial_offsets("g1") == {("a", 0): 10, ("a", 2): 12, ("b", 1): 21}
    assert store.get_initial_offsets("g2") == {("a", 0): 5}
    assert store.group_count("g1") == 3
    assert store.group_count("nope") == 0
    assert store.members("g1") == ["op-a", "op-b"]
    assert store.region_index("g1") == 3
    assert store.region_index("nope") is None
    assert store.members("nope") == []
    assert store.groups() == ["g1", "g2"]
    assert store.get_document("region", "g1") == {"seq": 7, "offsets": {"a": [1, 2]}}
    assert store.get_document("region", "gone") is None
    assert store.documents("region") == {"g1": {"seq": 7, "offsets": {"a": [1, 2]}}}
    stats = store.stats()
    assert stats.control_variables == 4
    assert stats.groups == 2
    assert stats.documents == 1
    store.close()


def test_first_writer_wins_and_survives_restart(tmp_path, store_log):
    store = _open(tmp_path, log=store_log())
    assert store.put_initial_offsets("g", {("t", 0): 1, ("t", 1): 2}) == {("t", 0): 1, ("t", 1): 2}
    size = store.stats().log_bytes
    # an existing value wins; nothing new -> no record
    assert store.put_initial_offsets("g", {("t", 0): 99}) == {("t", 0): 1}
    assert store.stats().log_bytes == size
    assert store.put_initial_offsets("empty", {}) == {}
    assert store.groups() == ["g"]
    assert store.put_initial_offsets("g", {("t", 0): 99, ("t", 5): 50}) == {("t", 0): 1, ("t", 5): 50}
    store = _reopen(store, log=store_log())
    assert store.put_initial_offsets("g", {("t", 1): 77}) == {("t", 1): 2}
    assert store.get_initial_offsets("g") == {("t", 0): 1, ("t", 1): 2, ("t", 5): 50}
    store.close()


def test_put_if_absent_agrees_with_a_dict_model_across_dense_sparse_and_interleaved_topics(tmp_path, store_log):
    """Requests interleave topics, repeat them, and mix stored, new, dense and sparse
    partitions; every reply lists every requested key in request order with the value
    the model holds, and the store ends with the model's entries."""
    import random

    rng = random.Random(11)
    store, model = _open(tmp_path, log=store_log()), {}
    for _ in range(300):
        group = rng.choice(["g", "h"])
        request = {}
        for _ in range(rng.randint(1, 40)):
            topic = rng.choice(["a", "b", "c", "d"])
            part = rng.choice([rng.randrange(64), rng.randrange(1 << 20)])  # dense, and far apart: sparse
            request[(topic, part)] = rng.randrange(1 << 40)
        reply = store.put_initial_offsets(group, request)
        assert list(reply) == list(request)
        for (topic, part), offset in request.items():
            assert reply[(topic, part)] == model.setdefault((group, topic, part), offset)
    for group in ("g", "h"):
        want = {(t, p): o for (g, t, p), o in model.items() if g == group}
        assert store.get_initial_offsets(group) == want
        assert store.group_count(group) == len(want)
    store = _reopen(store, log=store_log())
    assert store.get_initial_offsets("g") == {(t, p): o for (g, t, p), o in model.items() if g == "g"}
    store.close()


def test_bad_input_is_rejected_and_changes_nothing(tmp_path, store_log):
    store = _open(tmp_path, log=store_log())
    store.put_initial_offsets("g", {("t", 0): 1})
    size = store.stats().log_bytes
    for bad, message in [
        ({("t", 1): -1}, r"offset of t\[1\] must be an int in \[0, \d+\], got -1"),
        ({("t", -1): 1}, r"partition of 't' must be an int in \[0, \d+\], got -1"),
        ({("t", 1): "5"}, r"offset of t\[1\] must be an int in \[0, \d+\], got '5'"),
        ({("t", 1): True}, r"offset of t\[1\] must be an int in \[0, \d+\], got True"),
        ({("", 1): 1}, "topic must be a non-empty string, got ''"),
        ({"t": 1}, r"control variable key must be \(topic, partition\), got 't'"),
        ({(None, 1): 1}, "topic must be a non-empty string, got None"),
        ({("u", 0): 1, ("t", 3): 3, ("u", 1 << 20): 1}, r"partition of 'u' must be an int in \[0, \d+\], got 1048576"),
    ]:
        with pytest.raises(ValueError, match=message):
            store.put_initial_offsets("g", {("t", 2): 2, **bad})
    with pytest.raises(ValueError, match="group"):
        store.put_initial_offsets("", {("t", 1): 1})
    with pytest.raises(ValueError, match="dict or None"):
        store.put_document("ns", "k", [1, 2])
    assert store.get_initial_offsets("g") == {("t", 0): 1}
    assert store.stats().log_bytes == size
    store.close()


def test_region_index_mismatch_idempotent_register_and_unregister(tmp_path, store_log):
    store = _open(tmp_path, log=store_log())
    store.register_member("g", 1, "a")
    size = store.stats().log_bytes
    assert store.register_member("g", 1, "a") == ["a"]  # idempotent, no record
    assert store.stats().log_bytes == size
    with pytest.raises(RegionIndexMismatch) as info:
        store.register_member("g", 2, "b")
    assert (info.value.group, info.value.expected, info.value.got) == ("g", 1, 2)
    assert store.members("g") == ["a"]
    store.register_member("g", 1, "b")
    assert store.unregister_member("g", "a") == ["b"]
    assert store.unregister_member("g", "a") == ["b"]
    assert store.unregister_member("nope", "a") == []
    store = _reopen(store, log=store_log())
    assert store.members("g") == ["b"]
    assert store.region_index("g") == 1
    with pytest.raises(RegionIndexMismatch):  # the index is durable
        store.register_member("g", 5, "c")
    store.close()


def test_not_loaded_and_bad_config_fail_clearly(tmp_path):
    store = StateStore(tmp_path)
    with pytest.raises(RuntimeError, match="load"):
        store.get_initial_offsets("g")
    with pytest.raises(ValueError, match="compact_dead_ratio"):
        StateStore(tmp_path, compact_dead_ratio=1.5)
    with pytest.raises(ValueError, match="retention_s"):
        StateStore(tmp_path, retention_s=0)


def test_retention_expires_exactly_the_idle_groups(tmp_path, store_log):
    clock = Clock()
    day = 86400.0
    store = _open(tmp_path, log=store_log(), retention_s=7 * day, clock=clock)
    store.put_initial_offsets("idle", {("t", 0): 1, ("t", 1): 2, ("u", 0): 3})
    store.put_initial_offsets("touched", {("t", 0): 1})
    store.put_initial_offsets("written", {("t", 0): 1})
    store.register_member("idle-registered", 0, "op")
    store.put_initial_offsets("idle-registered", {("t", 0): 1})
    store.register_member("idle-empty", 0, "op")
    store.unregister_member("idle-empty", "op")
    store.sync()
    clock.now += 5 * day
    store.touch("touched")
    store.put_initial_offsets("written", {("t", 1): 2})
    store.sync()
    # restart: activity times come back from the log
    store = _reopen(store, log=store_log(), retention_s=7 * day, clock=clock)
    clock.now += 3 * day  # idle groups: 8 days; touched/written: 3 days
    assert store.expire() == 3 + 1
    assert store.get_initial_offsets("idle") == {}
    assert store.get_initial_offsets("idle-registered") == {}
    assert store.members("idle-registered") == ["op"]  # a group with members stays registered
    assert store.region_index("idle-empty") is None  # an empty idle group is dropped
    assert store.get_initial_offsets("touched") == {("t", 0): 1}
    assert store.get_initial_offsets("written") == {("t", 0): 1, ("t", 1): 2}
    assert store.expire() == 0
    store.sync()
    store = _reopen(store, log=store_log(), retention_s=7 * day, clock=clock)
    assert store.groups() == ["idle-registered", "touched", "written"]
    assert store.stats().control_variables == 3
    assert store.expire() == 0
    clock.now += 8 * day
    assert store.expire() == 3
    store.close()


def test_a_big_group_expires_across_several_records(tmp_path):
    clock = Clock()
    store = _open(tmp_path, retention_s=10, clock=clock)
    store.put_initial_offsets("big", {(f"t{t}", p): p for t in range(5) for p in range(5000)})
    store.put_initial_offsets("small", {("t", 0): 1})
    clock.now += 20
    records_before = store.stats().log_records
    assert store.expire() == 25_001
    assert store.stats().log_records - records_before >= 3  # batched by ~10,000 entries
    assert store.groups() == []
    assert store.stats().control_variables == 0
    store.sync()
    store = _reopen(store, retention_s=10, clock=clock)
    assert store.groups() == []
    assert store.stats().control_variables == 0
    store.close()


def test_compaction_keeps_exactly_the_live_keys_and_shrinks_the_log(tmp_path, store_log):
    clock = Clock()
    store = _open(
        tmp_path, log=store_log(), clock=clock, retention_s=100, compact_min_bytes=1000, compact_dead_ratio=0.5
    )
    live = {}
    for g in range(20):
        offsets = {("t", p): g * 1000 + p for p in range(50)}
        store.put_initial_offsets(f"g{g}", offsets)
        if g % 4 == 0:
            live[f"g{g}"] = offsets
    for g in range(20):
        store.put_document("ns", f"k{g}", {"v": g})
        store.put_document("ns", f"k{g}", {"v": g + 1})  # overwritten: dead
    store.register_member("g0", 1, "op")
    store.sync()
    assert not store.maybe_compact()  # nothing dead yet (documents: 20 of ~1040)
    clock.now += 50
    for g in live:
        store.touch(g)
    store.put_document("ns", "k0", {"v": 1})
    clock.now += 60
    assert store.expire() == 15 * 50
    before = store.stats()
    assert before.dead_entries > before.live_entries
    assert store.maybe_compact()  # starts
    deadline = time.monotonic() + 30
    while not store.maybe_compact():  # finishes
        assert time.monotonic() < deadline
    after = store.stats()
    assert after.compactions == 1
    assert after.dead_entries == 0
    assert after.log_bytes < before.log_bytes / 3
    assert after.compaction_max_pause_ms < 1000
    store = _reopen(store, log=store_log(), clock=clock, retention_s=100)
    assert store.groups() == sorted(live)
    for g, offsets in live.items():
        assert store.get_initial_offsets(g) == offsets
    assert store.documents("ns") == {f"k{g}": {"v": g + 1} for g in range(20)}
    assert store.members("g0") == ["op"]
    assert store.stats().dead_entries == 0
    store.close()


def test_many_small_records_are_rebatched_by_compaction(tmp_path, store_log, monkeypatch):
    monkeypatch.setattr(maintenance, "REBATCH_RECORDS", 200)
    store = _open(tmp_path, log=store_log(), compact_min_bytes=0)
    for i in range(200):
        store.put_initial_offsets("g", {("t", i): i})
    assert not store.maybe_compact()  # nothing dead and not yet too many records
    store.put_initial_offsets("g", {("t", 200): 200})
    store.compact_dead_ratio = 0.99
    assert store.maybe_compact()
    deadline = time.monotonic() + 30
    while not store.maybe_compact():
        assert time.monotonic() < deadline
    assert store.stats().log_records <= 2  # one activity record, one batched record
    store = _reopen(store, log=store_log())
    assert store.get_initial_offsets("g") == {("t", i): i for i in range(201)}
    assert store.stats().log_records <= 2
    store.close()


def test_writes_during_a_background_compaction_are_not_lost(tmp_path, monkeypatch):
    """The compaction thread is held after writing its snapshot while the owner keeps
    writing (more than CATCH_UP_SLACK, so the catch-up copy runs too)."""
    gate, snapshot_written = threading.Event(), threading.Event()
    original = compaction.Compaction._write_snapshot
    jobs = []

    def held(self, out):
        jobs.append((self, self.copied_upto))  # the job and where its catch-up starts
        original(self, out)
        snapshot_written.set()
        assert gate.wait(30), "test did not release the compaction"

    monkeypatch.setattr(compaction.Compaction, "_write_snapshot", held)
    store = _open(tmp_path, compact_min_bytes=0, compact_dead_ratio=0.001)
    for g in range(10):
        store.put_initial_offsets(f"g{g}", {("t", p): p for p in range(1000)})
        store.put_document("ns", f"g{g}", {"v": 0})
        store.put_document("ns", f"g{g}", {"v": 1})
    store.register_member("g0", 0, "op")
    store.sync()
    for g in range(10):
        store.put_document("ns", f"g{g}", {"v": 2})  # 30 dead of ~10,000
    start_bytes = store.stats().log_bytes
    assert store.maybe_compact()
    assert snapshot_written.wait(30)
    # during the compaction: new keys, overwrites, tombstones, registry changes
    for g in range(10, 160):
        store.put_initial_offsets(f"g{g}", {("t", p): g for p in range(500)})
        store.sync()
    store.put_document("ns", "g1", None)
    store.put_document("ns", "late", {"v": 9})
    store.register_member("g0", 0, "op2")
    store.sync()
    assert store.stats().log_bytes - start_bytes > compaction.CATCH_UP_SLACK
    gate.set()
    store.put_initial_offsets("after-gate", {("t", 0): 1})  # possibly during catch-up
    store.sync()
    deadline = time.monotonic() + 30
    while not store.maybe_compact():
        assert time.monotonic() < deadline
    assert store.stats().compactions == 1
    job, start = jobs[0]
    assert job.copied_upto > start  # the background catch-up copied records
    store.put_initial_offsets("after-switch", {("t", 0): 2})
    store.sync()
    store = _reopen(store)
    for g in range(10):
        assert store.get_initial_offsets(f"g{g}") == {("t", p): p for p in range(1000)}
    for g in range(10, 160):
        assert store.get_initial_offsets(f"g{g}") == {("t", p): g for p in range(500)}
    assert store.get_initial_offsets("after-gate") == {("t", 0): 1}
    assert store.get_initial_offsets("after-switch") == {("t", 0): 2}
    docs = store.documents("ns")
    assert "g1" not in docs
    assert docs["late"] == {"v": 9}
    assert docs["g2"] == {"v": 2}
    assert store.members("g0") == ["op", "op2"]
    assert store.stats().control_variables == 10 * 1000 + 150 * 500 + 2
    store.close()


def test_snapshot_is_copy_on_write_for_topics():
    table = ControlTable()
    table.set_many("g", "a", [0, 1], [10, 11])
    table.set_many("h", "a", [0], [1])
    snap = table.snapshot()
    table.set_many("g", "b", [0], [20])  # new topic in a shared group: copied first
    table.set_many("g", "a", [0, 1], [None, None])  # topic removed: the snapshot keeps it
    table.set_many("new", "a", [0], [1])
    # the snapshot's dicts never change size (the compaction thread iterates them)...
    assert sorted(snap) == ["g", "h"]
    assert sorted(snap["g"]) == ["a"]
    # ... while the arrays are shared: in-place writes show (the copied log records
    # that follow the snapshot set them again in order)
    assert list(iter_snapshot(snap, 100)) == [("h", "a", [0], [1])]
    assert table.group_items("g") == {("b", 0): 20}
    table.release_snapshot()
    snap = table.snapshot()
    assert sorted(snap["g"]) == ["b"]
    table.release_snapshot()


def test_structural_changes_while_the_snapshot_is_being_written(tmp_path, monkeypatch):
    """Hold the compaction thread before it reads the snapshot; meanwhile add topics to
    existing groups and expire others; the compacted log has exactly the final state."""
    gate, started = threading.Event(), threading.Event()
    original = compaction.Compaction._write_snapshot

    def held(self, out):
        started.set()
        assert gate.wait(30), "test did not release the compaction"
        original(self, out)

    monkeypatch.setattr(compaction.Compaction, "_write_snapshot", held)
    clock = Clock()
    store = _open(tmp_path, compact_min_bytes=0, compact_dead_ratio=0.01, retention_s=100, clock=clock)
    for g in range(20):
        store.put_initial_offsets(f"g{g}", {("a", p): p for p in range(10)})
    for i in range(10):
        store.put_document("ns", "k", {"i": i})
    clock.now += 60
    for g in range(10):
        store.touch(f"g{g}")
    store.sync()
    assert store.maybe_compact()
    assert started.wait(30)
    for g in range(10):
        store.put_initial_offsets(f"g{g}", {("b", 0): 100 + g})  # new topic, existing group
    clock.now += 60
    assert store.expire() == 10 * 10  # g10..g19: whole groups dropped
    store.sync()
    gate.set()
    deadline = time.monotonic() + 30
    while not store.maybe_compact():
        assert time.monotonic() < deadline
    assert store.stats().compactions == 1
    expected = {f"g{g}": {**{("a", p): p for p in range(10)}, ("b", 0): 100 + g} for g in range(10)}
    for g, items in expected.items():
        assert store.get_initial_offsets(g) == items
    store = _reopen(store, clock=clock, retention_s=100)
    assert store.groups() == sorted(expected)
    for g, items in expected.items():
        assert store.get_initial_offsets(g) == items
    assert store.get_document("ns", "k") == {"i": 9}
    store.close()


def test_close_during_compaction_keeps_the_old_segment(tmp_path, monkeypatch):
    gate = threading.Event()
    original = compaction.Compaction._write_snapshot

    def held(self, out):
        gate.wait(30)
        original(self, out)

    monkeypatch.setattr(compaction.Compaction, "_write_snapshot", held)
    store = _open(tmp_path, compact_min_bytes=0)
    for i in range(10):
        store.put_document("ns", "k", {"v": i})
    assert store.maybe_compact()
    threading.Timer(0.2, gate.set).start()
    store.close()
    assert not list(tmp_path.glob("*.tmp"))
    store = _open(tmp_path)
    assert store.get_document("ns", "k") == {"v": 9}
    store.close()


CHILD = textwrap.dedent(
    """
    import sys
    from coordinator.store.state_store import StateStore
    store = StateStore(sys.argv[1], compact_min_bytes=0, compact_dead_ratio=0.3)
    store.load()
    i = 0
    while True:
        store.put_initial_offsets("g%d" % i, {("t", p): i * 100 + p for p in range(50)})
        store.put_document("ns", "last", {"i": i})
        store.register_member("reg", 0, "op%d" % i)
        store.sync()
        print("synced", i, store.stats().compactions, flush=True)
        # unacknowledged appends that the kill may catch half-written
        store.put_initial_offsets("unsynced%d" % i, {("t", p): p for p in range(200)})
        for k in range(300):  # dead entries, so that compactions run (and get killed)
            store.put_document("junk", "k", {"k": k})
        store.maybe_compact()
        i += 1
    """
)


def test_kill_9_right_after_sync_keeps_every_synced_value(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    last = compactions = -1
    try:
        for line in proc.stdout:  # the child runs until killed; bounded by the pytest timeout
            last, compactions = map(int, line.split()[1:])
            if last >= 40 and compactions >= 2:
                os.kill(proc.pid, signal.SIGKILL)  # right after a sync
                break
    finally:
        proc.kill()
        proc.wait(10)
    assert last >= 40
    store = _open(tmp_path)
    for i in range(last + 1):
        assert store.get_initial_offsets(f"g{i}") == {("t", p): i * 100 + p for p in range(50)}
    assert store.get_document("ns", "last")["i"] >= last
    assert {f"op{i}" for i in range(last + 1)} <= set(store.members("reg"))
    assert store.stats().log_bytes > 0
    store.close()


def test_memory_per_control_variable_is_at_most_64_bytes(tmp_path):
    table = ControlTable()
    names = [(f"group-{g:05d}", [f"topic-{t}" for t in range(10)]) for g in range(100)]
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for group, topics in names:
            for topic in topics:
                table.set_many(group, topic, list(range(100)), list(range(100)))
        used = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert len(table) == 100_000
    assert used / 100_000 <= 64, used / 100_000
