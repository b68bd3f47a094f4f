"""What the operator does with Python's cyclic garbage collector once it runs.

Why: a process that runs a consumer operator holds a large, long-lived heap
(modules, the Kafka client, the operator's threads and queues, the user's
pipeline: tens of thousands of container objects). The cyclic collector's
older generations re-scan all of it whenever enough young objects survive,
and a per-record callback always allocates (dicts, sets, decoded values). The
re-scans then cost 7-19 % of the CPU per record of a callback doing about a
microsecond of Python work (bench/bench_operator.py --work-trials, BENCHMARKS.md),
and each full collection stalls the thread it hits for ~20 ms (a drain in
flight waits for it).

The default policy, :attr:`GcPolicy.FREEZE`, does once the operator is
running:

1. ``gc.collect()``: the garbage made while starting is freed, not frozen;
2. ``gc.freeze()``: every object alive now moves to the permanent generation,
   which later collections do not scan. Young objects are still collected as
   usual, and frozen objects are still freed by reference counting when the
   last reference goes; only a reference cycle among frozen objects stays
   allocated until ``gc.unfreeze()``;
3. at ``close()``: ``gc.unfreeze()``. The closed operator's objects were
   frozen with the rest and hold reference cycles (threads, callbacks, the
   Kafka client); frozen, they would never be freed. Unfrozen, the next full
   collection frees them. Operators still running in the process are scanned
   again until the next ``start()`` freezes once more.

Freezing is process wide: each operator start (the member runtime's source
starts once its pipeline is built) moves what is alive at that moment, and
each close thaws everything. A program that manages the collector itself (its
own ``gc.freeze()``, thresholds, ``gc.disable()``) sets
``OperatorConfig(gc_policy="none")`` and the operator leaves the collector alone.
"""

from __future__ import annotations

import enum
import gc
import logging

log = logging.getLogger(__name__)


class GcPolicy(enum.Enum):
    """How the operator treats the cyclic garbage collector after start-up."""

    #: gc.collect() then gc.freeze() once started, gc.unfreeze() at close (the default).
    FREEZE = "freeze"
    #: Leave the collector as the program set it.
    NONE = "none"


def apply_gc_policy(policy: GcPolicy, who: str) -> None:
    """Apply ``policy`` now; ``who`` names the caller in the debug log line.

    Called at the end of a start, when the long-lived objects exist: the
    operator's ``start()``, the member runtime once its pipeline runs.
    """
    if not isinstance(policy, GcPolicy):
        raise TypeError(f"policy must be a GcPolicy, got {type(policy).__name__}")
    if policy is GcPolicy.NONE:
        return
    freed = gc.collect()
    gc.freeze()
    log.debug("%s: gc frozen (%d objects in the permanent generation, %d freed first)",
              who, gc.get_freeze_count(), freed)


def release_gc_policy(policy: GcPolicy, who: str) -> None:
    """Undo :func:`apply_gc_policy` at close, so that the closed operator can be freed."""
    if not isinstance(policy, GcPolicy):
        raise TypeError(f"policy must be a GcPolicy, got {type(policy).__name__}")
    if policy is GcPolicy.NONE:
        return
    log.debug("%s: gc unfrozen (%d objects back in the collected generations)", who, gc.get_freeze_count())
    gc.unfreeze()


__all__ = ["GcPolicy", "apply_gc_policy", "release_gc_policy"]
