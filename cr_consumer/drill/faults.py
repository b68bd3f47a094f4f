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
kill-coordinator and pause-coordinator act on the leader, and the standby takes over
(``coordinator_standby.py``); what its task saw is ``env.takeover``.

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

from coordinator.client import CoordinatorClient
from coordinator.launcher import CoordinatorProcess
from coordinator.protocol.common.waiting import WaitTimeout, wait_until
from coordinator.protocol.wire.errors import CoordinatorError, CoordinatorUnavailable
from cr_consumer.drill import coordinator_standby
from cr_consumer.drill.coordinator_standby import Takeover
from cr_consumer.drill.fault_tasks import STATUS_TIMEOUT_S, TASK_POLL_S, FaultTasks
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
    #: What the standby's takeover showed, once a fault caused one.
    takeover: Takeover | None = None

    @property
    def endpoints(self) -> str:
        """Every coordinator endpoint, comma-separated (the leader's first), as the members have them."""
        procs = [self.coordinator] if self.standby is None else [self.coordinator, self.standby]
        endpoints = [p.endpoint for p in procs if p.endpoint is not None]
        if not endpoints:
            raise RuntimeError("the drill's coordinator was never started")
        return ",".join(endpoints)


def kill_member(env: DrillEnv) -> FaultRecord:
    victim = _victim(env, "kill-member")
    return {"fault": "kill-member", "member": victim, "pid": env.region.kill(victim)}


def kill_coordinator(env: DrillEnv) -> FaultRecord:
    if env.standby is not None:
        takeover = coordinator_standby.kill_leader(env, env.standby)
        return {
            "fault": "kill-coordinator",
            "pid": takeover.old_leader_pid,
            "note": "the leader, not restarted; the standby takes over",
        }
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
        takeover = coordinator_standby.pause_leader(env, env.standby)
        return {
            "fault": "pause-coordinator",
            "pid": takeover.old_leader_pid,
            "pause_s": env.pause_s,
            "note": "the leader, past the lease",
        }
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
