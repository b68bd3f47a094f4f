"""Fencing of the Kafka log's writers and replay of committed transactions only, on the
test broker (in-process stores; the standby processes: test_kafka_standby.py).

Every store uses the defaults a user gets, on a topic of its own.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from coordinator.kafka.raw_batches import read_committed
from coordinator.store.kafka.kafka_log import KafkaLog
from coordinator.store.kafka.lease import decode_lease
from coordinator.store.kafka.settings import KafkaLogSettings
from coordinator.store.log.segment import LogFailed, set_crash_point
from coordinator.store.state_store import StateStore


@pytest.fixture
def settings(bootstrap, names) -> KafkaLogSettings:
    return KafkaLogSettings(bootstrap, names.topic("log"))


def _open(path: Path, settings: KafkaLogSettings) -> StateStore:
    store = StateStore(path, log=KafkaLog(settings))
    store.load()
    return store


def _raw(settings: KafkaLogSettings):
    return read_committed({"bootstrap_servers": settings.bootstrap.split(",")}, settings.topic, 0, deadline_s=30)


def test_a_newer_writer_fences_the_old_one_whose_later_writes_are_never_replayed(settings, tmp_path):
    old = _open(tmp_path / "old", settings)
    old.put_initial_offsets("g", {("t", 0): 10})
    old.sync()
    new = _open(tmp_path / "new", settings)  # init_transactions: the old writer's epoch is over
    assert new.get_initial_offsets("g") == {("t", 0): 10}
    old.put_initial_offsets("g", {("t", 1): 11})
    started = time.monotonic()
    with pytest.raises(LogFailed, match="Fenced"):
        old.sync()
    assert time.monotonic() - started < settings.write_timeout_s + 1  # bounded, not a hang
    with pytest.raises(LogFailed):  # fail-stop: nothing more is written
        old.put_initial_offsets("g", {("t", 2): 12})
    old.close()
    new.put_initial_offsets("g", {("t", 3): 13})
    new.sync()
    new.close()
    replayed = _open(tmp_path / "replay", settings)
    assert replayed.get_initial_offsets("g") == {("t", 0): 10, ("t", 3): 13}
    replayed.close()


def test_a_transaction_left_open_by_a_leader_is_aborted_by_the_next_and_never_applied(settings, tmp_path):
    leader = _open(tmp_path / "leader", settings)
    leader.put_initial_offsets("g", {("t", 0): 10})
    leader.sync()

    def crash(step: str) -> None:
        if step == "kafka-sent":
            raise RuntimeError("the leader stops between its records' acknowledgement and the commit")

    leader.put_initial_offsets("g", {("t", 1): 11})
    set_crash_point(crash)
    try:
        with pytest.raises(LogFailed, match="stops between"):
            leader.sync()
    finally:
        set_crash_point(None)
    leader.close()  # a forced close: no EndTxn, the transaction stays open on the broker
    before = _raw(settings)
    assert [t.records for t in before.open_transactions] == [1]
    # only the committed writes are visible: the first lease record and the first write
    assert [r.key for r in before.records] == [b"cr.lease", None]

    successor = _open(tmp_path / "successor", settings)
    assert successor.get_initial_offsets("g") == {("t", 0): 10}
    after = _raw(settings)
    assert after.open_transactions == ()
    assert after.aborted_records == 1
    successor.put_initial_offsets("g", {("t", 2): 12})
    successor.sync()
    successor.close()
    replayed = _open(tmp_path / "replay", settings)
    assert replayed.get_initial_offsets("g") == {("t", 0): 10, ("t", 2): 12}
    replayed.close()


def test_an_idle_leader_writes_lease_records_that_replay_skips(bootstrap, names, tmp_path):
    settings = KafkaLogSettings(bootstrap, names.topic("log"), lease_s=0.3)
    store = _open(tmp_path / "leader", settings)
    store.register_member("g", 0, "op")
    store.sync()
    for _ in range(3):
        time.sleep(settings.lease_interval_s)  # idle: the owner's loop calls keepalive
        store.keepalive()
    store.close()
    raw = _raw(settings)
    # the first write after the fence names the leader; then the group commit; then one per idle interval
    assert [r.key for r in raw.records] == [b"cr.lease", None, b"cr.lease", b"cr.lease", b"cr.lease"]
    replayed = _open(tmp_path / "replay", settings)
    assert replayed.members("g") == ["op"]
    assert replayed.stats().log_records == 1
    replayed.close()


def test_each_fence_raises_the_leader_epoch_which_the_lease_records_name(bootstrap, names, tmp_path):
    """The first write after a fence is a lease record naming the advertised endpoint and the
    new producer epoch; a busy leader's group commit carries one again after the lease
    interval; a standby reading them learns that leader."""
    settings = KafkaLogSettings(bootstrap, names.topic("log"), lease_s=0.3)
    first_log = KafkaLog(settings)
    first_log.advertise("tcp://first:1")
    first = StateStore(tmp_path / "first", log=first_log)
    first.load()
    first_epoch = first_log.leader()
    assert first_epoch is not None
    assert first_epoch.endpoint == "tcp://first:1"
    first.close()
    second_log = KafkaLog(settings)
    second_log.advertise("tcp://second:2")
    second = StateStore(tmp_path / "second", log=second_log)
    second.load()
    second_leader = second_log.leader()
    assert second_leader is not None
    assert second_leader.epoch > first_epoch.epoch
    second.register_member("g", 0, "op")
    second.sync()  # within the lease interval of the first lease record: no lease in it
    time.sleep(settings.lease_interval_s)
    second.register_member("g", 0, "op-2")
    second.sync()  # a busy leader: the lease rides in the group commit's transaction
    second.close()
    raw = _raw(settings)
    assert [r.key for r in raw.records] == [b"cr.lease", b"cr.lease", None, None, b"cr.lease"]
    leases = [decode_lease(r.value or b"") for r in raw.records if r.key == b"cr.lease"]
    assert leases == [first_epoch, second_leader, second_leader]
