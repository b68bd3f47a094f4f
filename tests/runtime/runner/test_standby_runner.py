"""The runner's warm standby without a broker: the hand-over and status lines
(versioned JSON, checked), a real standby process that opens no socket before
its hand-over, says ready, and then runs ``crkafka member`` with the argv, log
and Kafka properties handed to it, the supervisor replacing a standby killed
before use and stopping it with the region, and the opt-out. The hand-over's
failure paths: test_standby_failures.py."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

import pytest

from coordinator.protocol.common.transitions import IllegalTransition, StateMachine
from coordinator.protocol.common.waiting import wait_until
from cr_consumer.cli import run as run_cli
from cr_consumer.exit_code import ExitCode
from cr_consumer.runtime.runner import standby as standby_mod
from cr_consumer.runtime.runner.handoff import (
    MAX_HANDOFF_BYTES,
    MAX_STATUS_BYTES,
    Handoff,
    HandoffError,
    Status,
    StatusLine,
    decode,
    decode_status,
)
from cr_consumer.runtime.runner.launch import STANDBY_MODULE, MemberLauncher
from cr_consumer.runtime.runner.member_proc import MemberProc
from cr_consumer.runtime.runner.region_runner import Region
from cr_consumer.runtime.runner.standby_proc import (
    TRANSITIONS,
    HandoffFailed,
    StandbyProc,
    StandbyState,
    standby_machine,
)
from cr_consumer.runtime.runner.supervisor import MemberSupervisor

from support.standby import PIPELINE, READY_SLEEP, SAY, gone, member_command

SLEEP = "import time; time.sleep(60)"


def _ready(standby: StandbyProc, timeout: float = 60.0) -> None:
    def said() -> bool:
        standby.poll()
        return standby.state is StandbyState.READY

    wait_until(said, timeout, "the standby to say ready")


def test_handoff_round_trip_and_rejections():
    given = Handoff(argv=("p.py", "--name", "member-1"), log="/tmp/member-1.log")
    assert decode(given.encode()) == given
    for bad in (
        b'{"v":2,"argv":["a"],"log":"l"}\n',
        b'{"v":1,"argv":["a"],"log":"l"}',  # version; no newline
        b'{"v":1,"argv":[],"log":"l"}\n',
        b'{"v":1,"argv":[1],"log":"l"}\n',
        b'{"v":1,"argv":["a"],"log":""}\n',
        b'{"v":1,"argv":["a"],"log":"l","x":1}\n',
        b"[1]\n",
        b"not json\n",
        b" " * MAX_HANDOFF_BYTES + b"\n",
    ):
        with pytest.raises(HandoffError):
            decode(bad)
    with pytest.raises(HandoffError, match="too large"):
        Handoff(argv=("x" * MAX_HANDOFF_BYTES,), log="l").encode()
    assert given.member == "member-1"
    assert Handoff(argv=("p.py", "--name"), log="l").member == "?"


def test_status_round_trip_and_rejections():
    for line in (StatusLine(Status.READY), StatusLine(Status.TOOK, "member-3"), StatusLine(Status.REFUSED, "why")):
        assert decode_status(line.encode()) == line
    assert decode_status(StatusLine(Status.REFUSED, "x" * 5000).encode()).detail == "x" * 1000  # cut, not refused
    for bad in (
        b'{"v":2,"status":"ready"}\n',
        b'{"v":1,"status":"ready"}',
        b'{"v":1,"status":"gone"}\n',
        b'{"v":1,"status":"took","detail":7}\n',
        b'{"v":1,"status":"took","x":1}\n',
        b"[]\n",
        b'{"v":1,"status":"ready","detail":"' + b"x" * MAX_STATUS_BYTES + b'"}\n',
    ):
        with pytest.raises(HandoffError):
            decode_status(bad)


def test_the_standby_state_machine_allows_only_its_transitions():
    assert standby_machine(pid=1).state is StandbyState.STARTING
    for state in StandbyState:
        for new in StandbyState:
            machine = StateMachine("standby 1", TRANSITIONS, state, logging.getLogger(__name__))
            if new in TRANSITIONS[state]:
                machine.to(new, "test")
                assert machine.state is new
            else:
                with pytest.raises(IllegalTransition, match="standby 1: illegal transition"):
                    machine.to(new, "test")
                assert machine.state is state
    assert not TRANSITIONS[StandbyState.MEMBER]
    assert not TRANSITIONS[StandbyState.ENDED]


def test_a_standby_opens_no_socket_then_runs_the_member_it_is_handed(tmp_path):
    """Before the hand-over: imports done, no socket. After it: the process is
    the member, logging to the member's log and reading the Kafka properties
    that follow the line (here malformed, so the member exits with CONFIG and
    says why in its own log)."""
    pipeline = tmp_path / "pipe.py"
    pipeline.write_text(PIPELINE)
    launcher = MemberLauncher(
        member_command(tmp_path, str(pipeline), kafka_stdin=True),
        tmp_path,
        kafka_stdin=b"not json",
        standby_argv=[sys.executable, "-m", STANDBY_MODULE, str(pipeline)],
    )
    with open(tmp_path / "standby.log", "ab") as log_file:
        standby = launcher.spawn_standby(log_file)
    proc = standby.proc
    try:
        _ready(standby)
        assert "standby ready" in (tmp_path / "standby.log").read_text()
        fds = [os.readlink(f"/proc/{proc.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{proc.pid}/fd")]
        assert not [fd for fd in fds if fd.startswith("socket:")], fds
        m = MemberProc("member-4")
        launcher.hand_over(m, standby)
        assert m.proc is proc
        assert standby.state is StandbyState.MEMBER
        assert proc.wait(30) == ExitCode.CONFIG
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        standby.close()
    member_log = (tmp_path / "member-4.log").read_text()
    assert "Kafka properties on stdin: not JSON" in member_log
    assert "this process is now member member-4" in (tmp_path / "standby.log").read_text()


def test_a_standby_ends_when_its_stdin_closes_or_its_line_is_bad(tmp_path):
    launcher = MemberLauncher(
        lambda n, _m: [], tmp_path, standby_argv=[sys.executable, "-m", STANDBY_MODULE, "no_such_pipeline_module"]
    )
    with open(tmp_path / "standby.log", "ab") as log_file:
        closed, bad = launcher.spawn_standby(log_file), launcher.spawn_standby(log_file)
    assert closed.proc.stdin is not None
    closed.proc.stdin.close()  # the runner stopped it (or died)
    _ready(bad)
    with pytest.raises(HandoffFailed, match="refused the hand-over: hand-over: expected a version-1 object"):
        bad.hand_over(b'{"v":9}\n', 30.0)
    assert bad.state is StandbyState.ENDED
    assert closed.proc.wait(60) == ExitCode.OK
    assert bad.proc.wait(60) == ExitCode.CONFIG
    closed.close()
    bad.close()
    text = (tmp_path / "standby.log").read_text()
    assert "does not load" in text  # a pipeline that does not load is left to the member to report
    assert "bad hand-over" in text


def test_hand_over_to_a_dead_standby_is_refused(tmp_path):
    launcher = MemberLauncher(
        member_command(tmp_path, "p.py"), tmp_path, standby_argv=[sys.executable, "-c", SAY + "say('ready')"]
    )
    with open(tmp_path / "standby.log", "ab") as log_file:
        standby = launcher.spawn_standby(log_file)
    standby.proc.wait(30)
    _ready(standby)  # it said ready, then ended
    m = MemberProc("member-0")
    with pytest.raises(HandoffFailed, match="did not take the hand-over"):  # EPIPE
        launcher.hand_over(m, standby)
    assert m.proc is None
    assert standby.state is StandbyState.ENDED
    standby.close()


def test_a_standby_killed_before_use_is_replaced_and_stop_ends_it(tmp_path, monkeypatch):
    monkeypatch.setattr(standby_mod, "RESPAWN_DELAY_S", 0.2)
    launcher = MemberLauncher(
        lambda n, _m: [sys.executable, "-c", SLEEP], tmp_path, standby_argv=[sys.executable, "-c", READY_SLEEP]
    )
    sup = MemberSupervisor(launcher, restart_members=True, standby=True)
    sup.start(1)
    try:
        first = wait_until(sup.standby_pid, 10.0, "the first standby")  # RESPAWN_DELAY_S after the start
        os.kill(first, signal.SIGKILL)
        second = wait_until(lambda: (p := sup.standby_pid()) not in (None, first) and p, 10.0, "a new standby")
        kinds = [(e["kind"], e.get("pid")) for e in sup.events if e["member"] == "standby"]
        assert kinds == [("standby-start", first), ("standby-exit", first), ("standby-start", second)]
        assert sup.live() == ["member-0"]  # a standby is no member
    finally:
        sup.stop()
    assert gone(second)
    assert sup.standby_pid() is None


def test_a_restarted_member_takes_the_standby_then_a_new_one_starts(tmp_path, monkeypatch):
    """The supervisor hands a dead member's name to the standby (here a stand-in
    that reads its stdin and sleeps), and starts the next standby later."""
    monkeypatch.setattr(standby_mod, "RESPAWN_DELAY_S", 0.3)
    reader = SAY + "say('ready'); sys.stdin.buffer.readline(); say('took', 'member-0'); time.sleep(60)"
    pipeline = tmp_path / "pipe.py"
    pipeline.write_text(PIPELINE)
    launcher = MemberLauncher(
        member_command(tmp_path, str(pipeline), kafka_stdin=False),
        tmp_path,
        standby_argv=[sys.executable, "-c", reader],
    )
    sup = MemberSupervisor(launcher, restart_members=True, standby=True)
    sup.start(1)
    try:
        # member-0 started cold: a real member, waiting to join a coordinator that is not there
        standby = wait_until(sup.standby_pid, 10.0, "the first standby")
        sup.kill("member-0")
        wait_until(lambda: sup.restarts() == {"member-0": 1}, 10.0, "the restart")
        assert sup.pids()["member-0"] == standby
        starts = [e for e in sup.events if e["kind"] == "start"]
        assert starts[-1] == {**starts[-1], "member": "member-0", "pid": standby, "standby": True}
        wait_until(lambda: sup.standby_pid() not in (None, standby), 10.0, "the next standby")
    finally:
        sup.stop()
    assert gone(standby)


def test_no_standby_with_the_opt_out(tmp_path, monkeypatch):
    assert Region("p.py", bootstrap="127.0.0.1:1").standby
    assert not Region("p.py", bootstrap="127.0.0.1:1", standby=False).standby
    assert not Region("p.py", bootstrap="127.0.0.1:1", restart_members=False).standby
    launcher = MemberLauncher(
        lambda n, _m: [sys.executable, "-c", SLEEP], tmp_path, standby_argv=[sys.executable, "-c", SLEEP]
    )
    sup = MemberSupervisor(launcher, restart_members=True, standby=False)
    sup.start(1)
    try:
        sup.kill("member-0")
        wait_until(lambda: sup.restarts() == {"member-0": 1}, 10.0, "the cold restart")
        assert sup.standby_pid() is None
        assert not [e for e in sup.events if e["member"] == "standby" or e.get("standby")]
    finally:
        sup.stop()
    # crkafka run --no-standby builds its region without one
    seen: dict[str, object] = {}

    def region(*args: object, **kwargs: object) -> Region:
        seen.update(kwargs)
        raise ValueError("stop here")

    monkeypatch.setattr(run_cli, "Region", region)
    for flags, expected in (([], True), (["--no-standby"], False)):
        parser = argparse.ArgumentParser()
        run_cli.add_arguments(parser)
        args = parser.parse_args(["p.py", "--bootstrap", "127.0.0.1:1", *flags])
        args.log_level, args.log_format = "INFO", "text"
        assert run_cli.run(args) == ExitCode.CONFIG
        assert seen["standby"] is expected
