"""What the coordinator process does with Python's cyclic garbage collector.

Why: the coordinator's heap is mostly long-lived: modules, ZeroMQ and
Prometheus objects, and the state replayed from the durable log (groups,
control variables, checkpoints: up to hundreds of thousands of dicts). Every
request allocates short-lived containers (the decoded JSON body, the reply),
so the collector's young generations run all the time, and each time enough
objects survive into the oldest generation it re-scans the whole heap: a full
collection, on the loop thread, that stalls every request in flight for as
long as the scan takes (milliseconds for an empty store, tens of milliseconds
and more as the state grows). A merge round or a drain whose replies wait
behind one is the tail of the checkpoint latency, and a long one delays
heartbeats towards the members' timeouts.

The default policy, :attr:`CoordinatorGcPolicy.FREEZE`, runs once the store
has been loaded (``cr-coordinator serve`` calls :func:`apply_after_load` when
the server reports ``loaded``):

1. ``gc.collect()``: the garbage of the replay is freed, not frozen;
2. ``gc.freeze()``: every object alive now (the loaded state with the rest)
   moves to the permanent generation, which later collections never scan.
   Young objects are collected as before; a frozen object is still freed by
   reference counting when its last reference goes (a retired checkpoint, a
   deleted group); only a reference cycle among frozen objects would stay
   allocated, and the store's state is plain dicts and lists without cycles.

The price is one full collection at start-up (a few to tens of milliseconds,
while requests wait once). State added after the load is scanned as usual.
Measured with bench/bench_coordinator_gc.py: a full collection of an
empty-state coordinator's heap takes ~5 ms of CPU, ~21 ms with 20,000 groups;
frozen, ~0. ``--gc-policy none`` leaves the collector as Python sets it (for
comparisons, or a host that manages it).
"""

from __future__ import annotations

import enum
import gc
import logging

log = logging.getLogger(__name__)


class CoordinatorGcPolicy(enum.Enum):
    """How the coordinator process treats the cyclic garbage collector after its load."""

    #: gc.collect() then gc.freeze() once the state is loaded (the default).
    FREEZE = "freeze"
    #: Leave the collector as Python set it.
    NONE = "none"


def apply_after_load(policy: CoordinatorGcPolicy) -> int:
    """Apply ``policy`` now (the state is loaded); returns the number of frozen objects."""
    if not isinstance(policy, CoordinatorGcPolicy):
        raise TypeError(f"policy must be a CoordinatorGcPolicy, got {type(policy).__name__}")
    if policy is CoordinatorGcPolicy.NONE:
        log.info("gc: policy none, the collector is left alone")
        return 0
    freed = gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("gc: %d objects frozen after the load (%d freed first)", frozen, freed)
    return frozen


__all__ = ["CoordinatorGcPolicy", "apply_after_load"]
