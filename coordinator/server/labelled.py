"""Cached children of a Prometheus metric with one label.

``Counter.labels(value)`` validates the value, takes the family's lock and
looks the child up on every call: ``labels(v).inc()`` costs ~0.9 us against
~0.3 us for ``inc()`` on a kept child (bench/bench_coordinator_gc.py), paid
per request by the coordinator's loop thread when it counts requests by type
and error replies by code. :class:`LabelCache` looks each child up once and
keeps it:

1. ``child(value)``: the cached child, else ``family.labels(value)``, cached.
2. At most ``MAX_CACHED_LABELS`` children are cached. The callers' label values
   come from closed sets (registered message types plus ``unknown`` and
   ``malformed``; the error codes), so the bound is never reached by them; a
   caller that passed free text would get uncached (slower, still correct)
   counting past the bound instead of unbounded memory.

The counts are the family's own: a cached child is the same object
``labels(value)`` returns, so the exposition is unchanged.
"""

from __future__ import annotations

from typing import Generic, Protocol, TypeVar

#: Children cached per family (bounds the cache's memory; see step 2).
MAX_CACHED_LABELS = 256

C_co = TypeVar("C_co", covariant=True)
C = TypeVar("C")


class LabelledFamily(Protocol[C_co]):
    """A Prometheus metric family with one label (Counter, Gauge, Histogram)."""

    def labels(self, *values: str) -> C_co: ...


class LabelCache(Generic[C]):
    """The children of one single-label ``family`` by label value (see the module docstring).

    Thread safety: a dict read and a dict store, each atomic; two threads that
    miss at once both call ``labels()``, which returns the same child."""

    def __init__(self, family: LabelledFamily[C]) -> None:
        self._family = family
        self._children: dict[str, C] = {}

    def child(self, value: str) -> C:
        found = self._children.get(value)
        if found is not None:
            return found
        made = self._family.labels(value)
        if len(self._children) < MAX_CACHED_LABELS:
            self._children[value] = made
        return made

    def __len__(self) -> int:
        return len(self._children)
