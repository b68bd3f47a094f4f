"""The region controller inside a real coordinator process, spoken to over real
ZeroMQ by the members' control channels (no Kafka: the 'members' here answer
commands directly, so the controller's protocol is observed on its own)."""

from __future__ import annotations

import queue

from coordinator.protocol.common.waiting import wait_until
from coordinator.protocol.region.config import RegionConfig
from coordinator.protocol.region.status import RegionStatus
from coordinator.protocol.region.transactions import PreparedTxn, Transactions, TxnPartition
from cr_consumer.runtime.member.control import ControlChannel

from support import scripted_member
from support.scripted_member import ScriptedMember

REGION = {
    "period_s": 0.3,
    "drain_timeout_s": 2.0,
    "reset_timeout_s": 2.0,
    "member_timeout_s": 2.0,
    "max_consecutive_resets": 3,
    "min_members": 2,
    "join_grace_s": 3.0,
}


def member(endpoint: str, region: str, name: str, fail_drain: bool = False) -> ScriptedMember:
    """A member that answers like a healthy one; its checkpoint names partition int(name[-1])."""
    return ScriptedMember(
        endpoint,
        region,
        name,
        REGION,
        fail_drain=fail_drain,
        checkpoint_offsets=lambda seq: [["t", int(name[-1]), seq * 10]],
    )


def region_status(endpoint: str, region: str) -> RegionStatus:
    return scripted_member.region_status(endpoint, region).region


def test_cycles_and_coordinator_kill_restart(coordinator, names):
    region = names.group("region")
    members = [member(coordinator.endpoint, region, f"m{i}").start() for i in range(2)]
    try:
        wait_until(lambda: (region_status(coordinator.endpoint, region).last_consistent or 0) >= 3, 20, "3 checkpoints")
        before = region_status(coordinator.endpoint, region)
        assert before.phase in ("RUNNING", "DRAINING", "CHECKPOINTING")
        # members saw: reset_to_initial first, then drain/checkpoint/resume(complete)
        assert members[0].seen[0]["cmd"] == "reset_to_initial"
        completes = [c["complete"] for c in members[0].seen if c["cmd"] == "resume" and c["complete"]]
        assert completes == sorted(completes)
        assert len(completes) >= 3
        assert any(c["cmd"] == "retire" for c in members[0].seen)

        coordinator.kill()
        coordinator.restart()

        # members rejoin; the region resets to its last consistent checkpoint (durable)
        def reset_seen():
            resets = [c for c in members[1].seen if c["cmd"] == "reset"]
            return resets[-1] if resets else None

        reset = wait_until(reset_seen, 20, "a reset after the restart")
        assert reset["seq"] >= before.last_consistent
        assert sorted(map(tuple, reset["offsets"]))[0][0] == "t"
        after = wait_until(
            lambda: (s := region_status(coordinator.endpoint, region)).last_consistent > reset["seq"] and s,
            20,
            "a checkpoint after the restart",
        )
        assert after.phase != "FAILED"
    finally:
        for m in members:
            m.stop()


def test_failing_member_fails_region_after_max_resets(coordinator, names):
    region = names.group("region")
    members = [
        member(coordinator.endpoint, region, "m0").start(),
        member(coordinator.endpoint, region, "m1", fail_drain=True).start(),
    ]
    try:
        status = wait_until(
            lambda: (s := region_status(coordinator.endpoint, region)).phase == "FAILED" and s,
            30,
            "the region to fail",
        )
        assert status.failed_reason
        assert "sink refused the batch" in status.failed_reason
        assert status.reset.resets == 1 + REGION["max_consecutive_resets"]  # the first start + the retries
        # the status says FAILED once the document is written; the push reaches the member after
        wait_until(lambda: any(c["cmd"] == "failed" for c in members[0].seen), 10, "the failed command at m0")
    finally:
        for m in members:
            m.stop()


def test_join_with_other_settings_is_refused(coordinator, names):
    region = names.group("region")
    ok = member(coordinator.endpoint, region, "m0").start()
    try:
        wait_until(lambda: ok.channel.joined.is_set(), 10, "join")
        other = ControlChannel(
            coordinator.endpoint,
            region,
            "m9",
            "x",
            RegionConfig.from_dict({**REGION, "period_s": 9.0, "name": region}),
            lambda c: None,
        )
        other.start()
        wait_until(lambda: other.failure is not None, 10, "refusal")
        assert "period_s" in str(other.failure)
        other.stop(leave=False)
    finally:
        ok.stop()


