"""Every wait of the coordinator client is bounded: a timeout that is not a
finite number of seconds in range is refused before anything is sent, so no
caller can turn a request into a wait for ever."""

from __future__ import annotations

import math
import time

import pytest

from coordinator.client import MAX_TIMEOUT_S, CoordinatorClient
from coordinator.protocol.common.osutil import free_port
from coordinator.protocol.wire.errors import CoordinatorUnavailable

BAD_TIMEOUTS = [math.inf, math.nan, -1.0, 0.0, MAX_TIMEOUT_S * 2]


def _endpoint() -> str:
    return f"tcp://127.0.0.1:{free_port()}"  # nothing listens there


@pytest.mark.parametrize("timeout", BAD_TIMEOUTS)
def test_client_refuses_an_unbounded_timeout(timeout):
    with pytest.raises(ValueError, match="timeout"):
        CoordinatorClient(_endpoint(), timeout=timeout)
    with pytest.raises(ValueError, match="timeout"):
        CoordinatorClient(_endpoint(), try_timeout=timeout)


@pytest.mark.parametrize("timeout", BAD_TIMEOUTS)
def test_request_refuses_an_unbounded_timeout(timeout):
    with CoordinatorClient(_endpoint(), timeout=0.2) as client:
        t0 = time.monotonic()
        with pytest.raises(ValueError, match="timeout"):
            client.request("ping", {}, timeout)
        assert time.monotonic() - t0 < 1.0  # refused up front, nothing was sent


def test_request_without_a_coordinator_ends_at_its_deadline():
    with CoordinatorClient(_endpoint(), timeout=5.0, try_timeout=0.1) as client:
        t0 = time.monotonic()
        with pytest.raises(CoordinatorUnavailable, match="no reply"):
            client.request("ping", {}, 0.3)
        assert time.monotonic() - t0 < 2.0
