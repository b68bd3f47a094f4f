"""What a process of this project does with Python's cyclic garbage collector:
one policy (:class:`GcPolicy`) and the operations its callers apply.

Why: each process holds a large, long-lived heap (modules, ZeroMQ, Prometheus,
the Kafka client, the operator's threads and queues, the user's pipeline, the
coordinator's replayed state: up to hundreds of thousands of dicts), while
its hot path allocates short-lived containers all the time (a decoded request,
a record, a callback's dicts). The collector's young generations then run all
the time, and each time enough objects survive into the oldest generation it
re-scans the whole heap: a full collection that stalls the thread it hits (a
drain in flight, a merge round's replies, heartbeats) and costs CPU for
nothing, since the long-lived heap holds no garbage.

Measured (bench/, BENCHMARKS.md): in an operator the re-scans cost 7-19 % of
the CPU per record of a callback doing about a microsecond of Python work
(bench/bench_operator.py --work-trials), each full collection ~20 ms; a full
collection of an empty-state coordinator's heap takes ~5 ms of CPU, ~21 ms
with 20,000 groups (bench/bench_coordinator_gc.py); frozen, ~0.

The operations, each a no-op under :attr:`GcPolicy.NONE` (a program, host or
pipeline that manages the collector itself: its own ``gc.freeze()``,
thresholds, ``gc.disable()``):

1. :func:`freeze_after_start`, once the long-lived objects exist (the
   operator's ``start()``, the member runtime once its pipeline runs, the
   coordinator once its store is loaded):

   a. ``gc.collect()``: the garbage made while starting is freed, not frozen;
   b. ``gc.freeze()``: every object alive now moves to the permanent
      generation, which later collections never scan. Young objects are still
      collected as usual, and a frozen object is still freed by reference
      counting when its last reference goes (a retired checkpoint, a deleted
      group); only a reference cycle among frozen objects stays allocated
      until ``gc.unfreeze()`` (the coordinator's store is plain dicts and
      lists without cycles). The price is one full collection at start-up.

2. :func:`thaw_at_close` (the operator's ``close()``): ``gc.unfreeze()``. A
   closed operator's objects were frozen with the rest and hold reference
   cycles (threads, callbacks, the Kafka client); frozen, they would never be
   freed. Operators still running in the process are scanned again until the
   next start freezes once more. Freezing is process wide: each start moves
   what is alive at that moment, each close thaws everything.

3. :func:`raise_young_threshold` / :func:`restore_thresholds` (a member while
   records flow, FREEZE only): a member keeps thousands of young containers
   alive at any moment, the records in flight (``KafkaRecord`` tuples, which
   the collector cannot untrack). Python collects the young generation after
   every 700 net new containers, each collection walking all of those
   records: about one per 250-300 records, ~50 us each, 6-7 % of a member's
   CPU per record ("Pipeline member: CPU per record"). The young threshold is
   raised to :data:`YOUNG_THRESHOLD` (the older generations' stay as they
   are): about 30 times fewer young collections. Reference cycles are still
   collected, only later: at most YOUNG_THRESHOLD new containers (a few MB)
   wait for the next collection. At shutdown the previous thresholds come
   back. The thresholds are process wide: the member process runs one member.

4. :func:`collector_paused` (a Spark executor turning a fetch into columns,
   whatever the policy: nothing there is long-lived): a fetch of 10,000
   records allocates ~10 objects per record (messages or ConsumerRecords,
   bytes, tuples), and every 700 allocations start a collection that walks
   the records held so far: a third of a range read's time (librdkafka,
   measured with cProfile). Nothing allocated there forms a reference cycle,
   so reference counting frees it all; the collector runs again at the first
   allocation after the block.

Settings: ``OperatorConfig.gc_policy`` and the source option ``gc_policy``
(``KafkaSource(options={"gc_policy": "none"})``) for operators and members,
``cr-coordinator serve --gc-policy`` for the coordinator; FREEZE by default.
"""

from __future__ import annotations

import contextlib
import enum
import gc
import logging
from collections.abc import Iterator

log = logging.getLogger(__name__)

#: Net new container objects between two young collections while a member runs
#: (Python's default: 700). Bounds the cyclic garbage that can wait for the
#: next collection (a few MB); 20,000 makes young collections ~30x rarer.
YOUNG_THRESHOLD = 20_000

#: The collector's three generation thresholds, as ``gc.get_threshold()`` gives them.
Thresholds = tuple[int, int, int]


class GcPolicy(enum.Enum):
    """How a process treats the cyclic garbage collector once it has started."""

    #: Freeze after start-up, thaw at close, a higher young threshold while a member runs (the default).
    FREEZE = "freeze"
    #: Leave the collector as the program set it.
    NONE = "none"


def _checked(policy: GcPolicy) -> GcPolicy:
    # A str would compare unequal to both members and silently act as NONE.
    if not isinstance(policy, GcPolicy):
        raise TypeError(f"policy must be a GcPolicy, got {type(policy).__name__}")
    return policy


def freeze_after_start(policy: GcPolicy, who: str, *, level: int = logging.DEBUG) -> int:
    """Step 1: apply ``policy`` now that the long-lived objects exist; returns the
    number of frozen objects (0 under NONE). ``who`` names the caller in the one
    log line, written at ``level``."""
    if _checked(policy) is GcPolicy.NONE:
        log.log(level, "%s: gc: policy none, the collector is left alone", who)
        return 0
    freed = gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.log(level, "%s: gc: %d objects frozen (%d freed first)", who, frozen, freed)
    return frozen


def thaw_at_close(policy: GcPolicy, who: str) -> None:
    """Step 2: undo :func:`freeze_after_start` at close, so that a closed operator can be freed."""
    if _checked(policy) is GcPolicy.NONE:
        return
    log.debug("%s: gc unfrozen (%d objects back in the collected generations)", who, gc.get_freeze_count())
    gc.unfreeze()


def raise_young_threshold(policy: GcPolicy, who: str) -> Thresholds | None:
    """Step 3: raise the young generation's threshold under FREEZE; returns the
    previous thresholds (for :func:`restore_thresholds`), or None when the
    collector is left alone (NONE, or collections switched off by the program)."""
    _checked(policy)
    previous = gc.get_threshold()
    if policy is not GcPolicy.FREEZE or previous[0] == 0:  # 0: the program switched collections off
        return None
    _young, *older = previous
    gc.set_threshold(max(YOUNG_THRESHOLD, previous[0]), *older)
    log.debug("%s: gc thresholds %s -> %s while records flow", who, previous, gc.get_threshold())
    return previous


def restore_thresholds(previous: Thresholds | None) -> None:
    """Step 3, at shutdown: the thresholds :func:`raise_young_threshold` replaced (nothing when it did not)."""
    if previous is not None:
        gc.set_threshold(*previous)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Step 4: the cyclic collector off inside the block (never around a
    ``yield``: the caller's code runs with it on); a no-op when it is off already."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


__all__ = [
    "YOUNG_THRESHOLD",
    "GcPolicy",
    "Thresholds",
    "collector_paused",
    "freeze_after_start",
    "raise_young_threshold",
    "restore_thresholds",
    "thaw_at_close",
]
