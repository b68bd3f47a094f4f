"""When the operator asks its region for a reset or a drain (``RegionRequests``, region.py).

1. :meth:`RegionRequester.reset` (event thread, after a revocation with
   fetched records, or lost partitions: ``Rebalancer.after_poll``): one reset
   per rebalance across the group. The member that sets the group's
   reset-pending flag in the control plane first asks the region for a reset in
   force mode; the others only log. A flag that cannot be set asks anyway: a
   duplicate reset is harmless, a missing one is not. Standalone: nothing to
   ask; the next assignment seeks to the committed offsets (``rebalance.py``).
2. :meth:`RegionRequester.drain_at_trigger` (process thread, operator-driven
   mode, every ``trigger_count`` tuples): ask the region (standalone: the
   driver) for a drain, then wait for it, at most the drain timeout, unless the
   region answers that none follows.
"""

from __future__ import annotations

import logging

from cr_consumer.operator.config import OperatorConfig
from cr_consumer.operator.control_plane import ControlPlane
from cr_consumer.operator.handlers import DrainSignal
from cr_consumer.operator.metrics import OperatorMetrics
from cr_consumer.operator.region import RegionRequests
from cr_consumer.operator.standalone_driver import StandaloneDriver
from cr_consumer.operator.states import ClientState, ClientStateMachine

log = logging.getLogger(__name__)
S = ClientState


class RegionRequester:
    """Steps 1 and 2 of the module docstring for one operator; ``driver``: the
    standalone driver (the operator has no region runtime), or None."""

    def __init__(
        self,
        config: OperatorConfig,
        *,
        region: RegionRequests,
        driver: StandaloneDriver | None,
        control: ControlPlane,
        sm: ClientStateMachine,
        stats: OperatorMetrics,
        drains: DrainSignal,
    ) -> None:
        self.name = config.operator_name
        self._config = config
        self._region = region
        self._driver = driver
        self._control = control
        self._sm = sm
        self._stats = stats
        self._drains = drains

    def reset(self, reason: str) -> None:
        """Step 1."""
        self._stats.reset_requested()
        if self._driver is not None:
            log.info("%s: standalone: the next assignment seeks to the committed offsets (%s)", self.name, reason)
            return
        group_id = self._config.group_id
        try:
            first = not self._control.set_reset_pending(group_id, True)
        except Exception:  # a duplicate reset is harmless, a missing one is not
            log.exception("%s: cannot set reset-pending in the coordinator; requesting a reset anyway", self.name)
            first = True
        if first:
            log.info("%s: requesting a region reset (force): %s", self.name, reason)
            self._region.request_reset(force=True, reason=f"{self.name}: {reason}")
        else:
            log.info("%s: a reset is already pending in group %s (%s)", self.name, group_id, reason)

    def drain_at_trigger(self) -> None:
        """Step 2."""
        before = self._drains.count()
        reason = f"{self.name}: {self._config.trigger_count} tuples since the last drain"
        if self._driver is not None:
            self._driver.request_drain(reason)
        elif self._region.request_drain(reason=reason) is False:
            return  # no drain follows (the region resets or waits): do not wait the drain timeout for it
        timeout = self._config.drain_timeout_s
        if not self._drains.wait_after(before, timeout, lambda: self._sm.state in (S.CLOSED, S.FAILED)):
            log.warning("%s: requested drain did not happen within %.0fs", self.name, timeout)


__all__ = ["RegionRequester"]
