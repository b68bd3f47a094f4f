"""The project's one retry-delay formula, and the doubling backoff built on it.

Where a retry sleeps in the calling thread (a request re-sent, a client call
retried), tenacity runs the loop (``coordinator/protocol/wire/request_transport.py``,
``cr_consumer/kafka/librdkafka/client.py``, ``coordinator/protocol/common/waiting.py``).
Where a loop or a state machine only needs to know *when* the next attempt
may run (it never sleeps: its caller's timer or tick decides), it uses this
module:

* :func:`doubled`: ``first_s`` doubled ``n`` times, at most ``max_s``. Every
  doubling delay of the project is this: the region's failure-streak hold
  (``coordinator/region/timing.py``), its settle time after rebalances
  (the same module), the runner's standby respawns
  (``cr_consumer/runtime/runner/standby.py``), and :class:`Backoff`.
* :class:`Backoff`, for a recurring task that failed (retention expiry and
  compaction in the store, the server loop's housekeeping and services' tick
  hooks, the runner's restarts of a member that keeps dying):

  1. ``ready(now)``: whether the task may run now (always, until it has failed);
  2. ``failed(now)``: count a failure; the next attempt waits ``first_s``,
     doubling with each consecutive failure, at most ``max_s`` (returned);
  3. ``succeeded()``: the next failure waits ``first_s`` again.

The caller's clock gives ``now``; nothing here reads a clock or sleeps.
"""

from __future__ import annotations

import attrs

__all__ = ["MAX_DOUBLINGS", "Backoff", "doubled"]

#: Bound on the exponent: 2^60 times the smallest first delay in use (1 ms) is
#: far past the largest cap (one day), and a bounded exponent keeps a count of
#: a million failures from overflowing a float.
MAX_DOUBLINGS = 60


def doubled(first_s: float, n: int, max_s: float) -> float:
    """``min(max_s, first_s * 2^n)`` for ``n >= 0`` doublings (multiplying by a
    power of two is exact, so this equals doubling a delay ``n`` times in a row)."""
    if n < 0:
        raise ValueError(f"doubled: {n} doublings (must be >= 0)")
    return min(max_s, first_s * 2.0 ** min(n, MAX_DOUBLINGS))


@attrs.define
class Backoff:
    """When a failed task may run again (see the module docstring)."""

    first_s: float
    max_s: float
    failures: int = 0  # consecutive
    not_before: float = float("-inf")

    def ready(self, now: float) -> bool:
        return now >= self.not_before

    def failed(self, now: float) -> float:
        """Count a failure; returns the delay before the next attempt."""
        self.failures += 1
        delay = doubled(self.first_s, self.failures - 1, self.max_s)
        self.not_before = now + delay
        return delay

    def succeeded(self) -> None:
        self.failures = 0
        self.not_before = float("-inf")
