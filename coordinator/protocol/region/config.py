"""A region's settings (:class:`RegionConfig`): what a member's join carries in its
``config`` (each setting checked on the wire against ``CONFIG_FIELDS`` in
``coordinator/protocol/region/messages.py``); the first member to join fixes them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs


def _positive(name: str) -> Callable[[Any, Any, float], None]:
    def check(instance: Any, attribute: Any, value: float) -> None:
        if value <= 0:
            raise ValueError(f"region config: {name} must be > 0, got {value!r}")

    return check


@attrs.frozen
class RegionConfig:
    """A region's settings; the first member to join fixes them."""

    name: str
    index: int = 0
    mode: str = attrs.field(default="periodic")
    #: Seconds between the starts of two cycles (periodic mode): drains start on a
    #: fixed-rate grid, at least a tenth of it after a RESUME (coordinator/region/timing.py).
    period_s: float = attrs.field(default=1.0, validator=_positive("period_s"))
    #: Bound on each of the drain and checkpoint phases: a member that is stuck
    #: (a wedged sink, a lost broker) fails the cycle instead of blocking the region.
    drain_timeout_s: float = attrs.field(default=30.0, validator=_positive("drain_timeout_s"))
    #: Bound on a reset round: a member that never finishes its reset is retried.
    reset_timeout_s: float = attrs.field(default=30.0, validator=_positive("reset_timeout_s"))
    max_consecutive_resets: int = attrs.field(default=5, validator=_positive("max_consecutive_resets"))
    #: A checkpoint that moves no source offset clears the consecutive-reset count
    #: only once the last failure is this old (coordinator/region/reset.py, the counting):
    #: without it, a checkpoint completing between two failures caused by the same
    #: record cleared the count every time, and the region reset for ever. Long
    #: enough that a failure every few seconds counts; short enough that rare,
    #: unrelated failures of an idle region never add up to FAILED. Failures this
    #: far apart are not one failure streak either (the backoff's count, below).
    failure_memory_s: float = attrs.field(default=60.0, validator=_positive("failure_memory_s"))
    #: The k-th failure reset of a streak (k >= 2; failures less than
    #: failure_memory_s apart, whatever progress between them) holds the region's
    #: RESUME for min(reset_backoff_s * 2^(k-2), reset_backoff_max_s) after the
    #: failure (coordinator/region/timing.py): a failure that persists (a sink down
    #: for a few seconds) would otherwise burn max_consecutive_resets in ~100 ms and
    #: fail the region for good, and a record that fails every time on one partition
    #: while the others move would reset at full speed for ever. The defaults
    #: outlast a failure of ~5 s (0.5+1+2+4 s) and settle at one reset per 30 s.
    reset_backoff_s: float = attrs.field(default=0.5, validator=_positive("reset_backoff_s"))
    reset_backoff_max_s: float = attrs.field(default=30.0, validator=_positive("reset_backoff_max_s"))
    #: A member silent this long is considered dead (detects kill -9 and hosts
    #: that vanish, so the region does not wait for it for ever).
    member_timeout_s: float = attrs.field(default=5.0, validator=_positive("member_timeout_s"))
    #: Members expected at start-up; the first reset waits for them (or join_grace_s).
    min_members: int = attrs.field(default=1, validator=_positive("min_members"))
    #: Bound on waiting for min_members / the members known before a coordinator
    #: restart, so one member that never comes back cannot stall the region.
    join_grace_s: float = attrs.field(default=10.0, validator=_positive("join_grace_s"))
    #: A due periodic drain waits at most this long while the members report a
    #: group rebalance (coordinator/region/timing.py): a drain commits, and a
    #: commit during a group join makes the consumer rejoin, so drains every
    #: period could keep a join from ever finishing.
    rebalance_settle_max_s: float = attrs.field(default=16.0, validator=_positive("rebalance_settle_max_s"))

    def __attrs_post_init__(self) -> None:
        if self.mode not in ("periodic", "operator_driven"):
            raise ValueError(f"region config: mode must be 'periodic' or 'operator_driven', got {self.mode!r}")
        if not self.name:
            raise ValueError("region config: name must be non-empty")

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RegionConfig:
        known = {f.name for f in attrs.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"region config: unknown settings {sorted(unknown)}")
        return cls(**d)

    def same_settings(self, other: RegionConfig) -> list[str]:
        """Names of the settings that differ (min_members and join_grace_s may differ)."""
        skip = {"min_members", "join_grace_s"}
        return [
            f.name
            for f in attrs.fields(RegionConfig)
            if f.name not in skip and getattr(self, f.name) != getattr(other, f.name)
        ]
