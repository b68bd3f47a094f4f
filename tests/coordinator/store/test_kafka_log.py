"""The Kafka log (`coordinator.store.kafka`) on the test broker: a coordinator killed
with -9 and restarted on an empty state directory, snapshots, a crash between the
produce and the answer, hostile records on the log topic, a writer outside the log's
transactional id, bounds (fencing and standbys: test_kafka_log_fencing.py).

Every test uses the defaults a user gets (replication factor 3, min.insync.replicas
2: the test broker accepts them) on topics of its own.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from kafka import KafkaProducer

from coordinator.client import CoordinatorClient
from coordinator.launcher import CoordinatorProcess
from coordinator.protocol.common.osutil import free_port
from coordinator.protocol.common.waiting import wait_until
from coordinator.store import records
from coordinator.store.kafka.kafka_log import KafkaLog
from coordinator.store.kafka.reader import commit_pointer
from coordinator.store.kafka.settings import MAX_PAYLOAD_BYTES, KafkaLogSettings
from coordinator.store.kafka.snapshots import BEGIN, END, encode_mark
from coordinator.store.log.frame import LogError, RecordTooLarge, encode_record
from coordinator.store.log.segment import LogFailed, set_crash_point
from coordinator.store.state_store import StateStore

from support.paths import REPO
from support.scripted_member import member, region_status


@pytest.fixture
def settings(bootstrap, names) -> KafkaLogSettings:
    return KafkaLogSettings(bootstrap, names.topic("log"))


def _kafka_args(settings: KafkaLogSettings) -> list[str]:
    return ["--state", "kafka", "--kafka-bootstrap", settings.bootstrap, "--log-topic", settings.topic]


def _open(path: Path, settings: KafkaLogSettings, **kw) -> StateStore:
    store = StateStore(path, log=KafkaLog(settings), **kw)
    store.load()
    return store


def _log_entries(settings: KafkaLogSettings) -> list[list]:
    """Every entry of every record replay reads (the newest snapshot's, then the log topic's), in order."""
    entries: list[list] = []
    log = KafkaLog(KafkaLogSettings(settings.bootstrap, settings.topic))

    def on_record(_offset: int, payload: memoryview) -> None:
        entries.extend(records.decode(payload)[2])

    log.open(on_record)
    log.close()
    return entries


def _durable_view(endpoint: str, groups: list[str], region: str, settings: KafkaLogSettings, tmp_path: Path) -> dict:
    """What the coordinator keeps durably, as its clients and a replay of the topic see it."""
    with CoordinatorClient(endpoint, timeout=10) as client:
        store_stats = client.status().store
        assert store_stats is not None
        view: dict = {
            "store": {
                k: store_stats.to_body()[k] for k in ("control_variables", "groups", "documents", "live_entries")
            },
            "groups": {g: (client.get_initial_offsets(g), client.members(g)) for g in groups},
        }
    status = region_status(endpoint, region).region
    view["region"] = {k: status.to_body()[k] for k in ("name", "index", "last_consistent", "transactions")}
    replayed = _open(tmp_path / f"replay-{os.urandom(4).hex()}", settings)
    view["documents"] = replayed.documents("region")
    replayed.close()
    return view


def test_kill_9_and_a_restart_on_an_empty_state_dir_restore_the_state_exactly(settings, names, tmp_path):
    """Control variables, the registry and a region's checkpoints survive kill -9 of a
    coordinator whose log is on Kafka, restarted on a new, empty state directory."""
    groups = [names.group("a"), names.group("b")]
    region = names.group("region")
    first = CoordinatorProcess(tmp_path / "state-1", extra_args=_kafka_args(settings))
    first.start()
    second = None
    try:
        with CoordinatorClient(first.endpoint, timeout=10) as client:
            for i, group in enumerate(groups):
                client.register(group, i, "op-a")
                client.register(group, i, "op-b")
                for start in range(0, 600, 100):
                    client.put_initial_offsets(group, {("t", p): p * 7 + i for p in range(start, start + 100)})
        members = [member(first.endpoint, region, f"m{i}", partition=i).start() for i in range(2)]
        try:
            wait_until(
                lambda: (region_status(first.endpoint, region).region.last_consistent or 0) >= 3,
                30,
                "3 checkpoints",
            )
        finally:
            for m in members:
                m.stop()
        # The stopped members leave the region waiting for their drain answers: its
        # durable document stays as it is until the drain timeout (10 s).
        before = _durable_view(first.endpoint, groups, region, settings, tmp_path)
        assert before["region"]["last_consistent"] >= 3
        assert before["store"]["control_variables"] == 1200
        assert before["documents"][region]["last_consistent"] is not None
        first.kill()
        assert not (tmp_path / "state-2").exists()
        second = CoordinatorProcess(tmp_path / "state-2", bind=first.endpoint, extra_args=_kafka_args(settings))
        second.start()
        after = _durable_view(second.endpoint, groups, region, settings, tmp_path)
        assert after == before
        assert not list((tmp_path / "state-2").glob("segment-*"))  # the state came from Kafka
    finally:
        first.kill()
        if second is not None:
            second.terminate()


def test_a_snapshot_then_more_writes_then_a_restart_restores_everything(settings, tmp_path):
    store = _open(tmp_path, settings)
    for i in range(200):
        store.put_initial_offsets("g", {("t", i): i})
    store.register_member("g", 4, "op")
    store.put_document("region", "g", {"seq": 1})
    store.sync()
    store.compact(30)
    for i in range(200, 203):
        store.put_initial_offsets("g", {("t", i): i})
    store.put_document("region", "g", {"seq": 2})
    store.sync()
    store.close()

    store = _open(tmp_path, settings)
    assert store.get_initial_offsets("g") == {("t", i): i for i in range(203)}
    assert store.members("g") == ["op"]
    assert store.region_index("g") == 4
    assert store.get_document("region", "g") == {"seq": 2}
    # Replay read the snapshot (a record or two) and the 4 records after it, not the 202 before.
    assert store.stats().log_records <= 7
    store.close()


def test_a_snapshot_whose_pointer_was_not_committed_is_ignored(settings, tmp_path):
    """A crash or failure after a snapshot's records but before its pointer leaves the
    previous snapshot in force; the records written since are all replayed."""
    store = _open(tmp_path, settings)
    store.put_initial_offsets("g", {("t", 0): 0})
    store.compact(30)  # snapshot 1: committed
    store.put_initial_offsets("g", {("t", 1): 1})

    def fail_before_pointer(step: str) -> None:
        if step == "snapshot-written":
            raise RuntimeError("crash before the pointer")

    set_crash_point(fail_before_pointer)
    try:
        with pytest.raises(RuntimeError, match="compaction failed"):
            store.compact(30)
    finally:
        set_crash_point(None)
    assert store.stats().compaction_failures == 1
    store.put_initial_offsets("g", {("t", 2): 2})
    store.close()
    store = _open(tmp_path, settings)
    assert store.get_initial_offsets("g") == {("t", 0): 0, ("t", 1): 1, ("t", 2): 2}
    store.close()


CRASH_CHILD = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from coordinator.cli.main import main
    from coordinator.store.log.segment import set_crash_point

    trigger = Path(sys.argv[1])

    def crash_after_the_acks(step):
        if step == "kafka-acked" and trigger.exists():
            os._exit(9)  # the records are in Kafka; the replies are not sent

    set_crash_point(crash_after_the_acks)
    sys.exit(main(sys.argv[2:]))
    """
)


