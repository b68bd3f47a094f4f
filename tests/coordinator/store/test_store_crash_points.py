"""A crash at any step of a compaction loses nothing acknowledged."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from coordinator.store.log import segment
from coordinator.store.state_store import StateStore

from support.paths import REPO

CRASH_EXIT = 17
GROUPS = 300  # x 40 partitions: 12,000 entries, so the snapshot spans several records

CHILD = textwrap.dedent(
    """
    import os, sys
    from coordinator.store.log import segment
    from coordinator.store.state_store import StateStore

    step, state_dir = sys.argv[1], sys.argv[2]
    target, _, nth = step.partition("#")  # "name#n": the n-th time the step is reached
    seen = {"n": 0}

    def crash(name):
        if name == target:
            seen["n"] += 1
            if seen["n"] == int(nth or 1):
                os._exit(%d)

    store = StateStore(state_dir, compact_min_bytes=0, compact_dead_ratio=0.05)
    store.load()

    def write(i):
        store.put_initial_offsets("g%%d" %% i, {("t", p): i * 100 + p for p in range(40)})
        store.register_member("reg", 0, "op%%d" %% i)
        store.put_document("ns", "last", {"i": i})
        for k in range(3):
            store.put_document("junk", "k", {"k": k})  # dead entries
        store.sync()
        print("acked", i, flush=True)

    for i in range(%d):
        write(i)
    store.unregister_member("reg", "op0")
    store.sync()
    print("unregistered", flush=True)
    segment.set_crash_point(crash)
    assert store.maybe_compact()  # starts the background compaction
    i = %d
    while store.stats().compaction_running:  # acknowledged writes while it runs
        write(i)
        i += 1
        store.maybe_compact()
    write(i)  # and after the switch
    store.close()
    """
) % (CRASH_EXIT, GROUPS, GROUPS)


def _check_acknowledged(state_dir: Path, last: int) -> None:
    store = StateStore(state_dir)
    report = store.load()
    assert report.truncated_bytes == 0
    for i in range(last + 1):
        assert store.get_initial_offsets(f"g{i}") == {("t", p): i * 100 + p for p in range(40)}, i
    # the crash may come after the sync of write(last + 1) but before it was reported
    members = set(store.members("reg"))
    assert {f"op{i}" for i in range(1, last + 1)} <= members <= {f"op{i}" for i in range(1, last + 2)}
    assert store.get_document("ns", "last")["i"] in (last, last + 1)
    assert store.get_document("junk", "k") == {"k": 2}
    store.close()
    assert len(list(state_dir.glob("segment-*.log"))) == 1
    assert not list(state_dir.glob("*.tmp"))


@pytest.mark.parametrize("step", [*segment.CRASH_STEPS, "rewrite-record#2"])
def test_a_crash_at_each_compaction_step_keeps_everything_acknowledged(tmp_path, step):
    out = subprocess.run(
        [sys.executable, "-c", CHILD, step, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert out.returncode == CRASH_EXIT, (out.returncode, out.stderr[-2000:])
    # Only complete lines: the crash may cut the report of the last synced write short.
    lines = out.stdout.split("\n")[:-1]
    acked = [int(line.split()[1]) for line in lines if line.startswith("acked ")]
    assert "unregistered" in out.stdout
    assert acked == list(range(len(acked)))
    assert len(acked) >= GROUPS
    _check_acknowledged(tmp_path, acked[-1])


@pytest.mark.parametrize(
    "step", ["rewrite-record", "rewrite-caught-up", "rewrite-fsynced", "switch-copied", "switch-sealed"]
)
def test_a_failure_before_the_rename_keeps_the_old_segment(tmp_path, step):
    store = StateStore(tmp_path, compact_min_bytes=0, compact_dead_ratio=0.05)
    store.load()
    for i in range(GROUPS):
        store.put_initial_offsets(f"g{i}", {("t", p): i * 100 + p for p in range(40)})
        store.register_member("reg", 0, f"op{i}")
        store.put_document("ns", "last", {"i": i})
        for k in range(3):
            store.put_document("junk", "k", {"k": k})
    store.unregister_member("reg", "op0")
    store.sync()
    old_where = store._log.where

    def fail(name: str) -> None:
        if name == step:
            raise OSError(28, f"injected failure at {name}")

    segment.set_crash_point(fail)
    try:
        with pytest.raises(RuntimeError, match="compaction failed"):
            store.compact()
    finally:
        segment.set_crash_point(None)
    assert store._log.where == old_where
    assert not list(tmp_path.glob("*.tmp"))
    assert store.stats().compaction_failures == 1
    store.put_document("ns", "after", {"ok": True})  # the old segment still takes writes
    store.compact()  # and a later compaction succeeds
    assert store._log.where != old_where
    store.close()
    _check_acknowledged(tmp_path, GROUPS - 1)
