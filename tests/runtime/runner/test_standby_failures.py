"""Where the hand-over to the runner's warm standby can break (the numbered
list in ``cr_consumer/runtime/runner/standby.py``), each on real processes
without a broker: real ``crkafka member`` processes against no coordinator, the
real standby where the failure is its own, stand-in standbys
(``tests/support/standby.py``) where a test needs it to fail at one point.

Every case ends the same way: the killed member is restarted once, cold, at
once (or within the hand-over's bound), the region is not failed, and the
standby that failed is killed and reaped."""

from __future__ import annotations

import itertools
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from coordinator.protocol.common.waiting import wait_until
from cr_consumer.exit_code import ExitCode
from cr_consumer.runtime.runner import standby as standby_mod
from cr_consumer.runtime.runner.launch import HANDOFF_TIMEOUT_S, STANDBY_MODULE, MemberLauncher
from cr_consumer.runtime.runner.member_proc import MemberProc
from cr_consumer.runtime.runner.standby_proc import HandoffFailed, StandbyState
from cr_consumer.runtime.runner.supervisor import MemberSupervisor

from support.standby import (
    CLOSES_STDIN,
    NEVER_READY,
    PIPELINE,
    READY_SLEEP,
    SAY,
    exits_after_reading,
    gone,
    member_command,
)

#: A cold restart is a fork and exec (the member's start-up happens after it):
#: its "start" follows the member's "exit" within this, on a loaded machine too.
COLD_RESTART_S = 1.0


@pytest.fixture(autouse=True)
def _quick_respawn(monkeypatch):
    monkeypatch.setattr(standby_mod, "RESPAWN_DELAY_S", 0.2)


def _start(tmp_path: Path, standby_argv: list[str]) -> MemberSupervisor:
    pipeline = tmp_path / "pipe.py"
    pipeline.write_text(PIPELINE)
    launcher = MemberLauncher(member_command(tmp_path, str(pipeline)), tmp_path, standby_argv=standby_argv)
    sup = MemberSupervisor(launcher, restart_members=True, standby=True)
    sup.start(1)
    return sup


