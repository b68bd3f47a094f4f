"""A leader on the Kafka log paused at a chosen step of its write path
(``cr-coordinator --fault-point STEP:pause``), a standby taking over, the old leader
resumed: real processes, real ZeroMQ, the test broker.

- ``kafka-sent`` (a group commit's records are in the topic, its transaction not
  committed), while answering a client given both endpoints: the standby takes over
  and fences; the client's request, re-sent with the same id, is answered by the new
  leader; a request queued at the paused leader is never acknowledged; resumed, the
  old leader exits 1; its paused transaction is aborted and never applied: the new
  leader, and a coordinator replaying the topic alone on an empty state dir, hold
  exactly the acknowledged writes, the paused one once;
- ``snapshot-written`` (a snapshot's records written, its pointer not committed): the
  standby takes over; resumed, the old leader exits 1 at its next log write, and
  whatever its snapshot thread did with the pointer, the state replayed from the
  topics alone equals the new leader's.

Epochs rise at every takeover (the seed writer, the paused leader, the new leader).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import zmq

from coordinator.client import CoordinatorClient, EndpointRole
from coordinator.kafka.raw_batches import read_committed
from coordinator.launcher import CoordinatorProcess
from coordinator.protocol.common.waiting import wait_until
from coordinator.protocol.wire import envelope, protocol
from coordinator.store.kafka.kafka_log import KafkaLog
from coordinator.store.kafka.reader import read_pointer
from coordinator.store.kafka.settings import KafkaLogSettings
from coordinator.store.state_store import StateStore

from support.kafka_coordinator import LEASE_S, kafka_log_args

#: The standby serves within the lease, its fence and replay, and a ping's retry; past it
#: a paused leader that was not deposed would fail the test instead of hanging it.
TAKEOVER_BOUND_S = LEASE_S + 6.0
#: The paused leader reaches its fault point within a housekeeping pass (1 s) and a group
#: commit or a snapshot of a few records; past it the fault point never fired.
PAUSE_BOUND_S = 10.0
#: A resumed leader's next write is refused at once (its write bound, 3 s, is long past
#: after a pause of the lease): past this it kept running after the takeover.
EXIT_BOUND_S = 10.0
#: A client given both endpoints: each try is short, so it moves on from the paused
#: leader; the whole request outlasts the takeover.
TRY_S = 1.0
REQUEST_S = 15.0
#: What a request queued at the paused leader gets back arrives before the leader exits;
#: this much more, after it exited, catches a frame still in flight on the socket.
LATE_DRAIN_S = 0.5


def _stopped(pid: int) -> bool:
    """The process is stopped by a signal (state T in /proc)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rpartition(")")[2].split()[0] == "T"


def _start_standby(tmp_path: Path, args: list[str]) -> CoordinatorProcess:
    return CoordinatorProcess(tmp_path / "standby", extra_args=[*args, "--standby"]).start(serve=False)


def _serves(endpoint: str) -> bool:
    with CoordinatorClient(endpoint, timeout=0.3, try_timeout=0.3) as client:
        return client.probe(0.3).role is EndpointRole.LEADER


def _names(standby: str, leader: str) -> bool:
    with CoordinatorClient(standby, timeout=0.3, try_timeout=0.3) as client:
        return client.probe(0.3).leader == leader


def _epoch(endpoint: str) -> int:
    with CoordinatorClient(endpoint, timeout=2, try_timeout=1) as client:
        probe = client.probe(1.0)
    assert probe.role is EndpointRole.LEADER, probe
    assert probe.epoch is not None
    return probe.epoch


def _replay(
    path: Path, settings: KafkaLogSettings, groups: list[str], registered: list[str]
) -> tuple[dict[str, Any], int, int | None]:
    """A coordinator's store on an empty state dir, from the topics alone: its view, its epoch
    (it fences) and the snapshot pointer it started from."""
    kafka_log = KafkaLog(settings)
    store = StateStore(path, log=kafka_log)
    store.load()
    try:
        stats = store.stats()
        view = {
            "offsets": {g: store.get_initial_offsets(g) for g in groups},
            "members": {g: store.members(g) for g in registered},
            "control_variables": stats.control_variables,
            "live_entries": stats.live_entries,
        }
        leader = kafka_log.leader()
        assert leader is not None
        return view, leader.epoch, read_pointer(settings)
    finally:
        store.close()


