"""The member process's cyclic garbage collector while records flow.

Why: a member keeps thousands of young container objects alive at any moment,
the records in flight (each a ``KafkaRecord`` tuple, which the collector cannot
untrack, on its way from the event thread through the message queue to the
pipeline). Python's young generation is collected after every 700 net new
container objects, and every such collection walks all of those records: about
one collection per 250-300 records, ~50 us each, so ~0.3 us of CPU per record,
6-7 % of a member's CPU per record and about a third of what the member spent
beyond a bare poll loop (BENCHMARKS.md, "Pipeline member: CPU per record").
The records are freed by reference counting as soon as the sink has written
them; the collector finds nothing to free among them.

1. ``ConsumerOperator.start()`` applied the source's ``gc_policy`` (default
   FREEZE: the modules, the pipeline and the Kafka client move to the
   permanent generation, see ``cr_consumer/operator/gc_policy.py``).
2. Then, for the FREEZE policy only, :func:`tune_collector` raises the young
   generation's threshold to :data:`YOUNG_THRESHOLD` (the older generations'
   thresholds stay as they are): about 30 times fewer young collections, each
   walking the same records in flight. Reference cycles are still collected,
   only later: at most :data:`YOUNG_THRESHOLD` new container objects (a few
   MB) accumulate between two young collections.
3. At shutdown :func:`restore_collector` puts the previous thresholds back.

The thresholds are process wide, like the freeze: the member process runs one
member, so it owns them while it runs.

A pipeline that manages the collector itself sets the source option
``gc_policy="none"`` (``KafkaSource(options={"gc_policy": "none"})``): the
member then leaves the collector alone as the operator does.
"""

from __future__ import annotations

import gc
import logging

from cr_consumer.operator.gc_policy import GcPolicy

log = logging.getLogger(__name__)

#: Net new container objects between two young collections while a member runs
#: (Python's default: 700). Bounds the cyclic garbage that can wait for the
#: next collection (a few MB); 20,000 makes young collections ~30x rarer.
YOUNG_THRESHOLD = 20_000


def tune_collector(policy: GcPolicy, who: str) -> tuple[int, int, int] | None:
    """Step 2: raise the young generation's threshold under the FREEZE policy;
    returns the previous thresholds (for :func:`restore_collector`), or None
    when the policy leaves the collector alone."""
    if not isinstance(policy, GcPolicy):
        raise TypeError(f"policy must be a GcPolicy, got {type(policy).__name__}")
    previous = gc.get_threshold()
    if policy is not GcPolicy.FREEZE or previous[0] == 0:  # 0: the program switched collections off
        return None
    _young, *older = previous
    gc.set_threshold(max(YOUNG_THRESHOLD, previous[0]), *older)
    log.debug("%s: gc thresholds %s -> %s while records flow", who, previous, gc.get_threshold())
    return previous


def restore_collector(previous: tuple[int, int, int] | None) -> None:
    """Step 3: the thresholds :func:`tune_collector` replaced (nothing when it did not)."""
    if previous is not None:
        gc.set_threshold(*previous)


__all__ = ["YOUNG_THRESHOLD", "restore_collector", "tune_collector"]
