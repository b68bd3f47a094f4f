"""The faults a drill injects, and the environment they act on.

Each fault is a function ``fault(env) -> FaultRecord`` (:data:`FAULTS`, by
scenario name) that acts at once and returns a description, recorded as a
``fault`` event on the drill's timeline (:func:`inject`). What each scenario
does: the table in ``docs/drills.md``.

Faults that play out over time (a pause, a trigger that fires when the member
reaches a protocol step) return at once and leave a task to
:class:`FaultTasks` (a thread each, owned by the drill): the drill does not
finish before every task is done, and the report says whether the fault fired.
A crash or drop scenario draws its member with the seeded RNG and arms the
point of the member runtime (``cr_consumer/runtime/fault_points.py``) for it
only; a reset point needs a reset, so it also drops the sink-failure trigger.

With a standby coordinator (``DrillConfig.coordinator_standby``: ``env.standby``),
kill-coordinator and pause-coordinator act on the leader and leave a task that
follows the takeover (:func:`_follow_takeover`); what it saw is ``env.takeover``
(the report's ``takeover``).

Failure: a fault that cannot act (no member to kill, coordinator does not come
back within its start timeout) raises; the drill reports it and fails. A task
that fails (its trigger never fires within ``fault_tasks.FIRE_TIMEOUT_S``) is reported as
the drill's error.
"""

from __future__ import annotations

import functools
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Required, TypedDict

import attrs

from coordinator.client import CoordinatorClient, EndpointRole
from coordinator.launcher import CoordinatorProcess
from coordinator.protocol.common.waiting import WaitTimeout, wait_until
from coordinator.protocol.wire.errors import CoordinatorError, CoordinatorUnavailable
from cr_consumer.drill.fault_tasks import TASK_POLL_S, FaultTasks
from cr_consumer.drill.manifest import Manifest
from cr_consumer.drill.pipeline import SINK_FAILURE_TRIGGER
from cr_consumer.drill.timeline import TimelineWriter
from cr_consumer.drill.workload import produce_into
from cr_consumer.runtime import fault_points
from cr_consumer.runtime.fault_points import Action, Point
from cr_consumer.runtime.runner.handle import RegionHandle
from cr_consumer.testing.kafka_util import create_topic

#: Default length of a pause (pause-member, -coordinator, -broker, and fault
#: points armed with ``pause``): long enough to pass the member timeout and
#: the broker's session timeout the drills use.
PAUSE_S = 10.0
#: kill-member-long: bound on holding the replacement down, waiting for the
#: controller to drop the dead member and complete a checkpoint without it.
HOLD_MAX_S = 60.0
#: Bound on one status request of the kill-member-long task.
STATUS_TIMEOUT_S = 1.0
#: With a standby coordinator: bound on one probe of an endpoint (a ping, no redirect followed).
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


class FaultRecord(TypedDict, total=False):
    """A fault's description, as the timeline's ``fault`` event and the report hold it."""

    fault: Required[str]
    #: When it was injected (epoch seconds); set by `inject`.
    at: float
    member: str
    pid: int | None
    new_pid: int | None
    restart_s: float
    topic: str
    partitions: int
    messages: int
    note: str
    pause_s: float
    point: str
    action: str
    #: What causes the reset a reset point needs.
    reset_by: str
    #: A reset storm's faults, in order.
    steps: list[FaultRecord]


@attrs.define
class DrillEnv:
    """Everything a fault acts on."""

    bootstrap: str
    region: RegionHandle
    coordinator: CoordinatorProcess
    manifest: Manifest
    manifest_lock: threading.Lock
    fault_dir: Path
    timeline: TimelineWriter
    rng: random.Random
    seed: int
    topic_prefix: str
    partitions: int
    messages: int
    group: str
    tasks: FaultTasks
    #: Length of a pause (see PAUSE_S).
    pause_s: float = PAUSE_S
    #: The embedded broker's pid (None: an external cluster, which a drill never pauses).
    broker_pid: int | None = None
    new_topics: list[str] = attrs.field(factory=list)
    #: The standby coordinator (``DrillConfig.coordinator_standby``; ``coordinator`` is then the
    #: leader the drill started), else None.
    standby: CoordinatorProcess | None = None
    #: What the standby's takeover showed, once a fault caused one (:func:`_follow_takeover`).
    takeover: Takeover | None = None

    @property
    def endpoints(self) -> str:
        """Every coordinator endpoint, comma-separated (the leader's first), as the members have them."""
        procs = [self.coordinator] if self.standby is None else [self.coordinator, self.standby]
        endpoints = [p.endpoint for p in procs if p.endpoint is not None]
        if not endpoints:
            raise RuntimeError("the drill's coordinator was never started")
        return ",".join(endpoints)


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
    #: Seconds from the fault to the controller's first RESUME after ``served_at`` (``scenarios.conclude``).
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


