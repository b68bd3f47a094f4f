"""A drill with a standby coordinator (``DrillConfig.coordinator_standby``): the pair the drill
starts, and the takeover a coordinator fault makes the standby perform.

The drill starts the pair before anything else (:func:`start_leader_and_standby`); the
members and the drill's clients get both endpoints. kill-coordinator and pause-coordinator
(``faults.py``) then act on the leader (:func:`kill_leader`, :func:`pause_leader`) and leave a
fault task that follows the takeover (:func:`_follow_takeover`). What that task saw is a
:class:`Takeover` (``env.takeover``), the report's ``takeover`` (:class:`TakeoverRecord`). A
takeover that does not show within its bound, or shows the wrong epoch or exit code, fails the
task, and so the drill.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypedDict

import attrs

from coordinator.client import CoordinatorClient, EndpointRole
from coordinator.launcher import CoordinatorProcess
from coordinator.protocol.common.waiting import wait_until
from coordinator.protocol.wire.errors import CoordinatorError, CoordinatorUnavailable
from cr_consumer.drill.fault_tasks import STATUS_TIMEOUT_S, TASK_POLL_S, FaultTasks
from cr_consumer.drill.timeline import TimelineWriter

#: Bound on the standby naming the leader after both started.
STANDBY_READY_S = 30.0
#: Bound on one probe of an endpoint (a ping, no redirect followed).
PROBE_S = 1.0
#: Bound on the standby's takeover after the leader was killed or paused: the lease, the fence,
#: the replay of the log and a busy 2-core machine.
TAKEOVER_BOUND_S = 30.0
#: Bound on the paused leader's exit after its SIGCONT: its next write (a lease record every
#: third of the lease at the latest) is refused, it fails and exits.
FENCED_EXIT_S = 20.0
#: Bound on the region's first checkpoint completed on the new leader after the takeover
#: (and, paused, after the old leader exited): the members' move to the new leader, their
#: join, a reset and a checkpoint period.
CHECKPOINT_AFTER_S = 60.0
#: The exit code of a leader that finds itself fenced at a write (docs/durable-state.md).
FENCED_EXIT_CODE = 1


def start_leader_and_standby(
    bootstrap: str, coordinator_dir: Path, logs_dir: Path, log_topic: str, lease_s: float
) -> tuple[CoordinatorProcess, CoordinatorProcess]:
    """1. Start the leader with its log on topic ``log_topic`` of the drill's broker
    (``--state kafka``, lease ``lease_s``) and wait until it serves; 2. start the standby (same
    log, ``--standby``); 3. wait until the standby names the leader (it read the leader's lease
    record), so a takeover is possible from the first fault on. A standby that fails to start
    stops the leader."""
    args = [
        "--state",
        "kafka",
        "--kafka-bootstrap",
        bootstrap,
        "--log-topic",
        log_topic,
        "--log-lease",
        f"{lease_s:g}s",
    ]
    leader = CoordinatorProcess(
        coordinator_dir / "leader", http="auto", extra_args=args, log_path=logs_dir / "coordinator.log"
    ).start()
    try:
        standby = CoordinatorProcess(
            coordinator_dir / "standby",
            http="auto",
            extra_args=[*args, "--standby"],
            log_path=logs_dir / "coordinator-standby.log",
        ).start(serve=False)
        assert standby.endpoint is not None  # set from its ready line
        with CoordinatorClient(standby.endpoint, timeout=PROBE_S, try_timeout=PROBE_S) as client:

            def names_the_leader() -> bool:
                probe = client.probe(PROBE_S)
                return probe.role is EndpointRole.STANDBY and probe.leader == leader.endpoint

            try:
                wait_until(names_the_leader, STANDBY_READY_S, "the standby coordinator to name the leader")
            except BaseException:
                standby.terminate()
                raise
    except BaseException:
        leader.terminate()
        raise
    return leader, standby


class TakeoverRecord(TypedDict):
    """A standby's takeover as the report's ``takeover`` holds it (:class:`Takeover`)."""

    fault: str
    old_leader: str
    old_leader_pid: int | None
    new_leader: str
    epoch_before: int
    epoch_after: int | None
    #: Seconds from the fault to the standby answering a ping itself.
    takeover_s: float | None
    #: When the new leader was first seen serving (epoch seconds).
    served_at: float | None
    #: pause-coordinator: the old leader's exit code after its SIGCONT (None: killed, or did not exit).
    old_leader_exit: int | None
    #: The region's last consistent checkpoint on the new leader when it was first seen there,
    #: and the first one completed after that (after the old leader's exit when paused).
    checkpoint_at_takeover: int | None
    checkpoint_after: int | None
    #: Seconds from the fault to the controller's first RESUME after ``served_at`` (``verdict.conclude``).
    resume_after_takeover_s: float | None


@attrs.define
class Takeover:
    """What :func:`_follow_takeover` saw (written by its task thread, read once the tasks ended)."""

    fault: str
    old_leader: str
    old_leader_pid: int | None
    new_leader: str
    epoch_before: int
    fault_at: float
    epoch_after: int | None = None
    takeover_s: float | None = None
    served_at: float | None = None
    old_leader_exit: int | None = None
    checkpoint_at_takeover: int | None = None
    checkpoint_after: int | None = None

    def record(self, resume_after_takeover_s: float | None) -> TakeoverRecord:
        return {
            "fault": self.fault,
            "old_leader": self.old_leader,
            "old_leader_pid": self.old_leader_pid,
            "new_leader": self.new_leader,
            "epoch_before": self.epoch_before,
            "epoch_after": self.epoch_after,
            "takeover_s": self.takeover_s,
            "served_at": self.served_at,
            "old_leader_exit": self.old_leader_exit,
            "checkpoint_at_takeover": self.checkpoint_at_takeover,
            "checkpoint_after": self.checkpoint_after,
            "resume_after_takeover_s": resume_after_takeover_s,
        }


class TakeoverEnv(Protocol):
    """What a coordinator fault under a standby acts on (the drill's ``faults.DrillEnv``)."""

    #: The leader the drill started.
    coordinator: CoordinatorProcess
    tasks: FaultTasks
    timeline: TimelineWriter
    #: The region's name, for its status on the new leader.
    group: str
    pause_s: float
    #: Set by the fault, before its task starts.
    takeover: Takeover | None


def _serving_epoch(endpoint: str) -> list[int]:
    """``[epoch]`` when ``endpoint`` answers a ping itself (one try, no redirect followed) with
    that epoch, else ``[]`` (a list: epoch 0 is a leader's too, and ``wait_until`` waits for a
    true result)."""
    with CoordinatorClient(endpoint, timeout=PROBE_S, try_timeout=PROBE_S) as client:
        probe = client.probe(PROBE_S)
    return [probe.epoch] if probe.role is EndpointRole.LEADER and probe.epoch is not None else []


def _leader_epoch(env: TakeoverEnv, fault: str) -> tuple[str, int]:
    """The leader's endpoint and the epoch it serves with, before the fault (bounded)."""
    endpoint = env.coordinator.endpoint
    if endpoint is None or not env.coordinator.running:
        raise RuntimeError(f"{fault}: the leader is not running (a second coordinator fault under a standby)")

    [epoch] = wait_until(
        lambda: _serving_epoch(endpoint), TAKEOVER_BOUND_S, f"{fault}: the leader {endpoint} to answer a ping"
    )
    return endpoint, epoch


def kill_leader(env: TakeoverEnv, standby: CoordinatorProcess) -> Takeover:
    """kill-coordinator with a standby: 1. probe the leader for its epoch; 2. SIGKILL it (it is
    not restarted); 3. a task follows the takeover (:func:`_follow_takeover`)."""
    old, epoch = _leader_epoch(env, "kill-coordinator")
    pid = env.coordinator.pid
    takeover = env.takeover = _takeover("kill-coordinator", old, pid, standby, epoch)
    env.coordinator.kill()
    env.tasks.start("kill-coordinator", lambda: _follow_takeover(env, standby, paused=None))
    return takeover


def pause_leader(env: TakeoverEnv, standby: CoordinatorProcess) -> Takeover:
    """pause-coordinator with a standby: 1. probe the leader for its epoch; 2. SIGSTOP it;
    3. a task follows the takeover, keeps the leader stopped until the standby serves and
    ``pause_s`` passed, SIGCONTs it and waits for it to exit (:func:`_follow_takeover`)."""
    old, epoch = _leader_epoch(env, "pause-coordinator")
    pid = env.coordinator.pid
    if pid is None:
        raise RuntimeError("pause-coordinator: the leader is not running")
    takeover = env.takeover = _takeover("pause-coordinator", old, pid, standby, epoch)
    env.tasks.stop_process(pid, "coordinator leader")
    env.tasks.start("pause-coordinator", lambda: _follow_takeover(env, standby, paused=pid))
    return takeover


def _takeover(fault: str, old: str, pid: int | None, standby: CoordinatorProcess, epoch: int) -> Takeover:
    if standby.endpoint is None:
        raise RuntimeError(f"{fault}: the standby coordinator was never started")
    return Takeover(
        fault=fault,
        old_leader=old,
        old_leader_pid=pid,
        new_leader=standby.endpoint,
        epoch_before=epoch,
        fault_at=time.time(),
    )


def _follow_takeover(env: TakeoverEnv, standby: CoordinatorProcess, *, paused: int | None) -> None:
    """The task of a coordinator fault with a standby (``env.takeover`` holds what it saw):

    1. Wait (TAKEOVER_BOUND_S) until the standby answers a ping itself; its epoch must be
       higher than the old leader's (the fence raised it).
    2. Read the region's last consistent checkpoint there.
    3. Paused leader (``paused``, its pid): keep it stopped until ``pause_s`` passed since the
       fault, SIGCONT it, wait (FENCED_EXIT_S) until it exits; its exit code must be
       FENCED_EXIT_CODE (fenced at its next write); then read the checkpoint again.
    4. Wait (CHECKPOINT_AFTER_S) until the region completes a checkpoint on the new leader
       after the one read last.

    Every wait is cut short when the drill stops the tasks (the task then fails)."""
    t = env.takeover
    assert t is not None  # set by the fault before the task starts
    endpoint = t.new_leader

    def pause(seconds: float) -> None:
        if env.tasks.wait(seconds):
            raise InterruptedError(f"{t.fault}: the drill ended before the takeover played out")

    def serving() -> list[int]:
        if not standby.running:
            raise RuntimeError(f"{t.fault}: the standby exited with {standby.returncode}")
        return _serving_epoch(endpoint)

    [t.epoch_after] = wait_until(
        serving, TAKEOVER_BOUND_S, f"the standby {endpoint} to take over", interval=TASK_POLL_S, pause=pause
    )
    t.served_at = time.time()
    t.takeover_s = round(t.served_at - t.fault_at, 3)
    env.timeline.event("takeover", leader=endpoint, epoch=t.epoch_after, takeover_s=t.takeover_s)
    if t.epoch_after <= t.epoch_before:
        raise RuntimeError(f"{t.fault}: the new leader serves epoch {t.epoch_after}, not above {t.epoch_before}")

    def checkpoint() -> int | None:
        """The region's last consistent checkpoint on the new leader (None: not known there yet)."""
        try:
            with CoordinatorClient(endpoint, timeout=STATUS_TIMEOUT_S, try_timeout=STATUS_TIMEOUT_S) as client:
                return client.region_status(env.group, timeout=STATUS_TIMEOUT_S).region.last_consistent
        except (CoordinatorUnavailable, CoordinatorError):
            return None

    t.checkpoint_at_takeover = checkpoint()
    last = t.checkpoint_at_takeover
    if paused is not None:
        _continue_and_await_exit(env, t, paused, pause)
        last = checkpoint()

    def next_checkpoint() -> int | None:
        now = checkpoint()
        return now if now is not None and (last is None or now > last) else None

    t.checkpoint_after = wait_until(
        next_checkpoint, CHECKPOINT_AFTER_S, "a checkpoint on the new leader", interval=TASK_POLL_S * 5, pause=pause
    )
    env.timeline.event("checkpoint_on_new_leader", leader=endpoint, seq=t.checkpoint_after)


def _continue_and_await_exit(env: TakeoverEnv, t: Takeover, pid: int, pause: Callable[[float], None]) -> None:
    """Step 3 of :func:`_follow_takeover`: the paused leader ``pid``."""
    left = env.pause_s - (time.time() - t.fault_at)
    if left > 0:
        pause(left)
    env.tasks.continue_process(pid, "coordinator leader")
    old = env.coordinator

    def exited() -> bool:
        return not old.running

    wait_until(exited, FENCED_EXIT_S, "the paused leader to exit", interval=TASK_POLL_S, pause=pause)
    t.old_leader_exit = old.returncode
    env.timeline.event("leader_exit", pid=pid, code=t.old_leader_exit)
    if t.old_leader_exit != FENCED_EXIT_CODE:
        raise RuntimeError(f"{t.fault}: the old leader exited with {t.old_leader_exit}, not {FENCED_EXIT_CODE}")


__all__ = [
    "PROBE_S",
    "Takeover",
    "TakeoverEnv",
    "TakeoverRecord",
    "kill_leader",
    "pause_leader",
    "start_leader_and_standby",
]
