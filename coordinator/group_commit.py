"""Group commit of the coordinator server: no reply leaves before its write is on disk.

`GroupCommit` is the server's outbox. Everything the loop thread sends (a reply,
an error reply, a push) is queued here first, and the queue goes out only after
the store has synced everything appended while it was filled. It is used by
the loop thread only (`coordinator.server`); services reach it through
``server.reply`` / ``reply_many`` / ``reply_error`` / ``push`` /
``mark_dirty`` (`coordinator.service_api`).

Protocol, once per loop iteration:

1. The dispatcher (`coordinator.dispatch`), timers and services queue frames
   (`reply`, `reply_many`, `reply_error`, `reject`, `push`): nothing is sent.
2. A handler that appended a record to the store calls `mark_dirty()`. The
   append itself does no I/O.
3. `commit_and_send(sock)`: if dirty, ``store.sync()`` runs ONCE for the whole
   batch, one write and one fsync however many requests wrote (the group
   commit).
4. Only then is every queued frame sent, so a client never sees an
   acknowledgement for a write that a crash could still lose.
5. If the sync fails (`durable_log.LogFailed`: disk full, I/O error), every
   queued frame is replaced by an ``INTERNAL`` error ("the write could not be
   synced") with the same request id, and the exception is re-raised: the
   server stops (fail-stop). A restart replays the log, which holds exactly
   what reached the disk, so a client that got the error may retry.
6. At shutdown `final_flush(sock, sync=...)` syncs what is left (unless the
   server is stopping because of a failure) and sends the rest.

Sending never blocks: a frame for a client whose queue is full is dropped and
logged; the client's request times out and it retries.
"""

from __future__ import annotations

import logging
from typing import Any

import zmq

from coordinator import protocol
from coordinator.errors import CoordinatorError, ErrorCode
from coordinator.service_api import Request

log = logging.getLogger(__name__)


class GroupCommit:
    """The queued frames of one loop iteration and the dirty flag (loop thread only)."""

    def __init__(self, store: Any, metrics: Any | None) -> None:
        self.store = store
        self.metrics = metrics
        self._outbox: list[tuple[bytes, bytes]] = []
        self._dirty = False

    # ---- step 1-2: queue -------------------------------------------------------------
    def mark_dirty(self) -> None:
        self._dirty = True

    def reply(self, req: Request, body: dict[str, Any]) -> None:
        self._outbox.append((req.identity, protocol.encode(protocol.reply_type(req.type), body, req.id)))

    def reply_many(self, reqs: list[Request], body: dict[str, Any]) -> None:
        """The same body to several requests (of one type), encoded once (merge completion)."""
        if not reqs:
            return
        body_json = protocol.encode_body(body)
        for req in reqs:
            self._outbox.append((req.identity, protocol.encode_prepared(protocol.reply_type(req.type), body_json, req.id)))

    def reply_error(self, req: Request, err: CoordinatorError) -> None:
        self.reject(req.identity, req.id, err)

    def reject(self, identity: bytes, request_id: Any, err: CoordinatorError) -> None:
        """An error reply to a frame that may not even have a request id (None)."""
        if self.metrics is not None:
            self.metrics.errors.labels(err.code.value).inc()
        self._outbox.append((identity, protocol.encode_error(err.code, err.message, request_id)))

    def push(self, identity: bytes, msg_type: str, body: dict[str, Any]) -> None:
        self._outbox.append((identity, protocol.encode(msg_type, body, None)))

    # ---- step 3-6: commit, then send ---------------------------------------------------
    def commit_and_send(self, sock: zmq.Socket) -> None:
        if self._dirty:
            try:
                self.store.sync()
            except BaseException:
                log.exception("store sync failed: no write of this batch is acknowledged; stopping")
                self._fail_outbox()
                raise
            self._dirty = False
        self._send(sock)

    def final_flush(self, sock: zmq.Socket, *, sync: bool) -> None:
        """Shutdown: sync what is left when `sync` (no failure so far), then send."""
        if self._dirty and sync:
            self.store.sync()
            self._dirty = False
        self._send(sock)

    def _fail_outbox(self) -> None:
        failed = []
        for identity, frame in self._outbox:
            try:
                rid = protocol.decode(frame).id
            except protocol.BadEnvelope:
                rid = None
            failed.append((identity, protocol.encode_error(ErrorCode.INTERNAL, "the write could not be synced", rid)))
        self._outbox = failed

    def _send(self, sock: zmq.Socket) -> None:
        outbox, self._outbox = self._outbox, []
        for identity, frame in outbox:
            try:
                sock.send_multipart([identity, frame], zmq.NOBLOCK)
            except zmq.Again:
                log.warning("reply to %s dropped: the client's queue is full", identity.hex())