def _view(endpoint: str, groups: list[str], registered: list[str]) -> dict[str, Any]:
    with CoordinatorClient(endpoint, timeout=10) as client:
        stats = client.status().store
        assert stats is not None
        return {
            "offsets": {g: client.get_initial_offsets(g) for g in groups},
            "members": {g: client.members(g) for g in registered},
            "control_variables": stats.control_variables,
            "live_entries": stats.live_entries,
        }


class LateRequest:
    """One put sent on a bare DEALER socket to the paused leader (only its endpoint, no
    re-send), so it waits in the leader's socket: every frame that comes back is kept.

    1. `send`: connect, send the request once.
    2. `frames`: after the leader has exited, read whatever it answered (nothing, or an
       error such as UNAVAILABLE); an OK reply would be a write acknowledged by a
       deposed leader.
    """

    def __init__(self, endpoint: str, group: str) -> None:
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.connect(endpoint)
        self._group = group

    def send(self) -> None:
        body = protocol.PutInitialOffsets(self._group, {("late", 0): 99}).to_body()
        self._sock.send(envelope.encode(protocol.PutInitialOffsets.TYPE, body, "late-1"))

    def frames(self) -> list[envelope.Envelope]:
        out = []
        while self._sock.poll(int(LATE_DRAIN_S * 1000), zmq.POLLIN):
            out.append(envelope.decode(self._sock.recv(), envelope.MAX_REPLY_DEPTH, from_server=True))
        self._sock.close(0)
        self._ctx.term()
        return out


def test_a_leader_paused_mid_transaction_is_fenced_and_its_transaction_never_applied(bootstrap, names, tmp_path):
    topic = names.topic("log")
    settings = KafkaLogSettings(bootstrap, topic)
    args = kafka_log_args(bootstrap, topic)
    group = names.group()
    # 1. acknowledged before the leader starts: one write by a first writer (epoch e0)
    seed_log = KafkaLog(settings)
    seed = StateStore(tmp_path / "seed", log=seed_log)
    seed.load()
    seed.put_initial_offsets(group, {("t", 0): 10})
    seed_leader = seed_log.leader()
    assert seed_leader is not None
    seed.close()
    # 2. the leader pauses in its first group commit, after the records are sent
    leader = CoordinatorProcess(tmp_path / "leader", extra_args=[*args, "--fault-point", "kafka-sent:pause"]).start()
    standby = _start_standby(tmp_path, args)
    answered: list[object] = []
    try:
        assert leader.endpoint is not None
        assert leader.pid is not None
        assert standby.endpoint is not None
        leader_epoch = _epoch(leader.endpoint)
        assert leader_epoch > seed_leader.epoch
        wait_until(lambda: _names(standby.endpoint or "", leader.endpoint), 10, "the standby to name the leader")
        both = f"{leader.endpoint},{standby.endpoint}"
        client = CoordinatorClient(both, timeout=REQUEST_S, try_timeout=TRY_S)

        def put() -> None:
            try:
                answered.append(client.put_initial_offsets(group, {("t", 1): 11}))
            except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                answered.append(exc)

        writer = threading.Thread(target=put, name="writer")
        started = time.monotonic()
        writer.start()
        wait_until(lambda: _stopped(leader.pid or 0), PAUSE_BOUND_S, "the leader to pause at kafka-sent")
        late = LateRequest(leader.endpoint, group)
        late.send()
        # 3. the standby takes over; the client's re-send is answered there
        wait_until(lambda: _serves(standby.endpoint or ""), TAKEOVER_BOUND_S, "the standby to take over")
        writer.join(REQUEST_S)
        assert not writer.is_alive()
        print(f"paused write answered by the new leader after {time.monotonic() - started:.2f}s")
        new_epoch = _epoch(standby.endpoint)
        raw = read_committed({"bootstrap_servers": [bootstrap]}, topic, 0, deadline_s=30)
        seen = (seed_leader.epoch, leader_epoch, new_epoch, client.fence.highest, raw)
        # kept for a failure's diagnosis: the epochs, the topic as read raw, the paused leader's log
        (tmp_path / "takeover.txt").write_text(f"{seen}\n\nthe paused leader:\n{leader.log_tail(200)}\n")
        assert answered == [{("t", 1): 11}], answered  # the effective values of the keys put
        assert new_epoch > leader_epoch, seen
        assert client.fence.highest == new_epoch, seen  # answered by the new leader
        # the fence aborted the paused transaction: its record is in the topic, never committed
        assert raw.aborted_records >= 1, seen
        assert raw.open_transactions == ()
        # 4. resumed, the old leader's commit is refused: it answers nothing more and exits 1
        assert _stopped(leader.pid)
        os.kill(leader.pid, signal.SIGCONT)
        wait_until(lambda: not leader.running, EXIT_BOUND_S, "the fenced leader to exit")
        assert leader.returncode == 1
        answers = late.frames()
        print(f"the request queued at the paused leader got: {[(f.type, f.body) for f in answers]}")
        assert all(frame.type == envelope.ERROR_TYPE for frame in answers), answers  # never acknowledged
        client.put_initial_offsets(group, {("t", 2): 12})
        client.close()
        expected = {("t", 0): 10, ("t", 1): 11, ("t", 2): 12}
        new_view = _view(standby.endpoint, [group], [])
        assert new_view["offsets"][group] == expected
    finally:
        leader.kill()
        assert standby.terminate(15) == 0
    # 5. the topic alone, on an empty state dir: the same state, a higher epoch
    replayed, replay_epoch, _pointer = _replay(tmp_path / "replay", settings, [group], [])
    assert replayed == new_view
    assert replay_epoch > new_epoch


