"""Fault-injection points in the member runtime, armed by drills.

A *point* is a named step of the region protocol in a member process; the
runtime calls :func:`hit` there (one line in ``member/process.py``,
``member/executor.py``, ``member/control.py``, ``pipeline/sinks.py``,
``pipeline/kafka_sink.py``; the Spark sink's ``spark/sink/writer.py``, as member
``spark-sink``). Nothing
happens unless a drill armed that point:

1. The drill starts the member processes with ``$CRKAFKA_FAULT_DIR`` set to its
   ``faults/`` directory (the same directory as the sink-failure trigger).
   Without it, :func:`hit` returns after testing one module-level bool, and
   :func:`lossy` returns the callback it was given: unarmed points cost nothing.
2. To arm a point the drill calls :func:`arm`, which writes the trigger
   ``point.<point>`` (any member) or ``point.<point>@<member>`` (only that
   member) atomically (temporary file + rename): a versioned JSON document
   naming the action.
3. The first member process that reaches the point claims the trigger by
   renaming it to ``point.<point>[@<member>].fired.<member>.<pid>`` (atomic: a
   trigger fires once, in one process), writes what fired into that file
   (:class:`Fired`, read back by :func:`fired`) and acts:

   * ``crash``: SIGKILL itself (no clean-up, no flush: a kill -9 at that step);
   * ``pause``: SIGSTOP itself. The process stays alive and silent until
     someone sends SIGCONT (the drill does, finding the pid in the claim), then
     continues from the point;
   * ``drop``: :func:`hit` returns True and the caller skips the message (only
     at the ``receive-*`` points: a pushed command lost on the way).

Armed cost: each hit of an armed-capable process tries two renames (failed
system calls) in the fault directory. Points are protocol steps (a few per
checkpoint period), never per record.

An invalid trigger (unknown version or action, ``drop`` at a point that
cannot drop) is logged as an error and renamed ``...invalid``; nothing acts.
"""

from __future__ import annotations

import enum
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from coordinator.protocol.region.commands import CommandKind, RegionCommand

log = logging.getLogger(__name__)

ENV_FAULT_DIR = "CRKAFKA_FAULT_DIR"
TRIGGER_VERSION = 1
TRIGGER_PREFIX = "point."
FIRED_INFIX = ".fired."
#: A crash or pause right after a message was queued for the control I/O thread
#: (an ack) first waits this long, so that the message is on the wire and the
#: fault lands *after* the controller has it, as the point's name says. The I/O
#: thread sends within a millisecond on loopback; this bound covers a busy host.
SENT_SETTLE_S = 0.3
#: Bound on the size of a trigger document (it names an action, nothing more).
MAX_TRIGGER_BYTES = 4096


class Point(enum.Enum):
    """The protocol steps a drill can break (docs/drills.md, Fault points)."""

    #: Process start, before the pipeline is built and the region joined (a
    #: paused restart here is a member kept down while its name is taken).
    MEMBER_START = "member-start"
    #: The drain ack is sent; the checkpoint command has not run.
    AFTER_DRAIN = "after-drain"
    #: Every operator checkpointed (sinks flushed, transactions prepared, changelogs written);
    #: the checkpoint ack is not sent.
    BEFORE_CHECKPOINT_ACK = "before-checkpoint-ack"
    #: The checkpoint ack is sent; the RESUME that publishes it has not run.
    AFTER_CHECKPOINT_ACK = "after-checkpoint-ack"
    #: A RESUME (or retire) runs and sealed intervals wait: none renamed yet
    #: (the Kafka sink: no prepared transaction committed yet).
    BEFORE_PUBLISH = "before-publish"
    #: One interval is linked to its published name, its pending name not yet
    #: unlinked (both names exist; the Kafka sink: one prepared transaction
    #: committed, another not yet).
    MID_PUBLISH = "mid-publish"
    #: Every due interval is published (linked and unlinked); the
    #: directory is not fsynced and the rest of the RESUME has not run (the
    #: Kafka sink: every due transaction committed).
    AFTER_PUBLISH = "after-publish"
    #: A reset is applied to every operator; its ack is not sent.
    AFTER_RESET = "after-reset"
    #: A task of the Spark sink prepared its transaction (flushed, open); its report is not
    #: returned to Spark yet.
    SPARK_TASK_PREPARED = "spark-task-prepared"
    #: A pushed command arrived on the control channel, before the member's
    #: control thread queue: ``drop`` loses it.
    RECEIVE_DRAIN = "receive-drain"
    RECEIVE_CHECKPOINT = "receive-checkpoint"
    RECEIVE_RESUME = "receive-resume"
    RECEIVE_RESET = "receive-reset"


