"""A standby coordinator on the Kafka log (``cr-coordinator --state kafka --standby``):
real processes, real ZeroMQ, the test broker.

- kill -9 of the leader: the standby, started on an empty state directory, answers
  LOAD_IN_PROGRESS while it follows the log, then serves within the lease and a few
  seconds, with the same control variables, registry and region checkpoints; stopped
  before that (SIGTERM), it exits 0 and has written nothing;
- SIGSTOP of the leader past the lease: the standby takes over; after SIGCONT the old
  leader's next write fails, it exits non-zero without acknowledging it, and nothing
  it wrote after the fence is in the new leader's state;
- clients and members given every endpoint find the leader, and follow a takeover after
  a kill -9 or a SIGSTOP of the leader by themselves; the takeover raises the epoch
  every reply carries;
- a client and a member given only the standby's endpoint are redirected (NOT_LEADER
  naming the leader) and served there; ``crkafka status`` shows each endpoint's role,
  the leader and its epoch.

All use the defaults a user gets except a short lease (and write bound), which keeps
the tests short.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from coordinator.cli.status import roles
from coordinator.client import CoordinatorClient, EndpointRole
from coordinator.kafka.raw_batches import read_committed
from coordinator.launcher import CoordinatorProcess, CoordinatorStartError
from coordinator.protocol.common.waiting import wait_until
from coordinator.protocol.wire.errors import CoordinatorError, CoordinatorUnavailable
from coordinator.protocol.wire.status import CoordinatorStatus, Role
from coordinator.store.kafka.kafka_log import KafkaLog
from coordinator.store.kafka.settings import KafkaLogSettings
from coordinator.store.state_store import StateStore

from support.kafka_coordinator import LEASE_S, kafka_log_args
from support.scripted_member import member, region_status

#: The standby serves within the lease, its fence and replay, and one ping's retry.
FAILOVER_BOUND_S = LEASE_S + 4.0


class Standby:
    """A ``--standby`` coordinator (``CoordinatorProcess.start(serve=False)``: it answers
    LOAD_IN_PROGRESS until it takes over, so it is not pinged)."""

    def __init__(self, tmp_path: Path, args: list[str], http: str | None = None) -> None:
        self.state_dir = tmp_path / "standby"
        self.process = CoordinatorProcess(self.state_dir, http=http, extra_args=[*args, "--standby"]).start(serve=False)
        assert self.process.endpoint is not None
        self.endpoint: str = self.process.endpoint

    def serves(self) -> bool:
        assert self.process.running, f"standby exited with {self.process.returncode}"
        with CoordinatorClient(self.endpoint, timeout=0.3, try_timeout=0.3) as client:
            return client.probe(0.3).role is EndpointRole.LEADER  # no redirect followed

    def stop(self) -> int | None:
        """SIGTERM; its exit code."""
        return self.process.terminate(15)


def _view(endpoint: str, groups: list[str], region: str) -> dict[str, Any]:
    with CoordinatorClient(endpoint, timeout=10) as client:
        store_stats = client.status().store
        assert store_stats is not None
        store = store_stats.to_body()
        view: dict[str, Any] = {
            "store": {k: store[k] for k in ("control_variables", "groups", "documents", "live_entries")},
            "groups": {g: (client.get_initial_offsets(g), client.members(g)) for g in groups},
        }
    status = region_status(endpoint, region).region.to_body()
    view["region"] = {k: status[k] for k in ("name", "index", "last_consistent", "transactions")}
    return view


def test_kill_9_of_the_leader_the_standby_on_an_empty_dir_serves_the_same_state(bootstrap, names, tmp_path):
    args = kafka_log_args(bootstrap, names.topic("log"))
    groups = [names.group("a"), names.group("b")]
    region = names.group("region")
    leader = CoordinatorProcess(tmp_path / "leader", extra_args=args).start()
    standby = Standby(tmp_path, args)
    try:
        assert leader.endpoint is not None
        with CoordinatorClient(standby.endpoint, timeout=1, try_timeout=0.3) as client:
            wait_until(lambda: client.probe(0.3).leader == leader.endpoint, 10, "the standby to name the leader")
        with CoordinatorClient(leader.endpoint, timeout=10) as client:
            for i, group in enumerate(groups):
                client.register(group, i, "op-a")
                client.put_initial_offsets(group, {("t", p): p * 7 + i for p in range(300)})
        members = [member(leader.endpoint, region, f"m{i}", partition=i).start() for i in range(2)]
        try:
            wait_until(
                lambda: (region_status(leader.endpoint, region).region.last_consistent or 0) >= 2,
                30,
                "2 checkpoints",
            )
        finally:
            for m in members:
                m.stop()
        before = _view(leader.endpoint, groups, region)
        assert before["store"]["control_variables"] == 600
        assert before["region"]["last_consistent"] >= 2
        leader.kill()
        killed = time.monotonic()
        wait_until(standby.serves, FAILOVER_BOUND_S, "the standby to serve", interval=0.05)
        print(f"failover kill -9 -> serving: {time.monotonic() - killed:.2f}s")
        assert _view(standby.endpoint, groups, region) == before
        assert not list(standby.state_dir.glob("segment-*"))  # its state came from the log topic
    finally:
        leader.kill()
        assert standby.stop() == 0


@pytest.mark.parametrize("stop", ["kill", "pause"])
def test_clients_given_every_endpoint_find_the_leader_and_follow_a_takeover(bootstrap, names, tmp_path, stop):
    """A client and two members' control channels are given the standby's endpoint first and the
    leader's second: they find the leader (the standby answers LOAD_IN_PROGRESS). After a kill -9
    of the leader, or a SIGSTOP (its sockets stay open and silent), they move to the standby once
    it serves, and the region checkpoints on with the same member processes, none restarted or
    pointed anywhere by hand. The paused leader, continued, is fenced at its first write and
    exits; the region stays on the new leader."""
    args = kafka_log_args(bootstrap, names.topic("log"))
    region = names.group("region")
    leader = CoordinatorProcess(tmp_path / "leader", extra_args=args).start()
    standby = Standby(tmp_path, args)
    assert leader.endpoint is not None
    every = f"{standby.endpoint},{leader.endpoint}"

    def checkpoints(endpoint: str) -> int:
        return region_status(endpoint, region).region.last_consistent or 0

    members = [member(every, region, f"m{i}", partition=i).start() for i in range(2)]
    try:
        with CoordinatorClient(every, timeout=10) as client:
            assert client.ping() is not None
            wait_until(lambda: checkpoints(leader.endpoint or "") >= 2, 30, "2 checkpoints through the leader")
            epoch = client.fence.highest
            assert roles((standby.endpoint, leader.endpoint), {}) == [
                {"endpoint": standby.endpoint, "role": "standby", "leader": leader.endpoint, "epoch": epoch},
                {"endpoint": leader.endpoint, "role": "leader", "leader": leader.endpoint, "epoch": epoch},
            ]
            if stop == "kill":
                leader.kill()
            else:
                assert leader.pid is not None
                os.kill(leader.pid, signal.SIGSTOP)
            wait_until(standby.serves, FAILOVER_BOUND_S, "the standby to serve", interval=0.05)
            taken_over = checkpoints(standby.endpoint)
            wait_until(lambda: checkpoints(standby.endpoint) >= taken_over + 2, 60, "2 checkpoints on the new leader")
            assert client.ping() is not None  # the same client, moved on by itself
            assert client.fence.highest > epoch  # the new leader's fence raised the epoch
            assert all(m.channel.fence.highest == client.fence.highest for m in members)
            if stop == "pause":
                assert leader.pid is not None
                os.kill(leader.pid, signal.SIGCONT)
                wait_until(lambda: not leader.running, 15, "the fenced leader to exit")
                assert leader.returncode == 1  # fail-stop at its first write
                resumed = checkpoints(standby.endpoint)
                wait_until(lambda: checkpoints(standby.endpoint) >= resumed + 1, 60, "a checkpoint after the SIGCONT")
            assert [r["role"] for r in roles((standby.endpoint, leader.endpoint), {})] == ["leader", "unreachable"]
        status = region_status(standby.endpoint, region).region
        assert sorted(status.members) == ["m0", "m1"]
        assert all(m.incarnation == f"inc-{os.getpid()}-{name}" for name, m in status.members.items())
    finally:
        for m in members:
            m.stop()
        leader.kill()
        assert standby.stop() == 0


def test_a_client_and_a_member_given_only_the_standby_are_redirected_to_the_leader(bootstrap, names, tmp_path):
    """The standby answers NOT_LEADER naming the leader's endpoint (from the leader's lease
    records); a client and a member's control channel given only the standby's endpoint add
    the leader's to their list and are served there; crkafka status shows both roles, the
    leader and its epoch."""
    args = kafka_log_args(bootstrap, names.topic("log"))
    region = names.group("region")
    group = names.group()
    leader = CoordinatorProcess(tmp_path / "leader", extra_args=args).start()
    standby = Standby(tmp_path, args, http="auto")
    assert leader.endpoint is not None
    try:
        with CoordinatorClient(standby.endpoint, timeout=10) as client:
            client.put_initial_offsets(group, {("t", 0): 5})  # re-sent to the leader, same id
            assert client.get_initial_offsets(group) == {("t", 0): 5}
            epoch = client.fence.highest
        alone = member(standby.endpoint, region, "m0").start()  # start() waits for the join
        try:
            wait_until(
                lambda: (region_status(leader.endpoint or "", region).region.last_consistent or 0) >= 1,
                30,
                "a checkpoint",
            )
            assert alone.channel.fence.highest == epoch
        finally:
            alone.stop()
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "cr_consumer.cli.main",
                "status",
                "--coordinator",
                f"{standby.endpoint},{leader.endpoint}",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env={k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"},
        )
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)["coordinator"]
        assert (doc["endpoint"], doc["leader"], doc["epoch"]) == (leader.endpoint, leader.endpoint, epoch)
        assert [(e["endpoint"], e["role"], e["leader"]) for e in doc["endpoints"]] == [
            (standby.endpoint, "standby", leader.endpoint),
            (leader.endpoint, "leader", leader.endpoint),
        ]
        # a launcher waiting for a standby to serve is not fooled by its redirect
        waited = CoordinatorProcess(tmp_path / "other", extra_args=[*args, "--standby"], start_timeout=6)
        with pytest.raises(CoordinatorStartError, match="its last answer: standby"):
            waited.start()
        with urllib.request.urlopen(f"http://{standby.process.http_address}/status", timeout=10) as page:
            status = CoordinatorStatus.from_body(json.loads(page.read()))
        assert (status.role, status.leader, status.epoch, status.loaded) == (
            Role.STANDBY,
            leader.endpoint,
            epoch,
            False,
        )
    finally:
        leader.kill()
        assert standby.stop() == 0


def test_a_leader_paused_past_the_lease_is_fenced_and_exits_on_its_next_write(bootstrap, names, tmp_path):
    topic = names.topic("log")
    args = kafka_log_args(bootstrap, topic)
    group = names.group()
    leader = CoordinatorProcess(tmp_path / "leader", extra_args=args).start()
    standby = Standby(tmp_path, args)
    late: list[object] = []
    try:
        assert leader.endpoint is not None
        assert leader.pid is not None
        with CoordinatorClient(leader.endpoint, timeout=10) as client:
            client.put_initial_offsets(group, {("t", 0): 10})
        os.kill(leader.pid, signal.SIGSTOP)
        wait_until(standby.serves, FAILOVER_BOUND_S + 2, "the standby to take over", interval=0.05)
        with CoordinatorClient(standby.endpoint, timeout=10) as client:
            assert client.get_initial_offsets(group) == {("t", 0): 10}
            client.put_initial_offsets(group, {("t", 1): 11})

        def write_to_the_old_leader() -> None:
            try:
                with CoordinatorClient(leader.endpoint or "", timeout=15, try_timeout=15) as client:
                    late.append(client.put_initial_offsets(group, {("t", 2): 12}))
            except (CoordinatorError, CoordinatorUnavailable) as exc:
                late.append(exc)

        writer = threading.Thread(target=write_to_the_old_leader)
        writer.start()  # queued in the paused leader's socket
        os.kill(leader.pid, signal.SIGCONT)
        wait_until(lambda: not leader.running, 15, "the fenced leader to exit")
        assert leader.returncode == 1  # fail-stop
        writer.join(20)
        assert len(late) == 1
        assert isinstance(late[0], Exception), late  # never acknowledged
        with CoordinatorClient(standby.endpoint, timeout=10) as client:
            assert client.get_initial_offsets(group) == {("t", 0): 10, ("t", 1): 11}
    finally:
        leader.kill()
        assert standby.stop() == 0
    replayed = StateStore(tmp_path / "replay", log=KafkaLog(KafkaLogSettings(bootstrap, topic)))
    replayed.load()
    assert replayed.get_initial_offsets(group) == {("t", 0): 10, ("t", 1): 11}
    replayed.close()


def test_a_standby_stopped_before_it_takes_over_exits_0_and_writes_nothing(bootstrap, names, tmp_path):
    topic = names.topic("log")
    args = [*kafka_log_args(bootstrap, topic), "--log-lease", "60s"]  # no leader, and none taken over
    standby = Standby(tmp_path, args)
    try:
        assert not standby.serves()
    finally:
        assert standby.stop() == 0
    assert read_committed({"bootstrap_servers": [bootstrap]}, topic, 0, deadline_s=30).stop == 0
