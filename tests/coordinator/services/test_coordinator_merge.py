"""Checkpoint merge through the real process: N members, timeouts, retire, attempts, retries, restarts."""

from __future__ import annotations

import json
import threading
import time

import pytest
import zmq

from coordinator.client import CoordinatorClient
from coordinator.protocol.common.waiting import wait_until
from coordinator.protocol.wire.errors import Invalid, MergeRetired, MergeTimeout, NotRegistered
from coordinator.services.merge import merge_maps


def _start(fn):
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - checked by the test
            box["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    return t, box


def _wait_pending(client, n, timeout=5.0):
    """Poll the coordinator's status until n merges are pending (its own view, not a guess)."""
    wait_until(
        lambda: len(client.status().merge.pending) >= n, timeout, f"{n} pending merge contributions", interval=0.01
    )


def _register(endpoint, group, names_):
    with CoordinatorClient(endpoint, timeout=10) as c:
        for n in names_:
            c.register(group, 0, n)


def test_merge_of_16_members_from_16_threads(coordinator, names):
    group = names.group()
    n = 16
    ops = [f"op-{i:02d}" for i in range(n)]
    _register(coordinator.endpoint, group, ops)
    client = CoordinatorClient(coordinator.endpoint, timeout=10)
    maps = {op: {("t", i): 1000 + i, (f"x{i}", 0): i} for i, op in enumerate(ops)}
    expected = {k: v for m in maps.values() for k, v in m.items()}
    barrier = threading.Barrier(n)

    def contribute(op):
        barrier.wait(10)
        return client.merge_checkpoint(group, 7, 0, n, op, maps[op], 10.0)

    started = [_start(lambda op=op: contribute(op)) for op in ops]
    for t, _ in started:
        t.join(20)
    for _, box in started:
        assert "error" not in box, box.get("error")
        assert box["value"] == expected
    client.close()


def test_sole_contributor_gets_its_own_map_at_once(coordinator, names):
    group = names.group()
    _register(coordinator.endpoint, group, ["only"])
    with CoordinatorClient(coordinator.endpoint, timeout=10) as c:
        t0 = time.monotonic()
        assert c.merge_checkpoint(group, 1, 0, 1, "only", {("t", 0): 5}, 10.0) == {("t", 0): 5}
        assert time.monotonic() - t0 < 2.0


def test_merge_timeout(coordinator, names):
    group = names.group()
    _register(coordinator.endpoint, group, ["a", "b"])
    with CoordinatorClient(coordinator.endpoint, timeout=10) as c:
        t0 = time.monotonic()
        with pytest.raises(MergeTimeout) as info:
            c.merge_checkpoint(group, 1, 0, 2, "a", {("t", 0): 1}, 0.5)
        elapsed = time.monotonic() - t0
        assert info.value.code.value == "TIMEOUT"
        assert "1 of 2" in info.value.message
        assert 0.45 <= elapsed < 1.6
        assert c.status().merge.pending == ()  # every contributor timed out: dropped


def test_retire_drops_merges_and_refuses_late_contributions(coordinator, names):
    group = names.group()
    _register(coordinator.endpoint, group, ["a", "b"])
    client = CoordinatorClient(coordinator.endpoint, timeout=10)
    waiting, box = _start(lambda: client.merge_checkpoint(group, 5, 0, 2, "a", {("t", 0): 1}, 10.0))
    _wait_pending(client, 1)
    assert client.retire_checkpoint(group, 5) == 1
    waiting.join(5)
    assert isinstance(box.get("error"), MergeRetired)
    with pytest.raises(MergeRetired):
        client.merge_checkpoint(group, 4, 1, 2, "b", {}, 1.0)
    # a later checkpoint still merges
    t2, box2 = _start(lambda: client.merge_checkpoint(group, 6, 0, 2, "a", {("t", 0): 1}, 10.0))
    assert client.merge_checkpoint(group, 6, 0, 2, "b", {("t", 1): 2}, 10.0) == {("t", 0): 1, ("t", 1): 2}
    t2.join(5)
    assert box2["value"] == {("t", 0): 1, ("t", 1): 2}
    # retiring drops completed merges too
    assert client.retire_checkpoint(group, 6) == 1
    client.close()


def test_two_attempts_never_mix(coordinator, names):
    group = names.group()
    _register(coordinator.endpoint, group, ["a", "b"])
    client = CoordinatorClient(coordinator.endpoint, timeout=10)
    ta, box_a = _start(lambda: client.merge_checkpoint(group, 3, 0, 2, "a", {("t", 0): 10}, 10.0))
    with pytest.raises(MergeTimeout):
        client.merge_checkpoint(group, 3, 1, 2, "b", {("t", 1): 99}, 0.4)  # attempt 1: a is not in it
    assert "value" not in box_a
    merged = client.merge_checkpoint(group, 3, 0, 2, "b", {("t", 1): 20}, 10.0)
    ta.join(5)
    assert merged == box_a["value"] == {("t", 0): 10, ("t", 1): 20}
    client.close()


def test_duplicate_contribution_counts_once_and_the_newest_map_wins(coordinator, names):
    group = names.group()
    _register(coordinator.endpoint, group, ["a", "b"])
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(coordinator.endpoint)

    def contribution(rid, offset):
        body = {
            "group": group,
            "seq": 1,
            "attempt": 0,
            "n_contributors": 2,
            "operator": "a",
            "offsets": [["t", 0, offset]],
            "timeout_ms": 10_000,
        }
        return json.dumps({"v": 1, "id": rid, "type": "merge_checkpoint", "body": body}).encode()

    try:
        sock.send(contribution("first", 1))
        sock.send(contribution("retry", 2))
        assert not sock.poll(300), "two contributions of one name completed a merge of 2"
        with CoordinatorClient(coordinator.endpoint, timeout=10) as c:
            assert c.merge_checkpoint(group, 1, 0, 2, "b", {("t", 1): 5}, 5.0) == {("t", 0): 2, ("t", 1): 5}
            # a retry after completion gets the same merged map again
            assert c.merge_checkpoint(group, 1, 0, 2, "b", {("t", 1): 5}, 5.0) == {("t", 0): 2, ("t", 1): 5}
        assert sock.poll(5000)
        reply = json.loads(sock.recv())
        assert reply["id"] == "retry"
        assert reply["type"] == "merge_checkpoint_reply"
        assert reply["body"]["contributors"] == ["a", "b"]
    finally:
        sock.close(0)


def test_merge_rejects_unregistered_and_mismatched_n(coordinator, names):
    group = names.group()
    _register(coordinator.endpoint, group, ["a", "b"])
    client = CoordinatorClient(coordinator.endpoint, timeout=10)
    with pytest.raises(NotRegistered):
        client.merge_checkpoint(group, 1, 0, 2, "stranger", {}, 1.0)
    t, box = _start(lambda: client.merge_checkpoint(group, 2, 0, 2, "a", {}, 1.0))
    _wait_pending(client, 1)
    with pytest.raises(Invalid):
        client.merge_checkpoint(group, 2, 0, 3, "b", {}, 1.0)
    t.join(5)
    assert isinstance(box.get("error"), MergeTimeout)
    client.close()


def test_conflicting_partitions_keep_the_minimum():
    merged, conflicts = merge_maps({"a": {("t", 0): 10, ("t", 1): 5}, "b": {("t", 0): 7}, "c": {("t", 0): 9}})
    assert merged == {("t", 0): 7, ("t", 1): 5}
    assert conflicts == 2


def test_merge_in_progress_survives_a_coordinator_restart(coordinator, names):
    """Pending merges are in memory; the waiting client re-sends after the restart and the merge completes."""
    group = names.group()
    _register(coordinator.endpoint, group, ["a", "b"])
    a = CoordinatorClient(coordinator.endpoint, timeout=10, try_timeout=0.5)
    ta, box = _start(lambda: a.merge_checkpoint(group, 9, 0, 2, "a", {("t", 0): 1}, 15.0))
    with CoordinatorClient(coordinator.endpoint, timeout=10) as probe:
        _wait_pending(probe, 1)
    coordinator.kill()
    coordinator.start()
    with CoordinatorClient(coordinator.endpoint, timeout=10) as b:
        assert b.merge_checkpoint(group, 9, 0, 2, "b", {("t", 1): 2}, 10.0) == {("t", 0): 1, ("t", 1): 2}
    ta.join(10)
    assert box.get("value") == {("t", 0): 1, ("t", 1): 2}
    a.close()
