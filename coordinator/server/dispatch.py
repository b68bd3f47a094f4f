"""Request dispatch of the coordinator server: one received frame -> one handler call.

The server's loop (`coordinator.server.loop`) reads every ready multipart message
from its ROUTER socket and hands each to `Dispatcher.handle`. The dispatcher
owns the handler table that services fill through ``server.add_handler``
(`coordinator.server.api`); replies go to the group-commit outbox
(`coordinator.server.group_commit`), never straight to the socket.

Checks, in order, for each message ``[identity, frame]`` (the envelope and
messages are in `coordinator.protocol.wire.protocol`):

1. Exactly one frame after the identity, and not empty: else ``MALFORMED``.
2. At most ``max_frame_bytes``: else ``TOO_LARGE``, without parsing it.
   (ZeroMQ itself drops a connection whose frame exceeds
   ``HARD_FRAME_FACTOR`` times that, see `coordinator.server.loop`.)
3. A valid envelope (strict UTF-8, nesting at most
   ``envelope.MAX_REQUEST_DEPTH``, no lone surrogate, a JSON object with
   protocol version, id, type): else ``MALFORMED`` or ``UNSUPPORTED_VERSION``,
   with the request id if a valid one could be read.
4. While the store is loading: ``NOT_LEADER`` naming the leader's endpoint when
   this process is a standby that knows the leader (``leader()``; the client
   re-sends there at once), else ``LOAD_IN_PROGRESS`` (clients retry with
   backoff, or move to their next endpoint).
5. A registered type: else ``UNKNOWN_TYPE``.
6. ``message_class.from_body(body)`` validates the fields (``INVALID`` on bad
   input), then ``handler(req, msg)`` runs. It returns a reply body, or
   `DEFERRED` (the service replies later), or raises a `CoordinatorError`
   (its code becomes the error reply).

Garbage never stops the loop: a rejected frame is logged and answered; an
unexpected exception in a handler is logged with its traceback and answered
with ``INTERNAL``; a reply that cannot be encoded becomes ``INTERNAL`` too
(`coordinator.server.group_commit`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from coordinator.protocol.wire import envelope
from coordinator.protocol.wire.errors import (
    CoordinatorError,
    InternalError,
    LoadInProgress,
    Malformed,
    NotLeader,
    TooLarge,
    UnknownType,
)
from coordinator.protocol.wire.protocol import MessageClass
from coordinator.server.api import DEFERRED, Handler, M, Request, Route, route
from coordinator.server.group_commit import GroupCommit
from coordinator.server.metrics import CoordinatorMetrics

log = logging.getLogger(__name__)


class Dispatcher:
    """Handler table and per-frame checks (loop thread only, except `add` before start)."""

    def __init__(
        self,
        commit: GroupCommit,
        loaded: threading.Event,
        max_frame_bytes: int,
        metrics: CoordinatorMetrics | None,
        redirect: Callable[[], str | None] = lambda: None,
    ) -> None:
        self._commit = commit
        self._loaded = loaded
        #: Step 4: the endpoint of the leader this process follows (None: it knows none).
        self._redirect = redirect
        self.max_frame_bytes = max_frame_bytes
        self.metrics = metrics
        self._handlers: dict[str, Route] = {}

    def add(self, msg_type: str, message_cls: MessageClass[M], handler: Handler[M]) -> None:
        if msg_type in self._handlers:
            raise ValueError(f"a handler for message type {msg_type!r} is already registered")
        self._handlers[msg_type] = route(message_cls, handler)

    def handle(self, parts: list[bytes]) -> None:
        """Steps 1-6 for one received message ``[identity, frame, ...]``."""
        now = time.monotonic()
        identity = parts[0]
        if len(parts) != 2:
            self._reject(identity, None, Malformed(f"a request is exactly one frame, got {len(parts) - 1}"))
            return
        payload = parts[1]
        if not payload:
            self._reject(identity, None, Malformed("empty frame"))
            return
        if len(payload) > self.max_frame_bytes:
            self._reject(
                identity, None, TooLarge(f"frame of {len(payload)} bytes exceeds the limit of {self.max_frame_bytes}")
            )
            return
        try:
            env = envelope.decode(payload)
        except envelope.BadEnvelope as bad:
            self._reject(identity, bad.request_id, bad.error)
            return
        entry = self._handlers.get(env.type)
        self._count_request(env.type if entry is not None else "unknown")
        req = Request(identity=identity, id=env.id, type=env.type, received=now)
        if not self._loaded.is_set():
            leader = self._redirect()
            if leader is not None:
                self._commit.reply_error(
                    req, NotLeader(f"this coordinator is a standby; the leader is {leader}", leader=leader)
                )
            else:
                self._commit.reply_error(req, LoadInProgress("the coordinator is loading its state; retry shortly"))
            return
        if entry is None:
            self._commit.reply_error(req, UnknownType(f"unknown message type {env.type!r}"))
            return
        try:
            result = entry(req, env.body)
        except CoordinatorError as err:
            self._commit.reply_error(req, err)
            return
        except Exception as exc:
            log.exception("handler for %r failed on request %r", env.type, env.id)
            self._commit.reply_error(req, InternalError(f"{type(exc).__name__}: {str(exc)[:500]}"))
            return
        if result is not DEFERRED:
            self._commit.reply(req, result)

    def _reject(self, identity: bytes, request_id: envelope.RequestId, err: CoordinatorError) -> None:
        self._count_request("malformed")
        log.warning("rejected a frame from %s: %s", identity.hex(), err)
        self._commit.reject(identity, request_id, err)

    def _count_request(self, msg_type: str) -> None:
        if self.metrics is not None:
            self.metrics.count_request(msg_type)