def test_a_crash_between_the_produce_and_the_answer_gives_the_resent_request_the_same_answer(settings, names, tmp_path):
    group = names.group()
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    trigger = tmp_path / "crash-now"
    argv = [str(trigger), "--bind", endpoint, "--state-dir", str(tmp_path / "s1"), *_kafka_args(settings)]
    with open(tmp_path / "child.log", "wb") as child_log:
        child = subprocess.Popen(
            [sys.executable, "-c", CRASH_CHILD, *argv],
            stdout=subprocess.PIPE,
            stderr=child_log,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    restarted = None
    try:
        assert child.stdout is not None
        assert child.stdout.readline().startswith(b"ready")
        client = CoordinatorClient(endpoint, timeout=60, try_timeout=0.5)
        assert client.register(group, 0, "op") == ["op"]
        offsets = {("t", p): 1000 + p for p in range(50)}
        answers: list = []
        trigger.touch()
        sender = threading.Thread(target=lambda: answers.append(client.put_initial_offsets(group, offsets)))
        sender.start()
        assert child.wait(30) == 9  # died after the produce, before the answer
        trigger.unlink()
        assert not answers
        # A new coordinator on an empty directory; the client re-sends the same request id.
        restarted = CoordinatorProcess(tmp_path / "s2", bind=endpoint, extra_args=_kafka_args(settings))
        restarted.start()
        sender.join(60)
        assert answers == [offsets]
        assert client.put_initial_offsets(group, {("t", 0): 5}) == {("t", 0): 1000}
        client.close()
        # Applied once: one control entry of the group in the log, written by the first attempt.
        control = [e for e in _log_entries(settings) if e[0] == records.CONTROL and e[1] == group]
        assert len(control) == 1
        assert dict(zip(control[0][3], control[0][4])) == {p: 1000 + p for p in range(50)}
    finally:
        child.kill()
        child.wait(10)
        if restarted is not None:
            restarted.terminate()


def _good_then(settings: KafkaLogSettings, tmp_path: Path, value: bytes) -> None:
    store = _open(tmp_path / "writer", settings)
    store.register_member("g", 0, "op")
    store.close()
    producer = KafkaProducer(bootstrap_servers=settings.bootstrap, acks="all")
    producer.send(settings.topic, value=value, partition=0).get(timeout=10)
    producer.close(timeout=10)


_GOOD = encode_record(records.encode(1.0, [records.registry_entry("h", 1)]))
_CRC = bytearray(_GOOD)
_CRC[-3] ^= 0x01


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (encode_record(records.encode(1.0, [records.registry_entry("h", 1)]), version=1), "format version 1"),
        (encode_record(records.encode(1.0, [records.registry_entry("h", 1)]), version=3), "upgrade the coordinator"),
        (bytes(_CRC), "CRC mismatch"),
        (_GOOD[:-4], "does not match"),
        (b"hello", "short record"),
        (encode_record(b'{"e": 5}'), "undecodable record"),
        (encode_record(records.encode(1.0, [records.member_entry("nobody", "op", True)])), "cannot be applied"),
    ],
    ids=["old-version", "new-version", "bad-crc", "truncated", "not-a-record", "undecodable", "inapplicable"],
)
def test_a_hostile_record_on_the_log_topic_is_refused_at_replay(settings, tmp_path, value, message):
    _good_then(settings, tmp_path, value)
    store = StateStore(tmp_path / "reader", log=KafkaLog(settings))
    with pytest.raises(LogError, match=message) as info:
        store.load()
    # the hostile record, after the writer's first lease record, the good one, and their
    # transactions' COMMIT markers
    assert re.search(r"(offset|record at) 4\b", str(info.value))
    assert not store.loaded
    store.close()