def _stand_in(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _real_standby(tmp_path: Path) -> list[str]:
    return [sys.executable, "-m", STANDBY_MODULE, str(tmp_path / "pipe.py")]


def _kill_and_restart(sup: MemberSupervisor, restarts: int = 1) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """Kill member-0; once it is restarted: (its killed pid, its exit event, the last start event)."""
    pid = sup.kill("member-0")
    wait_until(lambda: sup.restarts()["member-0"] >= restarts, 15.0, "member-0's restart")
    events = list(sup.events)
    exit_event = next(e for e in events if e["kind"] == "exit" and e["pid"] == pid)
    start = [e for e in events if e["kind"] == "start" and e["member"] == "member-0"][-1]
    return pid, exit_event, start


def _assert_cold_restart(
    sup: MemberSupervisor, exit_event: dict[str, Any], start: dict[str, Any], within_s: float = COLD_RESTART_S
) -> None:
    assert "standby" not in start, start  # started cold
    assert start["t"] - exit_event["t"] < within_s, (exit_event, start)
    assert sup.failed is None
    assert sup.restarts() == {"member-0": 1}
    assert sup.pids()["member-0"] == start["pid"]  # the cold member runs
    # Popen returns once the child's exec has closed its close-on-exec descriptors,
    # before the kernel has set up the new program's arguments: until then (longer
    # on a loaded machine) /proc/<pid>/cmdline reads empty, as it does once the
    # process has ended. A member that ended keeps it empty: the wait fails.
    cmdline = wait_until(lambda: _cmdline(start["pid"]), 10.0, "the cold member's exec to finish")
    assert b"cr_consumer.cli.member" in cmdline, cmdline


def _cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read()


def _handoff_failure(sup: MemberSupervisor) -> dict[str, Any]:
    return next(e for e in sup.events if e["kind"] == "handoff-failed")


def test_1_a_standby_from_a_tree_without_the_standby_module_is_never_used_and_backs_off(tmp_path):
    """Each standby dies at once (``No module named ...``): they are replaced with
    a doubling delay, and a member killed meanwhile restarts cold at once."""
    sup = _start(tmp_path, [sys.executable, "-m", "cr_consumer.cli.no_such_standby", "p.py"])
    try:
        wait_until(
            lambda: len([e for e in sup.events if e["kind"] == "standby-start"]) >= 4, 30.0, "four standby starts"
        )
        _, exit_event, start = _kill_and_restart(sup)
        _assert_cold_restart(sup, exit_event, start)
        # from each standby's death, seen, to the next start: 0.4, 0.8, 1.6 s...: the
        # delay doubles (start to start would add each standby's own start-up, which
        # varies by more than the delays' steps on a loaded machine)
        starts = [e["t"] for e in sup.events if e["kind"] == "standby-start"]
        exits = [e["t"] for e in sup.events if e["kind"] == "standby-exit"]
        delays = [start - ended for ended, start in zip(exits, starts[1:])]
        assert len(delays) >= 3, delays
        assert all(b > a for a, b in itertools.pairwise(delays)), delays
        assert all(e["code"] == 1 for e in sup.events if e["kind"] == "standby-exit")
    finally:
        sup.stop()
    assert "No module named cr_consumer.cli.no_such_standby" in (tmp_path / "standby.log").read_text()


def test_1_a_standby_dying_in_its_imports_is_not_handed_the_member(tmp_path):
    """Alive but not ready yet (its imports take a second, then it dies): the
    member killed meanwhile does not wait for it, it restarts cold at once."""
    sup = _start(tmp_path, _stand_in("import sys, time; time.sleep(1.5); sys.exit(1)"))
    try:
        assert sup.standby is not None
        standby = wait_until(lambda: sup.standby.pid, 10.0, "a standby process")  # type: ignore[union-attr]
        _, exit_event, start = _kill_and_restart(sup)
        _assert_cold_restart(sup, exit_event, start)
        assert sup.pids()["member-0"] != standby
        wait_until(
            lambda: [e for e in sup.events if e["kind"] == "standby-exit" and e["pid"] == standby],
            10.0,
            "the standby's death, seen",
        )
        assert sup.restarts() == {"member-0": 1}  # its death is no member's
    finally:
        sup.stop()


def test_2_a_standby_never_ready_is_killed_and_replaced(tmp_path, monkeypatch):
    monkeypatch.setattr(standby_mod, "READY_TIMEOUT_S", 0.5)
    sup = _start(tmp_path, _stand_in(NEVER_READY))
    try:
        ended = wait_until(
            lambda: [e for e in sup.events if e["kind"] == "standby-exit"], 15.0, "the unready standby's end"
        )
        assert "was not ready" in ended[0]["reason"]
        assert ended[0]["code"] == -signal.SIGKILL
        assert gone(ended[0]["pid"])
        wait_until(
            lambda: [e for e in sup.events if e["kind"] == "standby-start" and e["pid"] != ended[0]["pid"]],
            15.0,
            "its replacement",
        )
    finally:
        sup.stop()


def test_3_a_ready_standby_killed_while_idle_then_a_member_death_at_once(tmp_path):
    sup = _start(tmp_path, _stand_in(READY_SLEEP))
    try:
        standby = wait_until(sup.standby_pid, 15.0, "a ready standby")
        os.kill(standby, signal.SIGKILL)
        _, exit_event, start = _kill_and_restart(sup)
        _assert_cold_restart(sup, exit_event, start)
        wait_until(lambda: sup.standby_pid() not in (None, standby), 15.0, "a new standby")
    finally:
        sup.stop()


def test_4_a_standby_that_does_not_read_its_stdin_fails_the_write(tmp_path):
    sup = _start(tmp_path, _stand_in(CLOSES_STDIN))
    try:
        standby = wait_until(sup.standby_pid, 15.0, "a ready standby")
        _, exit_event, start = _kill_and_restart(sup)
        _assert_cold_restart(sup, exit_event, start)
        failure = _handoff_failure(sup)
        assert failure["pid"] == standby
        assert "did not take the hand-over" in failure["reason"]
        assert gone(standby)
    finally:
        sup.stop()


def _stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:  # reaped since the caller's gone() looked: the next look sees it gone
        return False
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] == b"T"


