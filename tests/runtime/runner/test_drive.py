"""``run_until_done`` always ends: its bounds are checked before it waits."""

from __future__ import annotations

import math

import pytest

from cr_consumer.runtime.runner.drive import run_until_done


@pytest.mark.parametrize(("timeout_s", "poll_s"), [(math.inf, 0.5), (math.nan, 0.5), (0, 0.5), (10, math.inf),
                                                   (10, 0), (1, 2)])
def test_unbounded_waits_are_refused(timeout_s, poll_s):
    with pytest.raises(ValueError, match="timeout_s"):
        run_until_done(None, done=lambda: False, progress=lambda: 0.0,  # type: ignore[arg-type]
                       timeout_s=timeout_s, poll_s=poll_s)
