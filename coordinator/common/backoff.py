"""A doubling retry delay for a recurring task that failed (retention expiry and
compaction in the store, the server loop's housekeeping and services' tick hooks).

1. ``ready(now)``: whether the task may run now (always, until it has failed).
2. ``failed(now)``: count a failure; the next attempt waits ``first_s``,
   doubling with each consecutive failure, at most ``max_s`` (returned).
3. ``succeeded()``: the next failure waits ``first_s`` again.

The caller's clock gives ``now``; nothing here reads a clock or sleeps.
"""

from __future__ import annotations

import attrs

__all__ = ["Backoff"]


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
        delay = min(self.max_s, self.first_s * float(2 ** min(self.failures - 1, 30)))
        self.not_before = now + delay
        return delay

    def succeeded(self) -> None:
        self.failures = 0
        self.not_before = float("-inf")
