"""Configurable resource limits of the coordinator (``cr-coordinator --max-...`` flags).

Every limit bounds memory or log size that a client could otherwise grow
without end. A request that would exceed one changes nothing and gets the
error reply ``LIMIT_EXCEEDED`` naming the limit; each rejection is counted in
the Prometheus counter ``crkafka_coordinator_limit_rejections_total{limit=...}``.

Leases and expiry (not rejections, but bounds of the same kind):

* ``member_lease_s``: a registered operator name that has sent no request
  naming it (``register``, ``unregister``, ``merge_checkpoint``, ``members``
  with ``operator``) for this long is unregistered, so a killed member does not
  count in the member lists (and a merge's N) for ever.
* ``region_expiry_s``: a region with no joined member for this long is dropped
  with its durable document (members restarting later start from the initial
  state: keep it at least as long as any planned outage).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

import attrs

from coordinator.protocol.wire.errors import LimitExceeded

if TYPE_CHECKING:
    from coordinator.server.metrics import CoordinatorMetrics


#: Largest value of any limit. Nothing a coordinator holds comes near it (2**40
#: bytes is a terabyte), so a larger value is a typo that would silently mean
#: "no limit"; it is refused instead.
MAX_LIMIT = 2**40


_Limit = TypeVar("_Limit", int, float)


def _positive(instance: object, attribute: attrs.Attribute[_Limit], value: _Limit) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_LIMIT:
        raise ValueError(f"limit {attribute.name} must be a number in (0, {MAX_LIMIT}], got {value!r}")


@attrs.frozen
class Limits:
    """The coordinator's limits (defaults below; see the module docstring)."""

    #: Groups (registry entries or control variables) held at once.
    max_groups: int = attrs.field(default=100_000, validator=_positive)
    #: Registered operator names per group (also bounds a register's log record).
    max_members_per_group: int = attrs.field(default=1_000, validator=_positive)
    #: Control variables (topic, partition) per group.
    max_control_variables_per_group: int = attrs.field(default=1_000_000, validator=_positive)
    #: Consistent regions held by the region controller.
    max_regions: int = attrs.field(default=1_000, validator=_positive)
    #: Checkpoint merges waiting for contributions.
    max_pending_merges: int = attrs.field(default=1_000, validator=_positive)
    #: Estimated memory of the contributions held by pending merges
    #: (``MERGE_ENTRY_BYTES`` + topic length per offset entry).
    max_pending_merge_bytes: int = attrs.field(default=256 * 1024 * 1024, validator=_positive)
    #: Seconds after which a silent registered operator name is unregistered.
    member_lease_s: float = attrs.field(default=3600.0, validator=_positive)
    #: Seconds after which a region with no member is dropped.
    region_expiry_s: float = attrs.field(default=7 * 86400.0, validator=_positive)


#: Memory charged per offset entry held by a pending merge (a dict slot, a
#: (topic, partition) tuple, a topic string and an int; measured ~200 bytes in CPython).
MERGE_ENTRY_BYTES = 200


class LimitCounter:
    """Counts rejections per limit name (the Prometheus counter when metrics are on)."""

    def __init__(self, metrics: CoordinatorMetrics | None) -> None:
        self._counter = metrics.limit_rejections if metrics is not None else None
        self.totals: dict[str, int] = {}

    def rejected(self, limit: str) -> None:
        self.totals[limit] = self.totals.get(limit, 0) + 1
        if self._counter is not None:
            self._counter.labels(limit).inc()

    def exceeded(self, limit: str, message: str) -> LimitExceeded:
        """Count a rejection by ``limit`` and return the error to raise."""
        self.rejected(limit)
        return LimitExceeded(f"limit {limit} exceeded: {message}")
