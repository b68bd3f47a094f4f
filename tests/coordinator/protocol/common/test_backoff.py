"""The one doubling formula (``doubled``) and the failed-task backoff built on it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.protocol.common.backoff import MAX_DOUBLINGS, Backoff, doubled


def test_doubled_doubles_up_to_its_cap():
    assert [doubled(0.5, n, 30.0) for n in range(8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert doubled(2.0, 0, 1.0) == 1.0  # the cap holds from the first delay on


def test_doubled_bounds_its_exponent():
    assert doubled(1e-3, 10**6, 86_400.0) == 86_400.0  # no OverflowError
    assert doubled(1.0, 10**6, float("inf")) == 2.0**MAX_DOUBLINGS


def test_doubled_refuses_a_negative_count():
    with pytest.raises(ValueError, match="doublings"):
        doubled(1.0, -1, 2.0)


@given(first=st.floats(0.0, 100.0), cap=st.floats(0.0, 1000.0), n=st.integers(0, MAX_DOUBLINGS))
def test_doubled_equals_doubling_in_a_row(first, cap, n):
    """Up to its bound on the exponent, the closed form is what a delay doubled
    in place (``min(cap, d * 2)``, the runner's delays before) becomes."""
    delay = min(cap, first)
    for _ in range(n):
        delay = min(cap, delay * 2)
    assert doubled(first, n, cap) == delay


def test_backoff_schedule_doubles_up_to_its_maximum():
    b = Backoff(first_s=1.0, max_s=8.0)
    assert b.ready(0.0)
    assert [b.failed(100.0) for _ in range(5)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert not b.ready(107.9)
    assert b.ready(108.0)
    b.succeeded()
    assert b.ready(0.0)
    assert b.failures == 0
