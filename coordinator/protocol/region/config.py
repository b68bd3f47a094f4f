"""A region's settings (:class:`RegionConfig`): what a member's join carries in its
``config``; the first member to join fixes them. Each setting is type- and
range-checked when a config is built (ValueError naming it), so the join's wire
check (``check_region_config``, ``coordinator/protocol/region/messages.py``), a
stored region document and a member's own settings pass the same checks.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs

#: Bound of every duration in a region config (seconds): one day. Also keeps a
#: deadline computed from it finite and a timer from overflowing.
MAX_CONFIG_SECONDS = 86_400.0
#: Smallest duration (seconds): below it a region would spin its tick.
MIN_CONFIG_SECONDS = 0.001
#: Bound of the consistent-region index: int64.
MAX_INDEX = (1 << 63) - 1
MODES = ("periodic", "operator_driven")


Validator = Callable[[object, "attrs.Attribute[Any]", Any], None]


def _as_float(value: Any) -> Any:
    """A seconds setting given as an int (in int64) as the float it is held as;
    anything else as given, for `_seconds` to judge."""
    return float(value) if type(value) is int and -(1 << 63) <= value < (1 << 63) else value


def _seconds(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    what, low, high = f"region config: {attribute.name}", MIN_CONFIG_SECONDS, MAX_CONFIG_SECONDS
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} must be a number, got {value!r:.80}")
    if isinstance(value, int):  # past int64 (`_as_float` converted the others)
        raise ValueError(f"{what} must be in [{low}, {high}], got an integer of {len(str(value))} digits")
    if not (math.isfinite(value) and low <= value <= high):
        raise ValueError(f"{what} must be a finite number in [{low}, {high}], got {value!r:.40}")


def _integer(low: int, high: int) -> Validator:
    def check(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        what = f"region config: {attribute.name}"
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{what} must be an integer, got {value!r:.80}")
        if not low <= value <= high:
            raise ValueError(f"{what} must be in [{low}, {high}], got {str(value)[:40]}")

    return check


def _mode(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value not in MODES:
        raise ValueError(f"region config: mode must be 'periodic' or 'operator_driven', got {value!r:.80}")


def _name(instance: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if not value:
        raise ValueError("region config: name must be non-empty")


@attrs.frozen
class RegionConfig:
    """A region's settings; the first member to join fixes them."""

    name: str = attrs.field(validator=_name)
    index: int = attrs.field(default=0, validator=_integer(0, MAX_INDEX))
    mode: str = attrs.field(default="periodic", validator=_mode)
    #: Seconds between the starts of two cycles (periodic mode): drains start on a
    #: fixed-rate grid, at least a tenth of it after a RESUME (coordinator/region/timing.py).
    period_s: float = attrs.field(default=1.0, converter=_as_float, validator=_seconds)
    #: Bound on each of the drain and checkpoint phases: a member that is stuck
    #: (a wedged sink, a lost broker) fails the cycle instead of blocking the region.
    drain_timeout_s: float = attrs.field(default=30.0, converter=_as_float, validator=_seconds)
    #: Bound on a reset round: a member that never finishes its reset is retried.
    reset_timeout_s: float = attrs.field(default=30.0, converter=_as_float, validator=_seconds)
    max_consecutive_resets: int = attrs.field(default=5, validator=_integer(1, 1_000_000))
    #: A checkpoint that moves no source offset clears the consecutive-reset count
    #: only once the last failure is this old (coordinator/region/reset.py, the counting):
    #: without it, a checkpoint completing between two failures caused by the same
    #: record cleared the count every time, and the region reset for ever. Long
    #: enough that a failure every few seconds counts; short enough that rare,
    #: unrelated failures of an idle region never add up to FAILED. Failures this
    #: far apart are not one failure streak either (the backoff's count, below).
    failure_memory_s: float = attrs.field(default=60.0, converter=_as_float, validator=_seconds)
    #: The k-th failure reset of a streak (k >= 2; failures less than
    #: failure_memory_s apart, whatever progress between them) holds the region's
    #: RESUME for min(reset_backoff_s * 2^(k-2), reset_backoff_max_s) after the
    #: failure (coordinator/region/timing.py): a failure that persists (a sink down
    #: for a few seconds) would otherwise burn max_consecutive_resets in ~100 ms and
    #: fail the region for good, and a record that fails every time on one partition
    #: while the others move would reset at full speed for ever. The defaults
    #: outlast a failure of ~5 s (0.5+1+2+4 s) and settle at one reset per 30 s.
    reset_backoff_s: float = attrs.field(default=0.5, converter=_as_float, validator=_seconds)
    reset_backoff_max_s: float = attrs.field(default=30.0, converter=_as_float, validator=_seconds)
    #: A member silent this long is considered dead (detects kill -9 and hosts
    #: that vanish, so the region does not wait for it for ever).
    member_timeout_s: float = attrs.field(default=5.0, converter=_as_float, validator=_seconds)
    #: Members expected at start-up; the first reset waits for them (or join_grace_s).
    min_members: int = attrs.field(default=1, validator=_integer(1, 100_000))
    #: Bound on waiting for min_members / the members known before a coordinator
    #: restart, so one member that never comes back cannot stall the region.
    join_grace_s: float = attrs.field(default=10.0, converter=_as_float, validator=_seconds)
    #: A due periodic drain waits at most this long while the members report a
    #: group rebalance (coordinator/region/timing.py): a drain commits, and a
    #: commit during a group join makes the consumer rejoin, so drains every
    #: period could keep a join from ever finishing.
    rebalance_settle_max_s: float = attrs.field(default=16.0, converter=_as_float, validator=_seconds)

    def to_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RegionConfig:
        known = {f.name for f in attrs.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"region config: unknown settings {sorted(unknown)[:10]!r:.200}")
        return cls(**d)

    def same_settings(self, other: RegionConfig) -> list[str]:
        """Names of the settings that differ (min_members and join_grace_s may differ)."""
        skip = {"min_members", "join_grace_s"}
        return [
            f.name
            for f in attrs.fields(RegionConfig)
            if f.name not in skip and getattr(self, f.name) != getattr(other, f.name)
        ]