def test_member_joining_a_failed_region_is_told_so(coordinator, names):
    region = names.group("region")
    members = [
        member(coordinator.endpoint, region, "m0").start(),
        member(coordinator.endpoint, region, "m1", fail_drain=True).start(),
    ]
    try:
        wait_until(lambda: region_status(coordinator.endpoint, region).phase == "FAILED", 30, "the region to fail")
    finally:
        for m in members:
            m.stop()
    late = member(coordinator.endpoint, region, "m7").start()
    try:
        wait_until(lambda: any(c["cmd"] == "failed" for c in late.seen), 10, "the late member to hear FAILED")
    finally:
        late.stop()


def test_curve_member_joins_and_unknown_key_cannot(tmp_path, names):
    """A region over a CURVE coordinator: the member channel with an allowed key
    joins and runs cycles; one with an unknown key never joins."""
    from coordinator.launcher import CoordinatorProcess
    from coordinator.protocol import curve_keys

    keys = {n: curve_keys.keygen(tmp_path / "keys" / n, n) for n in ("server", "good", "bad")}
    allow = tmp_path / "allow"
    allow.mkdir()
    (allow / "good.key").write_bytes(keys["good"][0].read_bytes())
    server_public = curve_keys.load_public_key(keys["server"][0])
    proc = CoordinatorProcess(
        tmp_path / "state",
        extra_args=["--curve-secret-key", str(keys["server"][1]), "--curve-allow", str(allow)],
        client_kwargs={"curve_server_key": server_public, "curve_keypair": curve_keys.load_keypair(keys["good"][1])},
    )
    proc.start()
    region = names.group("region")
    config = RegionConfig.from_dict({**REGION, "min_members": 1, "name": region})
    seen: queue.SimpleQueue = queue.SimpleQueue()
    good = ControlChannel(
        proc.endpoint,
        region,
        "m0",
        "i0",
        config,
        lambda c: seen.put(c.to_body()),
        curve=(server_public, *curve_keys.load_keypair(keys["good"][1])),
    )
    bad = ControlChannel(
        proc.endpoint,
        region,
        "m1",
        "i1",
        config,
        lambda c: None,
        curve=(server_public, *curve_keys.load_keypair(keys["bad"][1])),
    )
    try:
        good.start()
        bad.start()
        assert good.joined.wait(10)
        assert seen.get(timeout=10)["cmd"] == "reset_to_initial"
        assert not bad.joined.wait(2.0)
    finally:
        good.stop(leave=False)
        bad.stop(leave=False)
        proc.terminate()


def test_the_members_transactions_survive_a_coordinator_kill_and_its_first_reset_hands_them_out(coordinator, names):
    """Each member answers its checkpoints with one prepared transaction; after kill -9 and a
    restart, the first reset hands each member its own entry of a checkpoint completed before the
    kill, as it answered it, and the entries are still shown in the status."""
    region = names.group("region")

    def answers(name: str):
        def at(seq: int) -> Transactions:
            p = int(name[-1])
            return Transactions(
                (PreparedTxn(f"{name}-{seq % 2}", 100 + p, 0, (TxnPartition("out", p, seq),)),),
                (f"{name}-0", f"{name}-1"),
            )

        return at

    members = [
        ScriptedMember(
            coordinator.endpoint,
            region,
            f"m{i}",
            REGION,
            checkpoint_offsets=lambda seq, i=i: [["t", i, seq * 10]],
            checkpoint_transactions=answers(f"m{i}"),
        ).start()
        for i in range(2)
    ]
    try:
        before = wait_until(
            lambda: (s := region_status(coordinator.endpoint, region)).last_consistent and s.transactions and s,
            20,
            "a checkpoint with transactions",
        )
        assert set(before.transactions) == {"m0", "m1"}
        assert all(t.prepared == 1 and t.fence == 2 for t in before.transactions.values())
        coordinator.kill()
        coordinator.restart()

        def reset_after_restart(m: ScriptedMember):
            def seen():
                resets = [c for c in m.seen if c["cmd"] == "reset" and c["seq"] >= before.last_consistent]
                return resets[-1] if resets else None

            return seen

        for m in members:
            reset = wait_until(reset_after_restart(m), 20, f"{m.name}'s reset after the restart")
            (entry,) = reset["resolve"]  # its own only: nobody is absent
            assert entry["member"] == m.name
            assert entry["seq"] >= before.transactions[m.name].seq
            assert entry == {"member": m.name, **answers(m.name)(entry["seq"]).to_wire(), "seq": entry["seq"]}
        after = wait_until(
            lambda: (s := region_status(coordinator.endpoint, region)).phase == "RUNNING" and s,
            20,
            "RUNNING after the reset",
        )
        assert set(after.transactions) == {"m0", "m1"}
    finally:
        for m in members:
            m.stop()