class Action(enum.Enum):
    CRASH = "crash"
    PAUSE = "pause"
    DROP = "drop"


#: Pushed command kind -> its receive point.
RECEIVE_POINTS = {
    CommandKind.DRAIN: Point.RECEIVE_DRAIN,
    CommandKind.CHECKPOINT: Point.RECEIVE_CHECKPOINT,
    CommandKind.RESUME: Point.RECEIVE_RESUME,
    CommandKind.RESET: Point.RECEIVE_RESET,
    CommandKind.RESET_TO_INITIAL: Point.RECEIVE_RESET,
}
#: Points where ``drop`` has a meaning (a message to skip).
DROP_POINTS = frozenset(RECEIVE_POINTS.values())
#: Points right after a message was queued for sending (see SENT_SETTLE_S).
AFTER_SEND_POINTS = frozenset({Point.AFTER_DRAIN, Point.AFTER_CHECKPOINT_ACK})


class TriggerError(ValueError):
    """A trigger that names no valid action for its point."""


def check(point: Point, action: Action) -> None:
    """Raise :class:`TriggerError` unless ``action`` can act at ``point``."""
    if action is Action.DROP and point not in DROP_POINTS:
        raise TriggerError(f"fault point {point.value}: 'drop' only applies to {sorted(p.value for p in DROP_POINTS)}")