def test_a_leader_paused_during_a_snapshot_is_fenced_and_the_replayed_state_is_the_new_leaders(
    bootstrap, names, tmp_path
):
    topic = names.topic("log")
    settings = KafkaLogSettings(bootstrap, topic)
    args = kafka_log_args(bootstrap, topic)
    group, other = names.group("a"), names.group("b")
    # any dead entry makes a snapshot due at the next housekeeping pass (1 s)
    snapshot_soon = ["--compact-min-bytes", "0", "--compact-dead-ratio", "0.001"]
    leader = CoordinatorProcess(
        tmp_path / "leader", extra_args=[*args, *snapshot_soon, "--fault-point", "snapshot-written:pause"]
    ).start()
    standby = _start_standby(tmp_path, args)
    try:
        assert leader.endpoint is not None
        assert leader.pid is not None
        assert standby.endpoint is not None
        leader_epoch = _epoch(leader.endpoint)
        wait_until(lambda: _names(standby.endpoint or "", leader.endpoint), 10, "the standby to name the leader")
        with CoordinatorClient(leader.endpoint, timeout=10) as client:
            client.put_initial_offsets(group, {("t", p): p for p in range(50)})
            client.register(other, 0, "op-a")
            client.register(other, 0, "op-b")
            client.unregister(other, "op-b")  # a dead entry: a snapshot is due
        started = time.monotonic()
        wait_until(lambda: _stopped(leader.pid or 0), PAUSE_BOUND_S, "the leader to pause at snapshot-written")
        assert read_pointer(settings) is None  # paused before the pointer
        wait_until(lambda: _serves(standby.endpoint or ""), TAKEOVER_BOUND_S, "the standby to take over")
        print(f"paused during a snapshot -> the standby serving: {time.monotonic() - started:.2f}s")
        new_epoch = _epoch(standby.endpoint)
        assert new_epoch > leader_epoch
        with CoordinatorClient(standby.endpoint, timeout=10) as client:
            assert client.get_initial_offsets(group) == {("t", p): p for p in range(50)}
            assert client.members(other) == ["op-a"]
            client.put_initial_offsets(group, {("u", 0): 7})
            client.register(other, 0, "op-c")
        # resumed: the snapshot thread may commit its pointer; the next log write is refused
        os.kill(leader.pid, signal.SIGCONT)
        wait_until(lambda: not leader.running, EXIT_BOUND_S, "the fenced leader to exit")
        assert leader.returncode == 1
        with CoordinatorClient(standby.endpoint, timeout=10) as client:
            client.put_initial_offsets(group, {("u", 1): 8})  # after the old leader's last act
        new_view = _view(standby.endpoint, [group, other], [other])
        assert new_view["offsets"][group] == {**{("t", p): p for p in range(50)}, ("u", 0): 7, ("u", 1): 8}
        assert new_view["members"][other] == ["op-a", "op-c"]
    finally:
        leader.kill()
        assert standby.terminate(15) == 0
    replayed, replay_epoch, pointer = _replay(tmp_path / "replay", settings, [group, other], [other])
    print(f"snapshot pointer after the old leader resumed: {pointer}")
    assert replayed == new_view
    assert replay_epoch > new_epoch
