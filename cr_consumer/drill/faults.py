"""The faults a drill injects, and the environment they act on.

Each fault is a function ``fault(env) -> dict`` that acts at once and returns a
description (recorded as a ``fault`` event on the drill's timeline):

* ``kill-member``: SIGKILL one member process, chosen by the seeded RNG
  (the runner restarts it: a rebalance, then a reset);
* ``kill-coordinator``: SIGKILL the coordinator process and start it again on
  the same endpoint and state directory (members reconnect and re-join; the
  region resets to its last consistent checkpoint);
* ``add-member`` / ``remove-member``: grow or shrink the region by one member
  process (a clean stop for remove);
* ``new-topic``: create a topic that matches the subscription pattern and
  produce records into it (recorded in the manifest);
* ``sink-failure``: drop the trigger file; one member's sink raises once;
* ``poison``: nothing at the fault moment: undecodable records are mixed into
  the input from the start (see ``workload.py``);
* ``reset-storm``: three faults from the list above, in random order, each
  0.2-0.8 s after the previous one.

Failure: a fault that cannot act (no member to kill, coordinator does not come
back within its start timeout) raises; the drill reports it and fails.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import attrs

from cr_consumer.kafka_util import create_topic

from .pipeline import SINK_FAILURE_TRIGGER
from .timeline import TimelineWriter
from .verify import Manifest
from .workload import produce_into


class RegionHandle(Protocol):
    """What the drill needs from a running region (see ``harness.py``)."""

    def members(self) -> list[str]: ...

    def kill(self, member: str) -> int: ...

    def add_member(self) -> str: ...

    def remove_member(self, member: str | None = None) -> str: ...


@attrs.define
class DrillEnv:
    """Everything a fault acts on."""

    bootstrap: str
    region: Any  # RegionHandle
    coordinator: Any  # coordinator.launcher.CoordinatorProcess
    manifest: Manifest
    manifest_lock: threading.Lock
    fault_dir: Path
    timeline: TimelineWriter
    rng: random.Random
    seed: int
    topic_prefix: str
    partitions: int
    messages: int
    new_topics: list[str] = attrs.field(factory=list)


def kill_member(env: DrillEnv) -> dict:
    members = sorted(env.region.members())
    if not members:
        raise RuntimeError("kill-member: the region has no live member to kill")
    victim = env.rng.choice(members)
    pid = env.region.kill(victim)
    return {"fault": "kill-member", "member": victim, "pid": pid}


def kill_coordinator(env: DrillEnv) -> dict:
    pid = env.coordinator.pid
    env.coordinator.kill()
    killed = time.time()
    env.coordinator.start()
    return {"fault": "kill-coordinator", "pid": pid, "new_pid": env.coordinator.pid,
            "restart_s": round(time.time() - killed, 3)}


def add_member(env: DrillEnv) -> dict:
    return {"fault": "add-member", "member": env.region.add_member()}


def remove_member(env: DrillEnv) -> dict:
    members = sorted(env.region.members())
    if len(members) < 2:
        raise RuntimeError(f"remove-member: need at least 2 members, the region has {members}")
    victim = env.rng.choice(members)
    return {"fault": "remove-member", "member": env.region.remove_member(victim)}


def new_topic(env: DrillEnv) -> dict:
    topic = f"{env.topic_prefix}-new{len(env.new_topics) + 1}"
    parts = max(1, env.partitions // 2)
    create_topic(env.bootstrap, topic, parts)
    env.new_topics.append(topic)
    n = max(parts, env.messages // 10)
    produce_into(env.bootstrap, topic, parts, n, env.manifest, env.manifest_lock, seed=env.seed)
    return {"fault": "new-topic", "topic": topic, "partitions": parts, "messages": n}


def sink_failure(env: DrillEnv) -> dict:
    env.fault_dir.mkdir(parents=True, exist_ok=True)
    trigger = env.fault_dir / SINK_FAILURE_TRIGGER
    tmp = trigger.with_name(trigger.name + ".tmp")
    tmp.write_text(str(time.time()))
    tmp.rename(trigger)  # appears atomically for the sinks
    return {"fault": "sink-failure"}


def poison(env: DrillEnv) -> dict:
    return {"fault": "poison", "note": "poison records are mixed into the input from the start"}


#: Faults a reset storm draws from.
STORM_FAULTS = ("kill-member", "sink-failure", "kill-coordinator", "add-member")
STORM_LENGTH = 3


def reset_storm(env: DrillEnv) -> dict:
    names = env.rng.sample(STORM_FAULTS, STORM_LENGTH)
    steps = []
    for i, name in enumerate(names):
        if i:
            gap = env.rng.uniform(0.2, 0.8)
            time.sleep(gap)  # the storm's spacing is the fault itself, not synchronisation
        steps.append(inject(env, name))
    return {"fault": "reset-storm", "steps": steps}


FAULTS: dict[str, Callable[[DrillEnv], dict]] = {
    "kill-member": kill_member,
    "kill-coordinator": kill_coordinator,
    "add-member": add_member,
    "remove-member": remove_member,
    "new-topic": new_topic,
    "sink-failure": sink_failure,
    "poison": poison,
    "reset-storm": reset_storm,
}


def inject(env: DrillEnv, name: str) -> dict:
    """Inject fault ``name`` now and record it on the drill's timeline."""
    if name not in FAULTS:
        raise ValueError(f"unknown fault {name!r}; known: {', '.join(FAULTS)}")
    t0 = time.time()
    desc = FAULTS[name](env)
    desc.setdefault("fault", name)
    desc["at"] = t0
    if name != "reset-storm":
        env.timeline.event("fault", t=t0, **{k: v for k, v in desc.items() if k != "at"})
    return desc
