"""``run_until_done`` always ends: its bounds are checked before it waits."""

from __future__ import annotations

import math

import pytest

from cr_consumer.runtime.runner.drive import run_until_done
from cr_consumer.runtime.runner.region_status import RegionFailed


@pytest.mark.parametrize(
    ("timeout_s", "poll_s"), [(math.inf, 0.5), (math.nan, 0.5), (0, 0.5), (10, math.inf), (10, 0), (1, 2)]
)
def test_unbounded_waits_are_refused(timeout_s, poll_s):
    with pytest.raises(ValueError, match="timeout_s"):
        run_until_done(
            None,
            done=lambda: False,
            progress=lambda: 0.0,  # type: ignore[arg-type]
            timeout_s=timeout_s,
            poll_s=poll_s,
        )


class _Region:
    """The part of a RegionHandle that run_until_done reads."""

    def __init__(self, failed: str | None = None) -> None:
        self.failed = failed
        self.killed: list[str] = []

    def live_members(self) -> list[str]:
        return ["member-0", "member-1"]

    def kill(self, name: str) -> None:
        self.killed.append(name)


def test_done_kills_half_way_once_and_returns_the_time_taken():
    region = _Region()
    checks = iter(range(100))
    progress = iter([0.2, 0.6, 0.7, 0.8, 0.9] + [1.0] * 100)
    elapsed = run_until_done(
        region,
        done=lambda: next(checks) >= 5,
        progress=lambda: next(progress),  # type: ignore[arg-type]
        kill_half_way=True,
        timeout_s=10,
        poll_s=0.01,
    )
    assert 0 <= elapsed < 5
    assert region.killed == ["member-0"]


def test_a_failed_region_and_a_timeout_end_the_wait():
    with pytest.raises(RegionFailed, match="sink down"):
        run_until_done(
            _Region(failed="sink down"),
            done=lambda: False,
            progress=lambda: 0.0,  # type: ignore[arg-type]
            timeout_s=10,
            poll_s=0.01,
        )
    with pytest.raises(TimeoutError, match="not finished within 0 s"):
        run_until_done(
            _Region(),
            done=lambda: False,
            progress=lambda: 0.0,  # type: ignore[arg-type]
            timeout_s=0.1,
            poll_s=0.01,
        )
