"""Driving a running region until its output is complete: the examples' loop.

:func:`run_until_done` reads the region only through
:class:`~cr_consumer.runtime.runner.handle.RegionHandle` and always ends: its
bounds are checked before it waits, a failed region raises at once and a stuck
one times out (steps in its docstring).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from coordinator.protocol.common.waiting import WaitTimeout, wait_until
from cr_consumer.runtime.runner.handle import RegionHandle
from cr_consumer.runtime.runner.region_status import RegionFailed

#: Bound on an example run, so a stuck region fails instead of hanging.
DEFAULT_TIMEOUT_S = 300.0


def run_until_done(
    region: RegionHandle,
    *,
    done: Callable[[], bool],
    progress: Callable[[], float],
    kill_half_way: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    poll_s: float = 0.5,
) -> float:
    """Drive a running region until its output is complete (the examples); returns
    the seconds it took:

    1. Poll ``done()`` every ``poll_s``.
    2. With ``kill_half_way``, once ``progress()`` (0..1) passes 0.5, SIGKILL one
       live member (the runner restarts it and the region resets).
    3. Raise :class:`RegionFailed` as soon as the region failed, and
       ``TimeoutError`` after ``timeout_s`` (a stuck region fails the example
       instead of hanging it).
    """
    if not (math.isfinite(timeout_s) and timeout_s > 0 and math.isfinite(poll_s) and 0 < poll_s <= timeout_s):
        raise ValueError(
            f"timeout_s ({timeout_s!r}) and poll_s ({poll_s!r}) must be finite, with 0 < poll_s <= timeout_s"
        )
    t0 = time.monotonic()
    killed = False

    def finished() -> bool:
        nonlocal killed
        if done():
            return True
        if kill_half_way and not killed and progress() > 0.5:
            region.kill(region.live_members()[0])
            killed = True
            print("killed a member (kill -9); the runner restarts it", flush=True)
        if region.failed:
            raise RegionFailed(f"region failed: {region.failed}")
        return False

    try:
        wait_until(finished, timeout_s, "the region's output to be complete", interval=poll_s)
    except WaitTimeout:
        raise TimeoutError(f"not finished within {timeout_s:.0f} s") from None
    return time.monotonic() - t0


__all__ = ["DEFAULT_TIMEOUT_S", "run_until_done"]
