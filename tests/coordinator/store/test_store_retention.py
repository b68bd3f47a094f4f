"""Retention counts every kind of activity of a group, and maintenance never stops the loop."""

from __future__ import annotations

import logging
import os
import time

import pytest

from coordinator.client import CoordinatorClient
from coordinator.launcher import CoordinatorProcess
from coordinator.protocol.common.waiting import wait_until
from coordinator.store import compaction
from coordinator.store.state_store import StateStore


def test_region_traffic_and_merges_keep_a_group_from_expiring(tmp_path, names):
    """A region that runs without restarts only heartbeats, acks and checkpoints;
    a group whose members only merge does not touch the registry either. Both
    outlive several retention periods; a group without traffic expires."""
    region, merging, idle = names.group("region"), names.group("merge"), names.group("idle")
    proc = CoordinatorProcess(tmp_path / "state", extra_args=["--retention", "1.5s", "--expire-interval", "0.2s"])
    proc.start()
    try:
        with CoordinatorClient(proc.endpoint, timeout=10) as c:
            for group in (region, merging, idle):
                c.put_initial_offsets(group, {("t", 0): 5})
            c.register(merging, 0, "op")
            member = {"region": region, "member": "m0", "incarnation": "inc-1"}
            c.request("region_join", {**member, "pid": 1, "config": {"member_timeout_s": 30}})
            deadline = time.monotonic() + 4.5  # three retention periods
            seq = 0
            while time.monotonic() < deadline:
                c.request("region_heartbeat", member)
                seq += 1
                assert c.merge_checkpoint(merging, seq, 0, 1, "op", {("t", 0): seq}, 5) == {("t", 0): seq}
                time.sleep(0.2)
            groups = c.status().registry.groups
            assert idle not in groups, "the idle group should have expired (expiry runs)"
            assert c.get_initial_offsets(region) == {("t", 0): 5}
            assert c.get_initial_offsets(merging) == {("t", 0): 5}
    finally:
        proc.terminate()


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_failing_compaction_is_logged_and_retried_with_backoff(tmp_path, monkeypatch, caplog):
    clock = Clock()
    store = StateStore(tmp_path, clock=clock, compact_min_bytes=0, compact_dead_ratio=0.1)
    store.load()
    for i in range(20):
        store.put_document("ns", "k", {"i": i})
    store.sync()
    attempts = []

    def broken(self, out):
        attempts.append(clock.now)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(compaction.Compaction, "_write_snapshot", broken)

    def run_until_idle() -> None:
        def settled() -> bool:
            store.maybe_compact()
            return not store.stats().compaction_running

        wait_until(settled, 30.0, "the compaction to settle")

    with caplog.at_level(logging.ERROR):
        run_until_idle()
        assert store.maybe_compact() is False  # backing off: no new attempt at once
        run_until_idle()
        assert len(attempts) == 1
        assert store.stats().compaction_failures == 1
        clock.now += 1.0
        run_until_idle()
        clock.now += 1.0  # the second retry waits 2 s
        run_until_idle()
        assert len(attempts) == 2
        clock.now += 1.0
        run_until_idle()
    assert len(attempts) == 3
    assert store.stats().compaction_failures == 3
    assert any("No space left" in r.getMessage() for r in caplog.records)
    monkeypatch.undo()
    clock.now += 10.0
    run_until_idle()
    assert store.stats().compactions == 1
    assert store.get_document("ns", "k") == {"i": 19}
    store.close()


def test_a_failing_expiry_is_logged_and_retried_with_backoff(tmp_path, monkeypatch, caplog):
    clock = Clock()
    store = StateStore(tmp_path, clock=clock, retention_s=10)
    store.load()
    store.put_initial_offsets("g", {("t", 0): 1})
    clock.now += 20
    calls = []

    def broken(self, now):
        calls.append(now)
        raise RuntimeError("boom")

    monkeypatch.setattr(StateStore, "_expire", broken)
    with caplog.at_level(logging.ERROR):
        assert store.expire() == 0
        assert store.expire() == 0
    assert len(calls) == 1
    assert store.stats().expire_failures == 1
    assert any("retention expiry failed" in r.getMessage() for r in caplog.records)
    monkeypatch.undo()
    assert store.expire() == 0  # still backing off
    clock.now += 1.0
    assert store.expire() == 1
    assert store.groups() == []
    store.close()


def test_a_failed_log_stays_fatal_for_maintenance(tmp_path, monkeypatch):
    from coordinator.store.log.segment import LogFailed

    clock = Clock()
    store = StateStore(tmp_path, clock=clock, retention_s=10)
    store.load()
    store.put_initial_offsets("g", {("t", 0): 1})
    store.sync()

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "I/O error")

    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", failing_fsync)
        with pytest.raises(LogFailed):  # a failed fsync: the log is fail-stop from here on
            store.sync()
    clock.now += 20
    with pytest.raises(LogFailed):  # fail-stop: the server must stop and restart
        store.expire()
    assert store.get_initial_offsets("g") == {("t", 0): 1}  # nothing applied ahead of the log
    store.close()


def test_activity_touched_before_an_expiry_survives_a_restart(tmp_path, store_log):
    """Expiry writes records of its own; the activity of groups touched since the
    last write must still reach the log, or a restart would date them back."""
    clock = Clock()
    store = StateStore(tmp_path, log=store_log(), clock=clock, retention_s=100)
    store.load()
    store.put_initial_offsets("busy", {("t", 0): 1})
    store.put_initial_offsets("idle", {("t", 0): 1})
    store.sync()
    clock.now += 90
    store.touch("busy")  # in memory only, until the next record
    clock.now += 20
    assert store.expire() == 1  # "idle" (1000) expires, "busy" (1090) stays: cutoff 1010
    store.sync()
    store.close()  # no other write after the expiry
    again = StateStore(tmp_path, log=store_log(), clock=clock, retention_s=100)
    again.load()
    assert again.expire() == 0  # "busy" is dated 1090 from the log, not 1000
    assert again.get_initial_offsets("busy") == {("t", 0): 1}
    again.close()


def test_activity_of_a_group_that_is_only_read_reaches_the_log_at_the_next_expiry(tmp_path, store_log):
    clock = Clock()
    store = StateStore(tmp_path, log=store_log(), clock=clock, retention_s=100)
    store.load()
    store.put_initial_offsets("read-only", {("t", 0): 1})
    store.sync()
    clock.now += 90
    store.touch("read-only")  # a read: no record of its own
    assert store.expire() == 0  # nothing idle, but the activity is written
    store.sync()
    store.close()
    clock.now += 20  # 110 s after the write, 20 s after the read
    again = StateStore(tmp_path, log=store_log(), clock=clock, retention_s=100)
    again.load()
    assert again.expire() == 0
    assert again.get_initial_offsets("read-only") == {("t", 0): 1}
    again.close()
