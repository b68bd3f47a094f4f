"""The runner's supervisor on stand-in member processes (a sleeping Python, no
broker, no coordinator): the fault handles validate the member they name before
changing anything, and stop() reaps every member within its bounds. A region's
member count is bounded before anything starts, and a region whose start fails
stops what it started."""

from __future__ import annotations

import os
import sys
import time

import pytest

from coordinator.protocol.common.waiting import wait_until
from cr_consumer.runtime.runner import supervisor as supervisor_mod
from cr_consumer.runtime.runner.launch import MemberLauncher
from cr_consumer.runtime.runner.region_runner import MAX_MEMBERS, Region
from cr_consumer.runtime.runner.supervisor import MemberSupervisor, NotRunning

SLEEP = "import time; time.sleep(60)"
#: Ignores SIGTERM, then says so on stdout (its log), then sleeps: a wedged member.
STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('deaf', flush=True); time.sleep(60)"
)


def _supervisor(tmp_path, *, ignore_sigterm: bool = False) -> MemberSupervisor:
    code = STUBBORN if ignore_sigterm else SLEEP
    launcher = MemberLauncher(lambda name, _n: [sys.executable, "-c", code], tmp_path)
    return MemberSupervisor(launcher, restart_members=False)


def test_handles_refuse_an_unknown_or_removed_member_and_change_nothing(tmp_path):
    sup = _supervisor(tmp_path)
    sup.start(2)
    try:
        with pytest.raises(NotRunning, match="member-7"):
            sup.kill("member-7")
        with pytest.raises(NotRunning, match="member-7"):
            sup.remove("member-7")
        assert sup.remove("member-1") == "member-1"
        events = list(sup.events)
        with pytest.raises(NotRunning, match="member-1"):
            sup.remove("member-1")
        with pytest.raises(NotRunning, match="member-1"):
            sup.kill("member-1")
        assert sup.events == events  # no second "remove" event, no "kill"
        assert sup.live() == ["member-0"]
    finally:
        sup.stop()
    assert all(pid is None for pid in sup.pids().values())


def test_stop_kills_a_member_that_ignores_sigterm_within_its_bounds(tmp_path, monkeypatch):
    monkeypatch.setattr(supervisor_mod, "STOP_TIMEOUT_S", 0.5)
    sup = _supervisor(tmp_path, ignore_sigterm=True)
    sup.start(2)
    pids = sup.pids()
    wait_until(
        lambda: all("deaf" in (tmp_path / f"{n}.log").read_text() for n in pids), 10.0, "the members to ignore SIGTERM"
    )
    t0 = time.monotonic()
    sup.stop()
    assert time.monotonic() - t0 < 0.5 + 2 * supervisor_mod.KILL_WAIT_S
    assert [e["kind"] for e in sup.events] == ["start", "start"]
    for pid in pids.values():
        assert pid is not None
        with pytest.raises(ProcessLookupError):  # killed and reaped
            os.kill(pid, 0)


@pytest.mark.parametrize("members", [0, MAX_MEMBERS + 1, True, 2.5])
def test_region_refuses_a_member_count_out_of_range(members):
    with pytest.raises(ValueError, match="members"):
        Region("examples.wordcount", members=members, bootstrap="127.0.0.1:1")


def test_a_region_whose_members_cannot_start_stops_its_coordinator(tmp_path):
    region = Region(
        "examples.wordcount",
        members=2,
        bootstrap="127.0.0.1:1",
        python=str(tmp_path / "no-python"),
        output_dir=tmp_path / "out",
        state_dir=tmp_path / "state",
    )
    with pytest.raises(FileNotFoundError):
        region.start()
    assert region.coordinator_proc is not None
    assert region.coordinator_proc.returncode is not None
    assert not region.coordinator_proc.running


def test_a_restart_that_cannot_spawn_is_retried_without_recounting(tmp_path, monkeypatch):
    monkeypatch.setattr(supervisor_mod, "RESTART_MAX_S", 0.5)
    argv = [sys.executable, "-c", SLEEP]
    launcher = MemberLauncher(lambda name, _n: list(argv), tmp_path)
    sup = MemberSupervisor(launcher, restart_members=True)
    sup.start(1)
    try:
        argv[0] = str(tmp_path / "no-python")  # from now on the member cannot be spawned
        sup.kill("member-0")
        wait_until(lambda: any(e["kind"] == "exit" for e in sup.events), 10.0, "the member's death to be seen")
        time.sleep(1.2)  # several supervisor rounds and two retries, all failing
        assert [e["kind"] for e in sup.events] == ["start", "kill", "exit"]
        assert sup.restarts() == {"member-0": 0}
        argv[0] = sys.executable
        wait_until(lambda: sup.restarts() == {"member-0": 1}, 10.0, "the retried restart")
        assert [e["kind"] for e in sup.events] == ["start", "kill", "exit", "start", "restart"]
    finally:
        sup.stop()