@attrs.frozen
class Fired:
    """What a member process wrote into a claimed trigger."""

    point: Point
    action: Action
    member: str
    pid: int
    t: float
    path: Path

    @classmethod
    def read(cls, path: Path) -> Fired | None:
        """The claim at ``path``, or None while its process has not written it yet."""
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(doc, dict) or doc.get("version") != TRIGGER_VERSION or "pid" not in doc:
                return None  # the trigger itself: the claiming process has not written yet
            return cls(
                point=Point(doc["point"]),
                action=Action(doc["action"]),
                member=str(doc["member"]),
                pid=int(doc["pid"]),
                t=float(doc["t"]),
                path=path,
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None


# ---------------------------------------------------------------------- process side
_fault_dir: Path | None = None
_enabled = False


def configure(fault_dir: str | os.PathLike[str] | None) -> None:
    """Set (or clear, with None) the directory this process looks for triggers in."""
    global _fault_dir, _enabled
    _fault_dir = Path(fault_dir) if fault_dir else None
    _enabled = _fault_dir is not None


configure(os.environ.get(ENV_FAULT_DIR) or None)


def enabled() -> bool:
    return _enabled


def hit(point: Point, member: str) -> bool:
    """The runtime reached ``point`` in member ``member``. Acts if a trigger is
    armed for it (crash/pause do not return before SIGCONT, if at all);
    returns True only when the caller must drop the message."""
    if not _enabled:
        return False
    return _fire(point, member)


def lossy(deliver: Callable[[RegionCommand], None], member: str) -> Callable[[RegionCommand], None]:
    """Wrap the control channel's command callback with the ``receive-*`` points;
    without a fault directory, ``deliver`` itself."""
    if not _enabled:
        return deliver

    def receive(cmd: RegionCommand) -> None:
        point = RECEIVE_POINTS.get(cmd.KIND)
        if point is not None and hit(point, member):
            log.warning("%s: fault point %s: dropped %s", member, point.value, cmd)
            return
        deliver(cmd)

    return receive


def _fire(point: Point, member: str) -> bool:
    assert _fault_dir is not None
    for name in (f"{TRIGGER_PREFIX}{point.value}@{member}", f"{TRIGGER_PREFIX}{point.value}"):
        claimed = _fault_dir / f"{name}{FIRED_INFIX}{member}.{os.getpid()}"
        try:
            os.rename(_fault_dir / name, claimed)  # atomic: one process claims a trigger
        except FileNotFoundError:
            continue
        except OSError:
            log.exception("%s: fault point %s: cannot claim trigger %s", member, point.value, name)
            continue
        return _act(point, member, claimed)
    return False


def _act(point: Point, member: str, claimed: Path) -> bool:
    try:
        raw = claimed.read_bytes()[:MAX_TRIGGER_BYTES]
        doc = json.loads(raw)
        if not isinstance(doc, dict) or doc.get("version") != TRIGGER_VERSION:
            raise TriggerError(
                f"trigger version {doc.get('version') if isinstance(doc, dict) else None!r}, expected {TRIGGER_VERSION}"
            )
        action = Action(doc.get("action"))
        check(point, action)
    except (OSError, ValueError) as exc:  # a broken trigger never breaks the member
        log.error("%s: fault point %s: invalid trigger %s (%s); not acting", member, point.value, claimed.name, exc)
        try:
            claimed.rename(claimed.with_name(claimed.name + ".invalid"))
        except OSError:
            log.exception("%s: cannot mark the trigger %s invalid", member, claimed.name)
        return False
    fired = {
        "version": TRIGGER_VERSION,
        "point": point.value,
        "action": action.value,
        "member": member,
        "pid": os.getpid(),
        "t": time.time(),
    }
    tmp = claimed.with_name(claimed.name + ".tmp")
    tmp.write_text(json.dumps(fired), encoding="utf-8")
    os.replace(tmp, claimed)
    log.warning("%s: fault point %s fired: %s (pid %d)", member, point.value, action.value, os.getpid())
    if action is Action.DROP:
        return True
    if point in AFTER_SEND_POINTS:
        time.sleep(SENT_SETTLE_S)  # the queued ack leaves first (see SENT_SETTLE_S)
    for handler in logging.getLogger().handlers:
        handler.flush()
    os.kill(os.getpid(), signal.SIGKILL if action is Action.CRASH else signal.SIGSTOP)
    if action is Action.PAUSE:
        log.warning("%s: fault point %s: continued after the pause", member, point.value)
    return False


# ---------------------------------------------------------------------- drill side
def arm(fault_dir: str | os.PathLike[str], point: Point, action: Action, member: str | None = None) -> Path:
    """Arm ``point`` with ``action`` for ``member`` (None: whichever member gets
    there first); returns the trigger's path."""
    check(point, action)
    if member is not None and (not member or "/" in member or "@" in member or FIRED_INFIX in member):
        raise TriggerError(f"member name {member!r} cannot be targeted by a trigger file")
    directory = Path(fault_dir)
    directory.mkdir(parents=True, exist_ok=True)
    name = f"{TRIGGER_PREFIX}{point.value}" + (f"@{member}" if member else "")
    trigger = directory / name
    tmp = directory / f".{name}.tmp"
    tmp.write_text(json.dumps({"version": TRIGGER_VERSION, "action": action.value}), encoding="utf-8")
    os.replace(tmp, trigger)  # appears whole to the members
    return trigger


def fired(fault_dir: str | os.PathLike[str], point: Point | None = None) -> list[Fired]:
    """The triggers claimed in ``fault_dir`` (of ``point``), oldest first."""
    directory = Path(fault_dir)
    if not directory.is_dir():
        return []
    prefix = TRIGGER_PREFIX + (point.value if point is not None else "")
    out = []
    for path in directory.iterdir():
        name = path.name
        if name.startswith(prefix) and FIRED_INFIX in name and not name.endswith((".tmp", ".invalid")):
            f = Fired.read(path)
            if f is not None and (point is None or f.point is point):
                out.append(f)
    return sorted(out, key=lambda f: f.t)


__all__ = [
    "DROP_POINTS",
    "ENV_FAULT_DIR",
    "RECEIVE_POINTS",
    "Action",
    "Fired",
    "Point",
    "TriggerError",
    "arm",
    "check",
    "configure",
    "enabled",
    "fired",
    "hit",
    "lossy",
]