def test_3_a_standby_stopped_while_idle_is_replaced_and_the_member_starts_cold_at_once(tmp_path):
    """SIGSTOP while it waits: seen in /proc (at the next round, or by the
    start's ``take``), killed and reaped; the restart does not wait for it."""
    sup = _start(tmp_path, _stand_in(READY_SLEEP))
    try:
        standby = wait_until(sup.standby_pid, 15.0, "a ready standby")
        os.kill(standby, signal.SIGSTOP)
        wait_until(lambda: gone(standby) or _stopped(standby), 10.0, "the stop to take effect")
        _, exit_event, start = _kill_and_restart(sup)
        _assert_cold_restart(sup, exit_event, start)
        ended = next(e for e in sup.events if e["kind"] == "standby-exit" and e["pid"] == standby)
        assert ended["reason"] == "is stopped (SIGSTOP)"
        assert ended["code"] == -signal.SIGKILL
        assert not [e for e in sup.events if e["kind"] == "handoff-failed"]
        assert gone(standby)  # killed and reaped: no orphan, no zombie
        wait_until(lambda: sup.standby_pid() not in (None, standby), 15.0, "a new standby")
    finally:
        sup.stop()


def test_5_a_standby_stopped_at_the_hand_over_is_bounded_then_killed_and_reaped(tmp_path):
    """SIGSTOP after the runner took it, before the hand-over: the line fits
    the pipe, so the write succeeds; no answer comes. Without the bound the
    stopped process would be the member for good, a member that never joins;
    with it the hand-over fails after HANDOFF_TIMEOUT_S (the supervisor then
    kills and reaps it and starts the member cold: tests 4, 6, 7)."""
    pipeline = tmp_path / "pipe.py"
    pipeline.write_text(PIPELINE)
    launcher = MemberLauncher(member_command(tmp_path, str(pipeline)), tmp_path, standby_argv=_real_standby(tmp_path))
    with open(tmp_path / "standby.log", "ab") as log_file:
        standby = launcher.spawn_standby(log_file)

    def ready() -> bool:
        standby.poll()
        return standby.state is StandbyState.READY

    try:
        wait_until(ready, 60.0, "the standby's imports")
        os.kill(standby.pid, signal.SIGSTOP)
        wait_until(lambda: standby.stopped(), 10.0, "the stop to take effect")
        m = MemberProc("member-0")
        t0 = time.monotonic()
        with pytest.raises(HandoffFailed, match="did not answer the hand-over in time"):
            launcher.hand_over(m, standby)
        assert HANDOFF_TIMEOUT_S <= time.monotonic() - t0 < HANDOFF_TIMEOUT_S + COLD_RESTART_S
        assert m.proc is None
        assert standby.state is StandbyState.ENDED
    finally:
        standby.end(signal.SIGKILL, "test over")
    assert standby.proc.returncode == -signal.SIGKILL
    assert gone(standby.pid)
    assert not os.path.exists(f"/proc/{standby.pid}")
    assert not (tmp_path / "member-0.log").exists()  # it never became the member


