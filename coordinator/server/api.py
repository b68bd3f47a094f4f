"""The coordinator server's extension API: how services plug into the loop.

The registry, control-variable, merge and region-controller services all use it.

Extension API (how services plug in; the registry, control variables and merge
services use it, and so can the region controller):

* ``server.add_service(svc)`` calls ``svc.attach(server)``; the service then
  calls ``server.add_handler(msg_type, message_class, handler)``. The message
  class has ``from_body(body)`` (validating, raising ``Invalid``). The handler
  ``handler(req: Request, msg)`` runs on the loop thread and returns a reply
  body (dict), or :data:`DEFERRED` to answer later with
  ``server.reply(req, body)`` / ``server.reply_error(req, exc)``; or raises a
  :class:`~coordinator.wire.errors.CoordinatorError` for an error reply.
* ``server.reply_many(reqs, body)`` answers several requests with one body
  (encoded once).
* ``server.push(identity, msg_type, body)`` sends an unsolicited message (id
  null) to a client identity (``req.identity`` of an earlier request).
* ``server.schedule(delay_s, callback) -> Timer`` runs ``callback()`` on the
  loop thread after ``delay_s``; ``timer.cancel()`` cancels it.
* ``svc.on_tick(now)`` (optional) runs on every loop iteration, at least every
  ``TICK_S``; ``svc.on_loaded()`` (optional) runs once the store is loaded;
  ``svc.status()`` (optional) returns a dict merged into the ``status`` reply.
* ``server.call_soon_threadsafe(fn)`` / ``server.call_in_loop(fn, timeout)``
  run code on the loop thread from another thread (the HTTP thread uses it).
* ``server.store`` is the state store; call ``server.mark_dirty()`` after
  appending so the batch is synced before replies go out.

Everything a service touches runs on the loop thread, so services need no locks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import attrs

if TYPE_CHECKING:
    from coordinator.server.loop import CoordinatorServer

DEFERRED = object()


@attrs.frozen
class Request:
    """Where a request came from: enough to reply to it later."""

    identity: bytes
    id: str | int | None
    type: str
    received: float


Handler = Callable[[Request, Any], Any]


class Service(Protocol):
    def attach(self, server: CoordinatorServer) -> None: ...


class Timer:
    __slots__ = ("deadline", "callback", "cancelled")

    def __init__(self, deadline: float, callback: Callable[[], None]) -> None:
        self.deadline = deadline
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


@attrs.frozen
class CurveServerConfig:
    """CurveZMQ server keys; the allow-list is enforced by the ZAP authenticator (security.py)."""

    public_key: bytes
    secret_key: bytes


