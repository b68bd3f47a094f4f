"""``cr-coordinator --fault-point STEP:ACTION``: stop or kill this process at a named
crash point of its write path (a test and drill aid; docs/durable-state.md).

The store calls `coordinator.store.log.segment.crash_point(step)` at the named steps
of its write path: the Kafka log's `KAFKA_CRASH_STEPS` (``kafka-sent``,
``kafka-acked``, ``snapshot-written``, ``snapshot-committed``) and the file log's
compaction steps (`CRASH_STEPS`). A fault point installs the hook
(`set_crash_point`) that acts there, once:

1. `parse_fault_point` checks the flag's value whole: a known STEP, a colon, an
   ACTION of ``pause`` or ``crash``; anything else is a `ValueError` naming the
   choices, and the coordinator does not start.
2. `install` sets the hook before the store is opened.
3. The first time any thread reaches STEP, the hook disarms itself (under a lock,
   so only one thread acts) and then:
   - ``pause``: sends SIGSTOP to the calling thread (``pthread_kill``), which stops
     the whole process; the caller stops before it runs another line, the other
     threads where they are; a SIGCONT resumes them all, and
     the caller goes on as if nothing happened: a deposed leader then learns at
     its next log write that it is fenced.
   - ``crash``: sends SIGKILL the same way (no clean-up, as a power cut of the
     process; the state dir's lock is released by the kernel).
4. Later arrivals at STEP, and every other step, pass through.
"""

from __future__ import annotations

import enum
import logging
import os
import signal
import threading

import attrs

from coordinator.store.kafka.kafka_log import KAFKA_CRASH_STEPS
from coordinator.store.log.segment import CRASH_STEPS, set_crash_point

log = logging.getLogger(__name__)

#: Every step a fault point may name.
FAULT_STEPS = (*KAFKA_CRASH_STEPS, *CRASH_STEPS)


class FaultAction(enum.Enum):
    PAUSE = "pause"  # SIGSTOP to this process, once
    CRASH = "crash"  # SIGKILL to this process


@attrs.frozen
class FaultPoint:
    step: str
    action: FaultAction

    def __str__(self) -> str:
        return f"{self.step}:{self.action.value}"


def parse_fault_point(value: str) -> FaultPoint:
    """Step 1: ``STEP:ACTION``; ValueError naming the known steps and actions otherwise."""
    steps = ", ".join(FAULT_STEPS)
    actions = ", ".join(a.value for a in FaultAction)
    step, sep, action = value.partition(":")
    if not sep:
        raise ValueError(f"{value!r} is not STEP:ACTION (STEP one of {steps}; ACTION one of {actions})")
    if step not in FAULT_STEPS:
        raise ValueError(f"unknown step {step!r} (one of {steps})")
    try:
        return FaultPoint(step, FaultAction(action))
    except ValueError:
        raise ValueError(f"unknown action {action!r} (one of {actions})") from None


def install(fault: FaultPoint) -> None:
    """Steps 2-4: set the crash-point hook of this process."""
    armed = [True]
    lock = threading.Lock()
    signum = signal.SIGSTOP if fault.action is FaultAction.PAUSE else signal.SIGKILL

    def hook(step: str) -> None:
        if step != fault.step:
            return
        with lock:
            if not armed[0]:
                return
            armed[0] = False
        log.warning("fault point %s: sending %s to this process (pid %d)", fault, signum.name, os.getpid())
        for handler in logging.getLogger().handlers:
            handler.flush()
        # To this thread, not the process: a process-directed signal is taken by whichever
        # thread the kernel picks, and until that thread has stopped the others this one runs
        # on (a pause at kafka-sent was seen to let the commit and the reply out). A stop or a
        # kill taken by this thread acts before it returns to Python.
        signal.pthread_kill(threading.get_ident(), signum)

    set_crash_point(hook)
