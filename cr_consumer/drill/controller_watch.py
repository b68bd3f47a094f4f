"""The controller's own view of a drill: its region events, copied to the timeline.

The region controller keeps its recent events (``join``, ``leave``, ``phase``,
``checkpoint``, ``reset``, ``resume``, ``failed``), stamped with the
coordinator's wall clock, and returns them in the ``region_status`` reply.
:class:`ControllerWatch` asks for them every time the drill's watch loop calls
``poll()`` and appends the new ones to the drill's timeline as
``ctl_<kind>`` events of member ``controller``. The report uses them for the
recovery times (the controller's RESET and RESUME are exact; the members'
probe events are the fallback).

Failure behaviour: while the coordinator is down (the kill-coordinator drill)
or has not yet seen the region again after a restart, the request fails; that
is expected, counted in ``misses`` and retried at the next ``poll()``. The
events of a killed coordinator that were not fetched yet are lost with it.
"""

from __future__ import annotations

import logging

from coordinator.client import CoordinatorClient
from coordinator.protocol.wire.errors import CoordinatorError, CoordinatorUnavailable
from cr_consumer.drill.timeline import TimelineWriter

log = logging.getLogger(__name__)

#: Bound on one status request, so a dead coordinator delays the watch loop by
#: at most this much per poll.
STATUS_TIMEOUT_S = 0.5


class ControllerWatch:
    def __init__(self, endpoint: str, region: str, timeline: TimelineWriter) -> None:
        self.region = region
        self.timeline = timeline
        self.client = CoordinatorClient(endpoint, timeout=STATUS_TIMEOUT_S, try_timeout=STATUS_TIMEOUT_S)
        self._seen: set[tuple[object, ...]] = set()
        self.misses = 0

    def poll(self) -> int:
        try:
            reply = self.client.request("region_status", {"region": self.region}, timeout=STATUS_TIMEOUT_S)
        except (CoordinatorUnavailable, CoordinatorError) as exc:
            self.misses += 1
            log.debug("controller status unavailable (%s): retrying at the next poll", exc)
            return 0
        new = 0
        for e in reply.get("events", []):
            key = (e.get("t"), e.get("kind"), e.get("attempt"), e.get("seq"), e.get("member"), e.get("phase"))
            if key in self._seen:
                continue
            self._seen.add(key)
            fields = {k: v for k, v in e.items() if k not in ("t", "kind")}
            self.timeline.event(f"ctl_{e.get('kind')}", t=e.get("t"), member="controller", ctl=fields)
            new += 1
        return new

    def close(self) -> None:
        self.client.close()
