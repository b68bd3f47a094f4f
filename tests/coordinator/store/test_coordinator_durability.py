"""Durability through the real process: kill -9 after acknowledged writes, torn tails, LOAD_IN_PROGRESS."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import zmq

from coordinator.client import CoordinatorClient
from coordinator.launcher import CoordinatorProcess
from coordinator.protocol.common.waiting import WaitTimeout, wait_until
from coordinator.protocol.wire.errors import CoordinatorUnavailable
from coordinator.store.state_store import StateStore
from cr_consumer.testing.broker import free_port


def test_kill9_keeps_every_acknowledged_write(coordinator, names):
    """Writers run flat out; kill -9 mid-stream; after restart every acknowledged value is there."""
    group = names.group()
    acked: dict[tuple[str, int], int] = {}
    lock = threading.Lock()
    stop = threading.Event()
    client = CoordinatorClient(coordinator.endpoint, timeout=1.0, try_timeout=0.5)
    assert client.register(group, 3, "op-a") == ["op-a"]
    client.register(group, 3, "op-b")

    def writer(w: int) -> None:
        i = 0
        while not stop.is_set():
            batch = {(f"t{w}", i + k): (i + k) * 7 for k in range(5)}
            try:
                effective = client.put_initial_offsets(group, batch)
            except CoordinatorUnavailable:
                return
            with lock:
                acked.update(effective)
            i += 5

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    with contextlib.suppress(WaitTimeout):  # the writers are stopped either way; the count is asserted below
        wait_until(lambda: len(acked) >= 2000, 10, "2000 acknowledged writes", interval=0.01)
    coordinator.kill()  # SIGKILL while writes are in flight
    stop.set()
    for t in threads:
        t.join(10)
    n_acked = len(acked)
    assert n_acked >= 2000

    coordinator.start()
    with CoordinatorClient(coordinator.endpoint, timeout=10) as c:
        stored = c.get_initial_offsets(group)
        assert c.members(group) == ["op-a", "op-b"]
    missing = {k: v for k, v in acked.items() if stored.get(k) != v}
    assert not missing, f"{len(missing)} of {n_acked} acknowledged entries lost, e.g. {list(missing.items())[:3]}"
    client.close()


def test_torn_tail_is_repaired_and_nothing_acknowledged_is_lost(coordinator, names):
    group = names.group()
    with CoordinatorClient(coordinator.endpoint, timeout=10) as c:
        c.register(group, 0, "op")
        c.put_initial_offsets(group, {("t", p): 100 + p for p in range(10)})
    coordinator.kill()
    segments = sorted(coordinator.state_dir.glob("segment-*.log"))
    assert len(segments) == 1
    good_size = segments[0].stat().st_size
    with open(segments[0], "ab") as f:  # a power cut mid-write: a length prefix and a few bytes
        f.write(b"\x00\x00\x01\x00\xde\xad\xbe")
    coordinator.start()
    with CoordinatorClient(coordinator.endpoint, timeout=10) as c:
        assert c.get_initial_offsets(group) == {("t", p): 100 + p for p in range(10)}
        assert c.members(group) == ["op"]
        # writes after the repair land after the last good record and survive another crash
        c.put_initial_offsets(group, {("t", 99): 1})
        status = c.status()
    assert status.load is not None
    assert status.load.truncated_bytes == 7
    assert segments[0].stat().st_size > good_size
    coordinator.kill()
    coordinator.start()
    with CoordinatorClient(coordinator.endpoint, timeout=10) as c:
        assert c.get_initial_offsets(group)[("t", 99)] == 1
        assert len(c.get_initial_offsets(group)) == 11


def test_sigterm_is_a_clean_shutdown(coordinator, names):
    group = names.group()
    with CoordinatorClient(coordinator.endpoint, timeout=10) as c:
        c.put_initial_offsets(group, {("t", 0): 42})
    assert coordinator.terminate() == 0
    assert "coordinator stopped cleanly" in coordinator.log_path.read_text()
    coordinator.start()
    with CoordinatorClient(coordinator.endpoint, timeout=10) as c:
        assert c.get_initial_offsets(group) == {("t", 0): 42}


def test_load_in_progress_then_success(tmp_path):
    """A large state dir: requests during the replay get LOAD_IN_PROGRESS; the client retries and succeeds."""
    state = tmp_path / "state"
    store = StateStore(state)
    store.load()
    # 2,000,000 entries in one-entry-per-partition records of 10,000: the replay
    # takes about a second here, long enough to observe LOAD_IN_PROGRESS.
    for b in range(200):
        store.put_initial_offsets("big", {(f"t{b}", p): p for p in range(10_000)})
    store.put_initial_offsets("probe", {("t", p): 100 + p for p in range(8)})
    store.sync()
    store.close()

    port = free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    ctx = zmq.Context.instance()
    raw = ctx.socket(zmq.DEALER)
    raw.setsockopt(zmq.LINGER, 0)
    raw.setsockopt(zmq.RECONNECT_IVL, 5)  # reach the coordinator within ms of its bind
    raw.connect(endpoint)  # queued until the coordinator binds
    log = open(tmp_path / "coordinator.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "coordinator", "--bind", endpoint, "--state-dir", str(state)],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    codes: list[str] = []
    try:
        result = {}

        def use_client() -> None:
            with CoordinatorClient(endpoint, timeout=30) as c:
                # A small read: the 2,000,000 entries only make the replay slow
                # enough to observe LOAD_IN_PROGRESS.
                result["offsets"] = c.get_initial_offsets("probe")

        t = threading.Thread(target=use_client)
        t.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            raw.send(json.dumps({"v": 1, "id": len(codes), "type": "ping", "body": {}}).encode())
            assert raw.poll(30_000)
            reply = json.loads(raw.recv())
            codes.append(reply["body"].get("code", reply["type"]))
            if reply["type"] == "ping_reply":
                break
        t.join(30)
        assert codes[0] == "LOAD_IN_PROGRESS", codes[:5]
        assert codes[-1] == "ping_reply"
        assert set(codes[:-1]) == {"LOAD_IN_PROGRESS"}
        assert result["offsets"] == {("t", p): 100 + p for p in range(8)}
    finally:
        raw.close(0)
        proc.terminate()
        proc.wait(10)
        log.close()


def test_second_coordinator_on_same_state_dir_fails(coordinator, tmp_path):
    other = CoordinatorProcess(coordinator.state_dir, log_path=tmp_path / "other.log", start_timeout=15)
    try:
        # a second coordinator must not open a locked state dir
        with pytest.raises(Exception, match=r"(?i:lock)|exited"):
            other.start()
    finally:
        other.kill()
    assert coordinator.running
    assert Path(coordinator.state_dir).is_dir()


def test_retention_expires_idle_groups_and_keeps_active_ones(tmp_path, names):
    """--retention through the process: an idle group's control variables are tombstoned, an active one's kept."""
    idle, active = names.group("idle"), names.group("active")
    proc = CoordinatorProcess(tmp_path / "state", extra_args=["--retention", "1.5s", "--expire-interval", "0.2s"])
    proc.start()
    try:
        with CoordinatorClient(proc.endpoint, timeout=10) as c:
            c.put_initial_offsets(idle, {("t", 0): 1, ("t", 1): 2})
            c.put_initial_offsets(active, {("t", 0): 3})
            deadline = time.monotonic() + 15
            while idle in c.status().registry.groups:  # (status does not count as the group's activity)
                assert time.monotonic() < deadline, "idle group never expired"
                assert c.get_initial_offsets(active) == {("t", 0): 3}  # a read keeps it active
                time.sleep(0.1)
            assert c.get_initial_offsets(active) == {("t", 0): 3}
        proc.kill()  # the tombstones are durable
        proc.start()
        with CoordinatorClient(proc.endpoint, timeout=10) as c:
            assert c.get_initial_offsets(idle) == {}
            assert c.get_initial_offsets(active) == {("t", 0): 3}
    finally:
        proc.terminate()
