"""Built-in messages every coordinator answers, whatever services it runs.

* ``ping`` -> ``ping_reply {time, version}``: liveness; launchers and clients
  use it to wait for a coordinator (it gets LOAD_IN_PROGRESS while loading).
* ``status`` -> ``status_reply`` (``CoordinatorStatus``,
  ``coordinator/protocol/wire/status.py``): endpoint, load state, uptime, store
  stats, the resource limits and each service's part (``Service.add_status``:
  groups, limit rejections, merges, regions with their recent checkpoints and resets).
  HTTP ``/status`` serves the same snapshot and ``/`` renders it as a page.
"""

from __future__ import annotations

import time

from coordinator.protocol.wire import envelope, protocol
from coordinator.protocol.wire.status import CoordinatorStatus
from coordinator.server.api import Request, ServerApi, Service


class BuiltinService(Service):
    """``ping`` and ``status`` (the server's `ServerApi.status_snapshot`)."""

    def attach(self, server: ServerApi) -> None:
        self._server = server
        server.add_handler(protocol.Ping.TYPE, protocol.Ping, self._on_ping)
        server.add_handler(protocol.Status.TYPE, protocol.Status, self._on_status)

    def _on_ping(self, req: Request, msg: protocol.Ping) -> protocol.PingReply:
        return protocol.PingReply(time.time(), envelope.PROTOCOL_VERSION)

    def _on_status(self, req: Request, msg: protocol.Status) -> CoordinatorStatus:
        return self.server.status_snapshot()
