"""The member runtime's fault points (cr_consumer/runtime/fault_points.py), without
a broker: arming, claiming, each action, invalid triggers, and the unarmed path."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from coordinator.protocol.common.waiting import wait_until
from coordinator.protocol.region.commands import Drain, Resume
from cr_consumer.runtime import fault_points
from cr_consumer.runtime.fault_points import Action, Point, TriggerError


@pytest.fixture
def fault_dir(tmp_path):
    fault_points.configure(tmp_path)
    try:
        yield tmp_path
    finally:
        fault_points.configure(None)


def test_unarmed_points_cost_nothing():
    fault_points.configure(None)

    def deliver(cmd):
        pass

    assert fault_points.lossy(deliver, "m0") is deliver  # no wrapper at all
    assert fault_points.hit(Point.AFTER_RESET, "m0") is False
    # one module-level bool test per hit: far below a microsecond (this thread's CPU
    # time: the wall clock adds whatever a loaded machine gives other processes)
    t0 = time.thread_time()
    for _ in range(100_000):
        fault_points.hit(Point.BEFORE_PUBLISH, "m0")
    assert (time.thread_time() - t0) / 100_000 < 2e-6


def test_drop_a_resume_once_for_the_targeted_member_only(fault_dir):
    got: dict[str, list] = {"a": [], "b": []}
    recv_a = fault_points.lossy(got["a"].append, "a")
    recv_b = fault_points.lossy(got["b"].append, "b")
    fault_points.arm(fault_dir, Point.RECEIVE_RESUME, Action.DROP, member="a")
    resume = Resume(4)
    recv_b(resume)  # not the targeted member: delivered, trigger left armed
    recv_a(Drain(5))  # another command: delivered
    recv_a(resume)  # dropped
    recv_a(resume)  # the trigger fired once: delivered
    assert got["b"] == [resume]
    assert got["a"] == [Drain(5), resume]
    [f] = fault_points.fired(fault_dir)
    assert (f.point, f.action, f.member, f.pid) == (Point.RECEIVE_RESUME, Action.DROP, "a", os.getpid())
    assert not list(fault_dir.glob("point.receive-resume@a"))  # claimed, not re-armed


def test_untargeted_trigger_fires_in_the_first_member_to_get_there(fault_dir):
    fault_points.arm(fault_dir, Point.RECEIVE_CHECKPOINT, Action.DROP)
    assert fault_points.hit(Point.RECEIVE_CHECKPOINT, "m1") is True
    assert fault_points.hit(Point.RECEIVE_CHECKPOINT, "m2") is False
    assert [f.member for f in fault_points.fired(fault_dir, Point.RECEIVE_CHECKPOINT)] == ["m1"]


def test_drop_is_refused_where_there_is_no_message_to_drop(fault_dir):
    with pytest.raises(TriggerError, match="drop"):
        fault_points.arm(fault_dir, Point.AFTER_RESET, Action.DROP)
    with pytest.raises(TriggerError, match="cannot be targeted"):
        fault_points.arm(fault_dir, Point.AFTER_RESET, Action.CRASH, member="a@b")


@pytest.mark.parametrize(
    "doc",
    [
        {"version": 99, "action": "crash"},
        {"version": 1, "action": "explode"},
        {"version": 1, "action": "drop"},  # drop at a point that cannot drop
        ["not", "an", "object"],
    ],
)
def test_an_invalid_trigger_is_set_aside_and_nothing_acts(fault_dir, doc):
    (fault_dir / "point.after-reset").write_text(json.dumps(doc))
    assert fault_points.hit(Point.AFTER_RESET, "m0") is False  # this process is still here
    assert fault_points.fired(fault_dir) == []
    [invalid] = list(fault_dir.glob("*.invalid"))
    assert invalid.name.startswith("point.after-reset.fired.m0.")


_CHILD = """
import sys
from cr_consumer.runtime import fault_points
from cr_consumer.runtime.fault_points import Point
print("ready", flush=True)
sys.stdin.readline()
fault_points.hit(Point[sys.argv[1]], "m0")
print("continued", flush=True)
"""


def _child(fault_dir: Path, point: Point) -> subprocess.Popen:
    env = dict(os.environ, **{fault_points.ENV_FAULT_DIR: str(fault_dir)})
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, point.name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout.readline().strip() == "ready"
    return proc


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_crash_kills_the_process_at_the_point(tmp_path):
    proc = _child(tmp_path, Point.AFTER_RESET)
    fault_points.arm(tmp_path, Point.AFTER_RESET, Action.CRASH, member="m0")
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert proc.wait(30) == -signal.SIGKILL
    assert proc.stdout.read() == ""  # nothing after the point ran
    [f] = fault_points.fired(tmp_path, Point.AFTER_RESET)
    assert (f.action, f.member, f.pid) == (Action.CRASH, "m0", proc.pid)


def test_pause_stops_the_process_until_sigcont(tmp_path):
    proc = _child(tmp_path, Point.MEMBER_START)
    try:
        fault_points.arm(tmp_path, Point.MEMBER_START, Action.PAUSE)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        _wait_state(proc.pid, "T")  # stopped, not killed
        [f] = fault_points.fired(tmp_path, Point.MEMBER_START)
        assert f.pid == proc.pid
        assert f.action is Action.PAUSE
        os.kill(proc.pid, signal.SIGCONT)
        assert proc.stdout.readline().strip() == "continued"
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _wait_state(pid: int, want: str, timeout: float = 30.0) -> None:
    wait_until(lambda: _state(pid) == want, timeout, f"pid {pid} in state {want}", interval=0.02)


def test_fault_tasks_pause_continue_and_close_continues_what_is_still_stopped(tmp_path):
    from cr_consumer.drill.fault_tasks import FaultTasks
    from cr_consumer.drill.timeline import TimelineWriter

    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]) for _ in range(2)]
    timeline = TimelineWriter(tmp_path / "drill.jsonl", "drill")
    tasks = FaultTasks(timeline)
    try:
        tasks.start("short", lambda: tasks.pause(procs[0].pid, 0.3, "p0"))
        tasks.start("long", lambda: tasks.pause(procs[1].pid, 600, "p1"))  # ended by close()
        _wait_state(procs[1].pid, "T")
        wait_until(
            lambda: tasks.fired == 1 and _state(procs[0].pid) != "T", 30, "the short pause to end", interval=0.02
        )
        assert not tasks.done()
        assert _state(procs[1].pid) == "T"
        tasks.close()
        assert tasks.done()
        assert tasks.all_fired() is True
        _wait_state(procs[1].pid, "S")  # continued, sleeping again
    finally:
        for p in procs:
            p.kill()
            p.wait(10)
        timeline.close()
    events = [json.loads(line)["ev"] for line in (tmp_path / "drill.jsonl").read_text().splitlines()]
    assert events.count("fault_pause") == 2
    assert events.count("fault_continue") == 2


def test_fault_tasks_report_a_point_that_never_fires(tmp_path, monkeypatch):
    from cr_consumer.drill import fault_tasks
    from cr_consumer.drill.timeline import TimelineWriter

    monkeypatch.setattr(fault_tasks, "FIRE_TIMEOUT_S", 0.3)
    timeline = TimelineWriter(tmp_path / "drill.jsonl", "drill")
    tasks = fault_tasks.FaultTasks(timeline)
    tasks.start("never", lambda: tasks.wait_fired(tmp_path, Point.AFTER_DRAIN, "m0"))
    wait_until(tasks.done, 30, "the fault tasks to finish", interval=0.02)
    tasks.close()
    timeline.close()
    assert tasks.all_fired() is False
    assert tasks.errors
    assert "after-drain" in tasks.errors[0]
    assert "did not fire" in tasks.errors[0]