@pytest.mark.parametrize("code", [ExitCode.ERROR, ExitCode.CONFIG])
def test_6_7_a_standby_that_exits_after_reading_the_line_is_no_member_death(tmp_path, code):
    """It read the line and ended without answering: with ERROR (a crash after
    the write) or CONFIG (a standby of a version that rejects the line and
    cannot say so). Neither is member-0's exit: no backoff, no final code."""
    sup = _start(tmp_path, _stand_in(exits_after_reading(code)))
    try:
        standby = wait_until(sup.standby_pid, 15.0, "a ready standby")
        _, exit_event, start = _kill_and_restart(sup)
        _assert_cold_restart(sup, exit_event, start)
        failure = _handoff_failure(sup)
        assert failure["pid"] == standby
        assert "ended before it answered" in failure["reason"]
        assert [e["code"] for e in sup.events if e["kind"] == "exit"] == [-signal.SIGKILL]
        assert gone(standby)
    finally:
        sup.stop()


def test_7_the_real_standby_refusing_a_hand_over_says_why_and_the_member_starts_cold(tmp_path):
    """The member's log cannot be opened by the standby (a directory now); the
    cold member keeps writing to the log the runner holds open."""
    sup = _start(tmp_path, _real_standby(tmp_path))
    try:
        standby = wait_until(sup.standby_pid, 60.0, "the standby's imports")
        log = tmp_path / "member-0.log"
        log.rename(tmp_path / "member-0.log.before")
        log.mkdir()
        _, exit_event, start = _kill_and_restart(sup)
        _assert_cold_restart(sup, exit_event, start)
        failure = _handoff_failure(sup)
        assert failure["pid"] == standby
        assert "refused the hand-over" in failure["reason"]
        assert "Is a directory" in failure["reason"]
        assert gone(standby)
    finally:
        sup.stop()
    assert "bad hand-over" in (tmp_path / "standby.log").read_text()


def test_8_a_standby_that_took_the_member_then_dies_is_a_member_death(tmp_path):
    """After ``took`` it is member-0: its exit is member-0's, restarted (the
    second time with the quick-restart backoff); the next standby (told by a
    marker file to stay unready) is not used."""
    marker = tmp_path / "used"
    code = SAY + (
        f"import pathlib\nmarker = pathlib.Path({str(marker)!r})\n"
        "if marker.exists(): time.sleep(60)\n"
        "marker.touch(); say('ready'); sys.stdin.buffer.readline(); say('took', 'member-0'); sys.exit(1)"
    )
    sup = _start(tmp_path, _stand_in(code))
    try:
        standby = wait_until(sup.standby_pid, 15.0, "a ready standby")
        sup.kill("member-0")
        wait_until(lambda: sup.restarts()["member-0"] == 2, 15.0, "two restarts")
        exits = [(e["pid"], e["code"]) for e in sup.events if e["kind"] == "exit"]
        assert exits[1] == (standby, ExitCode.ERROR)
        starts = [e for e in sup.events if e["kind"] == "start"]
        assert [("standby" in e) for e in starts] == [False, True, False]
        assert starts[1]["pid"] == standby
        assert not [e for e in sup.events if e["kind"] == "handoff-failed"]
        assert sup.failed is None
    finally:
        sup.stop()


def test_9_a_standby_whose_runner_is_gone_exits_without_becoming_a_member(tmp_path):
    """The runner's ends of the stdin and status pipes close (as when it dies;
    its parent-death signal aside): the standby exits 0, before or after its
    imports, and opens no member log."""
    launcher = MemberLauncher(member_command(tmp_path, "p.py"), tmp_path, standby_argv=_real_standby(tmp_path))
    with open(tmp_path / "standby.log", "ab") as log_file:
        early, late = launcher.spawn_standby(log_file), launcher.spawn_standby(log_file)
    early.close()  # during its imports

    def ready() -> bool:
        late.poll()
        return late.state is StandbyState.READY

    wait_until(ready, 60.0, "the second standby's imports")
    late.close()  # waiting for a hand-over
    assert early.proc.wait(60) == ExitCode.OK
    assert late.proc.wait(60) == ExitCode.OK
    assert not list(tmp_path.glob("member-*.log"))
