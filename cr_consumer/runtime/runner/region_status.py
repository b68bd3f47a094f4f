"""The controller's view of a running region, and waiting on it from outside.

1. :func:`region_report` asks the coordinator for the region's typed status
   (``coordinator/protocol/region/status.py``) and its recent events, each
   request bounded by a timeout (``STATUS_TIMEOUT_S`` by default), so a dead
   or restarting coordinator fails the request instead of blocking the caller.
2. :func:`wait_for_status` polls a region's status until a predicate holds:
   a request that fails is retried (the coordinator restarting, the region
   not created yet); the region FAILED in the controller's view, or failed
   for good in the runner's (a member's final exit), raises
   :class:`RegionFailed` at once; after the timeout, ``TimeoutError`` names
   the last status (or the last error when no status came).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from coordinator.protocol.common.waiting import WaitTimeout, wait_until
from coordinator.protocol.region.replies import RegionPhase
from coordinator.protocol.region.status import RegionReport, RegionStatus

#: Bound on one status request, so a dead or restarting coordinator makes
#: status() fail (and wait_until() retry) instead of blocking the caller.
STATUS_TIMEOUT_S = 3.0


class RegionFailed(RuntimeError):
    """The region failed while a caller waited on it (``wait_until``, ``run_until_done``)."""


class WatchedRegion(Protocol):
    """What :func:`wait_for_status` reads of a region."""

    #: The region's name (its Kafka group).
    group: str

    @property
    def failed(self) -> str | None:
        """Why the region failed for good in the runner's view, else None."""
        ...

    def status(self, timeout: float = STATUS_TIMEOUT_S) -> RegionStatus:
        """The controller's view of the region; raises when the coordinator does not answer."""
        ...


def region_report(endpoint: str, group: str, curve: tuple[str, str] | None, timeout: float) -> RegionReport:
    """Step 1: the controller's view of region ``group`` and its recent events
    (``curve``: the server's public key file and the client's keypair file)."""
    from coordinator.client import CoordinatorClient

    kwargs: dict[str, Any] = {}
    if curve is not None:
        from coordinator.protocol.curve_keys import load_keypair, load_public_key

        kwargs = {"curve_server_key": load_public_key(curve[0]), "curve_keypair": load_keypair(curve[1])}
    with CoordinatorClient(endpoint, timeout=timeout, **kwargs) as client:
        return client.region_status(group, timeout)


def wait_for_status(
    region: WatchedRegion, predicate: Callable[[RegionStatus], bool], timeout: float, interval: float
) -> RegionStatus:
    """Step 2: poll ``region.status()`` until ``predicate(status)``; raises TimeoutError
    with the last status, or RegionFailed when the region failed meanwhile."""
    deadline = time.monotonic() + timeout
    last: RegionStatus | None = None
    last_error: Exception | None = None

    def met() -> RegionStatus | None:
        nonlocal last, last_error
        try:
            last = region.status(timeout=min(STATUS_TIMEOUT_S, max(0.2, deadline - time.monotonic())))
        except Exception as exc:  # noqa: BLE001 - coordinator restarting or region not created yet: retried
            last_error = exc
            last = None
        if last is not None:
            if predicate(last):
                return last
            if last.phase is RegionPhase.FAILED:
                raise RegionFailed(f"region {region.group} FAILED: {last.failed_reason}")
        if region.failed:
            raise RegionFailed(region.failed)
        return None

    try:
        return wait_until(met, timeout, f"region {region.group}'s condition", interval=interval)
    except WaitTimeout:
        raise TimeoutError(
            f"region {region.group}: condition not met within {timeout}s; last status {last!r}"
            + (f"; last error {last_error!r}" if last is None and last_error else "")
        ) from None


__all__ = ["STATUS_TIMEOUT_S", "RegionFailed", "WatchedRegion", "region_report", "wait_for_status"]