def kill_member(env: DrillEnv) -> FaultRecord:
    victim = _victim(env, "kill-member")
    return {"fault": "kill-member", "member": victim, "pid": env.region.kill(victim)}


def kill_coordinator(env: DrillEnv) -> FaultRecord:
    if env.standby is not None:
        return _kill_leader(env, env.standby)
    pid = env.coordinator.pid
    env.coordinator.kill()
    killed = time.time()
    env.coordinator.start()
    return {
        "fault": "kill-coordinator",
        "pid": pid,
        "new_pid": env.coordinator.pid,
        "restart_s": round(time.time() - killed, 3),
    }


def add_member(env: DrillEnv) -> FaultRecord:
    return {"fault": "add-member", "member": env.region.add_member()}


def remove_member(env: DrillEnv) -> FaultRecord:
    members = sorted(env.region.running_members())
    if len(members) < 2:
        raise RuntimeError(f"remove-member: need at least 2 members, the region has {members}")
    victim = env.rng.choice(members)
    return {"fault": "remove-member", "member": env.region.remove_member(victim)}


def new_topic(env: DrillEnv) -> FaultRecord:
    topic = f"{env.topic_prefix}-new{len(env.new_topics) + 1}"
    parts = max(1, env.partitions // 2)
    create_topic(env.bootstrap, topic, parts)
    env.new_topics.append(topic)
    n = max(parts, env.messages // 10)
    produce_into(env.bootstrap, topic, parts, n, env.manifest, env.manifest_lock, seed=env.seed)
    return {"fault": "new-topic", "topic": topic, "partitions": parts, "messages": n}


def sink_failure(env: DrillEnv) -> FaultRecord:
    env.fault_dir.mkdir(parents=True, exist_ok=True)
    trigger = env.fault_dir / SINK_FAILURE_TRIGGER
    tmp = trigger.with_name(trigger.name + ".tmp")
    tmp.write_text(str(time.time()))
    tmp.rename(trigger)  # appears atomically for the sinks
    return {"fault": "sink-failure"}


def poison(env: DrillEnv) -> FaultRecord:
    return {"fault": "poison", "note": "poison records are mixed into the input from the start"}


def _victim(env: DrillEnv, fault: str) -> str:
    members = sorted(env.region.running_members())
    if not members:
        raise RuntimeError(f"{fault}: the region has no live member")
    return env.rng.choice(members)


def _pause(env: DrillEnv, fault: str, pid: int | None, who: str, missing: str) -> FaultRecord:
    """SIGSTOP process ``pid`` (``who``) now, SIGCONT after ``pause_s`` (a task)."""
    if pid is None:
        raise RuntimeError(f"{fault}: {missing}")
    env.tasks.start(fault, lambda: env.tasks.pause(pid, env.pause_s, who))
    return {"fault": fault, "pid": pid, "pause_s": env.pause_s}


def pause_member(env: DrillEnv) -> FaultRecord:
    victim = _victim(env, "pause-member")
    pid = env.region.pid(victim)
    return {"fault": "pause-member", "member": victim, **_pause(env, "pause-member", pid, victim, "no process")}


def pause_coordinator(env: DrillEnv) -> FaultRecord:
    if env.standby is not None:
        return _pause_leader(env, env.standby)
    return _pause(env, "pause-coordinator", env.coordinator.pid, "coordinator", "the coordinator is not running")


def pause_broker(env: DrillEnv) -> FaultRecord:
    return _pause(
        env,
        "pause-broker",
        env.broker_pid,
        "broker",
        "only the embedded broker can be paused (the drill has no broker process: it runs against "
        "--bootstrap / $KAFKA_BOOTSTRAP_SERVERS)",
    )


def _serving_epoch(endpoint: str) -> list[int]:
    """``[epoch]`` when ``endpoint`` answers a ping itself (one try, no redirect followed) with
    that epoch, else ``[]`` (a list: epoch 0 is a leader's too, and ``wait_until`` waits for a
    true result)."""
    with CoordinatorClient(endpoint, timeout=PROBE_S, try_timeout=PROBE_S) as client:
        probe = client.probe(PROBE_S)
    return [probe.epoch] if probe.role is EndpointRole.LEADER and probe.epoch is not None else []


def _leader_epoch(env: DrillEnv, fault: str) -> tuple[str, int]:
    """The leader's endpoint and the epoch it serves with, before the fault (bounded)."""
    endpoint = env.coordinator.endpoint
    if endpoint is None or not env.coordinator.running:
        raise RuntimeError(f"{fault}: the leader is not running (a second coordinator fault under a standby)")

    [epoch] = wait_until(
        lambda: _serving_epoch(endpoint), TAKEOVER_BOUND_S, f"{fault}: the leader {endpoint} to answer a ping"
    )
    return endpoint, epoch


def _kill_leader(env: DrillEnv, standby: CoordinatorProcess) -> FaultRecord:
    """kill-coordinator with a standby: 1. probe the leader for its epoch; 2. SIGKILL it (it is
    not restarted); 3. a task follows the takeover (:func:`_follow_takeover`)."""
    old, epoch = _leader_epoch(env, "kill-coordinator")
    pid = env.coordinator.pid
    env.takeover = _takeover(env, "kill-coordinator", old, pid, standby, epoch)
    env.coordinator.kill()
    env.tasks.start("kill-coordinator", lambda: _follow_takeover(env, standby, paused=None))
    return {"fault": "kill-coordinator", "pid": pid, "note": "the leader, not restarted; the standby takes over"}


def _pause_leader(env: DrillEnv, standby: CoordinatorProcess) -> FaultRecord:
    """pause-coordinator with a standby: 1. probe the leader for its epoch; 2. SIGSTOP it;
    3. a task follows the takeover, keeps the leader stopped until the standby serves and
    ``pause_s`` passed, SIGCONTs it and waits for it to exit (:func:`_follow_takeover`)."""
    old, epoch = _leader_epoch(env, "pause-coordinator")
    pid = env.coordinator.pid
    if pid is None:
        raise RuntimeError("pause-coordinator: the leader is not running")
    env.takeover = _takeover(env, "pause-coordinator", old, pid, standby, epoch)
    env.tasks.stop_process(pid, "coordinator leader")
    env.tasks.start("pause-coordinator", lambda: _follow_takeover(env, standby, paused=pid))
    return {"fault": "pause-coordinator", "pid": pid, "pause_s": env.pause_s, "note": "the leader, past the lease"}


def _takeover(
    env: DrillEnv, fault: str, old: str, pid: int | None, standby: CoordinatorProcess, epoch: int
) -> Takeover:
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


def _follow_takeover(env: DrillEnv, standby: CoordinatorProcess, *, paused: int | None) -> None:
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


def _continue_and_await_exit(env: DrillEnv, t: Takeover, pid: int, pause: Callable[[float], None]) -> None:
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


#: Where kill-member-long kills: the member acked checkpoint N and has not published it.
LONG_KILL_POINTS = (Point.AFTER_CHECKPOINT_ACK, Point.BEFORE_PUBLISH)


def kill_member_long(env: DrillEnv) -> FaultRecord:
    victim = _victim(env, "kill-member-long")
    point = env.rng.choice(LONG_KILL_POINTS)
    # Hold first: the replacement the runner starts at once stops itself at start-up.
    fault_points.arm(env.fault_dir, Point.MEMBER_START, Action.PAUSE, victim)
    fault_points.arm(env.fault_dir, point, Action.CRASH, victim)
    env.tasks.start("kill-member-long", lambda: _hold_replacement(env, victim, point))
    return {"fault": "kill-member-long", "member": victim, "point": point.value}


def _hold_replacement(env: DrillEnv, victim: str, point: Point) -> None:
    """kill-member-long's task: 1. wait for the crash; 2. wait for the replacement
    to stop itself at start-up; 3. keep it stopped until the controller's status
    shows the victim dropped and then a checkpoint completed (bounded by
    HOLD_MAX_S); 4. continue it."""
    try:
        crash = env.tasks.wait_fired(env.fault_dir, point, victim)
        env.timeline.event("fault_fired", fault="kill-member-long", point=point.value, member=victim, pid=crash.pid)
        start = env.tasks.wait_fired(env.fault_dir, Point.MEMBER_START, victim)
    except (TimeoutError, InterruptedError):
        # A process of the victim may have stopped itself at start-up all the same
        # (it died of something else): continue it, or it stays stopped.
        for f in fault_points.fired(env.fault_dir, Point.MEMBER_START):
            env.tasks.continue_process(f.pid, victim)
        raise
    env.tasks.stopped(start.pid)
    held_for = _wait_dropped_and_checkpointed(env, victim, deadline=time.monotonic() + HOLD_MAX_S)
    env.timeline.event(
        "fault_hold", member=victim, pid=start.pid, down_s=round(time.time() - crash.t, 3), outcome=held_for
    )
    env.tasks.continue_process(start.pid, victim)


def _wait_dropped_and_checkpointed(env: DrillEnv, victim: str, deadline: float) -> str:
    """Poll the controller until it dropped ``victim`` and completed a checkpoint
    after that; returns what ended the wait."""
    endpoint = env.endpoints
    gone = False
    last_when_gone: int | None = None  # last_consistent when the victim was first seen gone

    def pause(seconds: float) -> None:
        env.tasks.wait(seconds)  # cut short when the drill stops: ended() then says so

    with CoordinatorClient(endpoint, timeout=STATUS_TIMEOUT_S, try_timeout=STATUS_TIMEOUT_S) as client:

        def ended() -> str | None:
            nonlocal gone, last_when_gone
            if env.tasks.stopping():
                return "drill stopping"
            try:
                st = client.region_status(env.group, timeout=STATUS_TIMEOUT_S).region
            except (CoordinatorUnavailable, CoordinatorError):
                return None
            last = st.last_consistent
            if victim not in st.members:
                if not gone:
                    gone, last_when_gone = True, last
                elif last is not None and (last_when_gone is None or last > last_when_gone):
                    return f"dropped, then checkpoint {last} completed without it"
            return None

        try:
            return wait_until(
                ended,
                max(0.0, deadline - time.monotonic()),
                f"{victim} dropped and checkpointed",
                interval=TASK_POLL_S,
                pause=pause,
            )
        except WaitTimeout:
            return f"not dropped and checkpointed within {HOLD_MAX_S:.0f}s"


def _arm_point(env: DrillEnv, *, name: str, point: Point, action: Action) -> FaultRecord:
    victim = _victim(env, name)
    fault_points.arm(env.fault_dir, point, action, victim)
    desc: FaultRecord = {"fault": name, "member": victim, "point": point.value, "action": action.value}
    if point in (Point.AFTER_RESET, Point.RECEIVE_RESET):
        sink_failure(env)  # the point needs a reset: one member's sink raises once
        desc["reset_by"] = "sink-failure"
    env.tasks.start(name, lambda: _await_point(env, name, point, action, victim))
    return desc


def _await_point(env: DrillEnv, name: str, point: Point, action: Action, victim: str) -> None:
    f = env.tasks.wait_fired(env.fault_dir, point, victim)
    env.timeline.event("fault_fired", fault=name, point=point.value, action=action.value, member=victim, pid=f.pid)
    if action is Action.PAUSE:
        env.tasks.stopped(f.pid)
        env.tasks.wait(env.pause_s)
        env.tasks.continue_process(f.pid, victim)


#: One scenario per fault point of the member runtime (docs/drills.md).
POINT_SCENARIOS: dict[str, tuple[Point, Action]] = {
    "crash-after-drain": (Point.AFTER_DRAIN, Action.CRASH),
    "crash-before-ack": (Point.BEFORE_CHECKPOINT_ACK, Action.CRASH),
    "crash-after-ack": (Point.AFTER_CHECKPOINT_ACK, Action.CRASH),
    "crash-before-publish": (Point.BEFORE_PUBLISH, Action.CRASH),
    "crash-mid-publish": (Point.MID_PUBLISH, Action.CRASH),
    "crash-after-publish": (Point.AFTER_PUBLISH, Action.CRASH),
    "crash-after-reset": (Point.AFTER_RESET, Action.CRASH),
    "drop-resume": (Point.RECEIVE_RESUME, Action.DROP),
}
#: Points a region member never passes: start-up (its own drill) and the Spark sink's task.
NOT_DRAWN = (Point.MEMBER_START, Point.SPARK_TASK_PREPARED)
#: What ``fault-point`` draws from: every point a running member passes, crashed or
#: paused, and a dropped RESUME. A dropped drain, checkpoint or reset is drop-command's:
#: the controller notices it only by that phase's timeout, which only that
#: drill shortens.
RANDOM_POINTS = (
    *((p, a) for p in Point if p not in NOT_DRAWN for a in (Action.CRASH, Action.PAUSE)),
    (Point.RECEIVE_RESUME, Action.DROP),
)


#: What ``drop-command`` draws from: a pushed drain, checkpoint or reset lost.
DROPPED_COMMANDS = (Point.RECEIVE_DRAIN, Point.RECEIVE_CHECKPOINT, Point.RECEIVE_RESET)


def drop_command(env: DrillEnv) -> FaultRecord:
    return _arm_point(env, name="drop-command", point=env.rng.choice(DROPPED_COMMANDS), action=Action.DROP)


def fault_point(env: DrillEnv) -> FaultRecord:
    point, action = env.rng.choice(RANDOM_POINTS)
    return _arm_point(env, name="fault-point", point=point, action=action)


#: Faults a reset storm draws from.
STORM_FAULTS = ("kill-member", "sink-failure", "kill-coordinator", "add-member")
STORM_LENGTH = 3


def reset_storm(env: DrillEnv) -> FaultRecord:
    names = env.rng.sample(STORM_FAULTS, STORM_LENGTH)
    steps: list[FaultRecord] = []
    for i, name in enumerate(names):
        if i:
            gap = env.rng.uniform(0.2, 0.8)
            time.sleep(gap)  # the storm's spacing is the fault itself, not synchronisation
        steps.append(inject(env, name))
    return {"fault": "reset-storm", "steps": steps}


FAULTS: dict[str, Callable[[DrillEnv], FaultRecord]] = {
    "kill-member": kill_member,
    "kill-coordinator": kill_coordinator,
    "add-member": add_member,
    "remove-member": remove_member,
    "new-topic": new_topic,
    "sink-failure": sink_failure,
    "poison": poison,
    "reset-storm": reset_storm,
    "kill-member-long": kill_member_long,
    "pause-member": pause_member,
    "pause-coordinator": pause_coordinator,
    "pause-broker": pause_broker,
    **{
        name: functools.partial(_arm_point, name=name, point=point, action=action)
        for name, (point, action) in POINT_SCENARIOS.items()
    },
    "drop-command": drop_command,
    "fault-point": fault_point,
}


def inject(env: DrillEnv, name: str) -> FaultRecord:
    """Inject fault ``name`` now and record it on the drill's timeline."""
    if name not in FAULTS:
        raise ValueError(f"unknown fault {name!r}; known: {', '.join(FAULTS)}")
    t0 = time.time()
    desc = FAULTS[name](env)
    desc.setdefault("fault", name)
    desc["at"] = t0
    if name != "reset-storm":
        fields = {k: v for k, v in desc.items() if k not in ("at", "member")}
        env.timeline.event("fault", t=t0, member=desc.get("member"), **fields)  # the event names the victim
    return desc
