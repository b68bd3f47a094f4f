"""Built-in messages every coordinator answers, whatever services it runs.

* ``ping`` -> ``ping_reply {time, version}``: liveness; launchers and clients
  use it to wait for a coordinator (it gets LOAD_IN_PROGRESS while loading).
* ``status`` -> ``status_reply``: endpoint, load state, uptime, store stats, the
  resource limits and whatever each service's ``status()`` adds (groups,
  merges, limit rejections, regions with their recent checkpoints and resets).
  HTTP ``/status`` serves the same snapshot and ``/`` renders it as a page.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import attrs

from coordinator.server.api import Request
from coordinator.wire import protocol

if TYPE_CHECKING:
    from coordinator.server.loop import CoordinatorServer


class BuiltinService:
    def attach(self, server: CoordinatorServer) -> None:
        self.server = server
        server.add_handler(protocol.Ping.TYPE, protocol.Ping, self._on_ping)
        server.add_handler(protocol.Status.TYPE, protocol.Status, self._on_status)

    def _on_ping(self, req: Request, msg: protocol.Ping) -> dict[str, Any]:
        return {"time": time.time(), "version": protocol.PROTOCOL_VERSION}

    def _on_status(self, req: Request, msg: protocol.Status) -> dict[str, Any]:
        return status_snapshot(self.server)


def status_snapshot(server: CoordinatorServer) -> dict[str, Any]:
    """Everything /status and the ``status`` message report (loop thread only)."""
    loaded = server.loaded.is_set()
    out: dict[str, Any] = {
        "endpoint": server.endpoint,
        "loaded": loaded,
        "uptime_s": round(time.time() - server.started_at, 3),
        "store": server.store.stats() if loaded else {},
        "load": _jsonable(server.load_report),
        "limits": attrs.asdict(server.limits),
    }
    for svc in server._services:
        status = getattr(svc, "status", None)
        if status is not None and loaded:
            out.update(status())
    return out


def _jsonable(obj: Any) -> Any:
    if obj is None or isinstance(obj, str | int | float | bool):
        return obj
    if attrs.has(type(obj)):
        return attrs.asdict(obj)
    if hasattr(obj, "_asdict"):
        return obj._asdict()
    if hasattr(obj, "__dict__"):
        return {k: v for k, v in vars(obj).items() if not k.startswith("_")}
    return str(obj)