def test_a_writer_outside_the_transactional_id_makes_the_log_fail_stop(settings, tmp_path):
    store = _open(tmp_path, settings)
    store.register_member("g", 0, "op")
    store.sync()
    producer = KafkaProducer(bootstrap_servers=settings.bootstrap, acks="all")
    producer.send(settings.topic, value=_GOOD, partition=0).get(timeout=10)  # behind the store's back
    producer.close(timeout=10)
    store.register_member("g", 0, "op-2")
    with pytest.raises(LogFailed, match="another writer"):
        store.sync()
    with pytest.raises(LogFailed):
        store.sync()
    store.close()


def test_a_request_over_the_kafka_record_limit_is_refused_and_changes_nothing(settings, tmp_path):
    store = _open(tmp_path, settings)
    with pytest.raises(RecordTooLarge, match=f"> {MAX_PAYLOAD_BYTES}"):
        store.put_document("ns", "big", {"v": "x" * (MAX_PAYLOAD_BYTES + 1)})
    assert store.get_document("ns", "big") is None
    store.put_document("ns", "small", {"v": 1})
    store.close()
    store = _open(tmp_path, settings)
    assert store.documents("ns") == {"small": {"v": 1}}
    store.close()


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([_GOOD], "does not name a snapshot's start"),
        ([encode_record(encode_mark(BEGIN, 0)), _GOOD], "ends before its END mark"),
        ([encode_record(encode_mark(BEGIN, 0)), encode_record(encode_mark(END, 0, 5))], "does not close the snapshot"),
        ([encode_record(encode_mark(BEGIN, 0)), bytes(_CRC)], "CRC mismatch"),
    ],
    ids=["not-a-begin", "no-end", "wrong-count", "bad-crc"],
)
def test_a_pointer_to_a_damaged_snapshot_is_refused_at_replay(settings, tmp_path, values, message):
    """The pointer names only snapshots whose END was acknowledged: anything else there is
    damage, and start-up stops instead of replaying a partial state."""
    store = _open(tmp_path / "writer", settings)
    store.register_member("g", 0, "op")
    store.compact(30)
    store.close()
    producer = KafkaProducer(bootstrap_servers=settings.bootstrap, acks="all")
    offsets = [producer.send(settings.snapshot_topic, value=v, partition=0).get(timeout=10).offset for v in values]
    producer.close(timeout=10)
    commit_pointer(settings, offsets[0])
    store = StateStore(tmp_path / "reader", log=KafkaLog(settings))
    with pytest.raises(LogError, match=message):
        store.load()
    assert not store.loaded
    store.close()
