"""Polling with a timeout: ``wait_until(predicate, timeout, what)``, the
project's one wait-until-condition loop.

For a condition another thread or process makes true and nothing signals
(a port that opens, a file that appears, a status that changes, a broker's
committed offsets, a region's progress):

1. ``predicate()`` is called at once, then every ``interval`` seconds (the
   pause is ``pause(interval)``: ``time.sleep``, or a stop event's ``wait``
   for a wait that a shutdown must cut short; the predicate then sees the
   stop and returns or raises);
2. its first true result is returned;
3. an exception it raises propagates at once (it is not retried);
4. after ``timeout`` seconds without a true result, :class:`WaitTimeout`
   names ``what`` and the last result, so a hung wait says what it waited for.

Where something can be signalled (a ``threading.Condition``, an ``Event``, a
process exit), wait on that instead.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TypeVar, cast

import tenacity

T = TypeVar("T")

#: Default pause between two calls of the predicate: short enough for tests
#: measured in seconds, long enough not to spin a core.
POLL_INTERVAL_S = 0.05


class WaitTimeout(TimeoutError):
    """The predicate stayed false for the whole timeout."""


def wait_until(
    predicate: Callable[[], T | None],
    timeout: float,
    what: str,
    *,
    interval: float = POLL_INTERVAL_S,
    pause: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``predicate`` until it returns something true and return that (see the module's steps)."""
    if not (math.isfinite(timeout) and timeout >= 0 and math.isfinite(interval) and interval > 0):
        # an infinite or NaN timeout would never pass: the wait must end
        raise ValueError(
            f"wait_until: timeout {timeout!r} must be finite and >= 0, interval {interval!r} finite and > 0"
        )
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_delay(timeout),
        wait=tenacity.wait_fixed(interval),
        retry=tenacity.retry_if_result(lambda value: not value),
        sleep=pause,
    )
    try:
        result = retrying(predicate)
    except tenacity.RetryError as exc:
        last = exc.last_attempt.result()
        raise WaitTimeout(f"timed out after {timeout:g}s waiting for {what}; last {last!r:.200}") from None
    return cast(T, result)  # the retrying stops before its timeout only on a true result, never None
