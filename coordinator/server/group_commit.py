"""Group commit of the coordinator server: no reply leaves before its write is on disk.

`GroupCommit` is the server's outbox. Everything the loop thread sends (a reply,
an error reply, a push) is queued here first, and the queue goes out only after
the store has synced everything appended while it was filled. It is used by
the loop thread only (`coordinator.server.loop`); services reach it through
``server.reply`` / ``reply_many`` / ``reply_error`` / ``push`` /
``mark_dirty`` (`coordinator.server.api`).

Protocol, once per loop iteration:

1. The dispatcher (`coordinator.server.dispatch`), timers and services queue frames
   (`reply`, `reply_many`, `reply_error`, `reject`, `push`): nothing is sent.
2. A handler that appended a record to the store calls `mark_dirty()`. The
   append itself does no I/O.
3. `commit_and_send(sock)`: if dirty, ``store.sync()`` runs ONCE for the whole
   batch, one write and one fsync however many requests wrote (the group
   commit); else ``store.keepalive()`` (the Kafka log's lease record when due, so
   a deposed leader learns it is fenced before it sends anything more).
4. Only then is every queued frame sent, so a client never sees an
   acknowledgement for a write that a crash could still lose.
5. If the sync (or keepalive) fails (`coordinator.store.log.segment.LogFailed`: disk full, I/O
   error; the Kafka log: fenced by a newer leader, or the cluster did not answer), every queued
   frame is replaced by an ``UNAVAILABLE`` error with the same request id, and the exception is
   re-raised: the server stops (fail-stop). A client re-sends the request as after
   ``LOAD_IN_PROGRESS``, to its next endpoint first: the new leader, or this coordinator
   restarted, which replays exactly what reached the log.
6. At shutdown `final_flush(sock, sync=...)` syncs what is left (unless the
   server is stopping because of a failure) and sends the rest.

Every frame carries ``epoch`` (the envelope's): the loop sets it from the leader its
log knows before each batch (``CoordinatorServer``), so it never changes inside one.

Sending never blocks: a frame for a client whose queue is full is dropped and
logged; the client's request times out and it retries.

Encoding never stops the loop: a reply or push body that cannot be encoded
(a value JSON cannot hold, a string UTF-8 cannot hold) is logged with its
traceback and replaced by an ``INTERNAL`` error reply to the same request (a
push is dropped). Requests are validated so that this does not happen; this is
the last line of defence.
"""

from __future__ import annotations

import logging
from typing import Any

import zmq

from coordinator.protocol.wire import envelope
from coordinator.protocol.wire.errors import CoordinatorError, ErrorCode, NotLeader
from coordinator.server.api import Request, ServerStore
from coordinator.server.metrics import CoordinatorMetrics

log = logging.getLogger(__name__)


class GroupCommit:
    """The queued frames of one loop iteration and the dirty flag (loop thread only)."""

    def __init__(self, store: ServerStore, metrics: CoordinatorMetrics | None) -> None:
        self.store = store
        self.metrics = metrics
        self._outbox: list[tuple[bytes, bytes]] = []
        self._dirty = False
        #: The envelope ``epoch`` of every frame queued from now on (loop thread).
        self.epoch = 0

    # ---- step 1-2: queue -------------------------------------------------------------
    def mark_dirty(self) -> None:
        self._dirty = True

    def reply(self, req: Request, body: dict[str, Any]) -> None:
        try:
            frame = envelope.encode(envelope.reply_type(req.type), body, req.id, self.epoch)
        except (ValueError, TypeError, RecursionError):  # UnicodeEncodeError is a ValueError
            log.exception("the reply to %s request %r cannot be encoded", req.type, req.id)
            self._unencodable(req.identity, req.id)
            return
        self._outbox.append((req.identity, frame))

    def reply_many(self, reqs: list[Request], body: dict[str, Any]) -> None:
        """The same body to several requests (of one type), encoded once (merge completion)."""
        if not reqs:
            return
        try:
            body_json = envelope.encode_body(body)
            frames = [
                envelope.encode_prepared(envelope.reply_type(req.type), body_json, req.id, self.epoch) for req in reqs
            ]
        except (ValueError, TypeError, RecursionError):
            log.exception("a reply to %d %s requests cannot be encoded", len(reqs), reqs[0].type)
            for req in reqs:
                self._unencodable(req.identity, req.id)
            return
        self._outbox.extend(zip([req.identity for req in reqs], frames, strict=True))

    def reply_error(self, req: Request, err: CoordinatorError) -> None:
        self.reject(req.identity, req.id, err)

    def reject(self, identity: bytes, request_id: envelope.RequestId, err: CoordinatorError) -> None:
        """An error reply to a frame that may not even have a request id (None)."""
        if self.metrics is not None:
            self.metrics.count_error(err.code.value)
        try:
            leader = err.leader if isinstance(err, NotLeader) else None
            frame = envelope.encode_error(err.code, err.message, request_id, self.epoch, leader)
        except (ValueError, TypeError, RecursionError):
            log.exception("the %s error reply to request %r cannot be encoded", err.code.value, request_id)
            self._unencodable(identity, request_id)
            return
        self._outbox.append((identity, frame))

    def push(self, identity: bytes, msg_type: str, body: dict[str, Any]) -> None:
        try:
            frame = envelope.encode(msg_type, body, None, self.epoch)
        except (ValueError, TypeError, RecursionError):
            log.exception("a %s push to %s cannot be encoded; dropped", msg_type, identity.hex())
            return
        self._outbox.append((identity, frame))

    def _unencodable(self, identity: bytes, request_id: envelope.RequestId) -> None:
        """INTERNAL for a reply that could not be encoded; the id too if it is the problem."""
        message = "the reply could not be encoded (logged by the coordinator)"
        try:
            frame = envelope.encode_error(ErrorCode.INTERNAL, message, request_id, self.epoch)
        except (ValueError, TypeError, RecursionError):
            frame = envelope.encode_error(ErrorCode.INTERNAL, message, None, self.epoch)
        self._outbox.append((identity, frame))

    # ---- step 3-6: commit, then send ---------------------------------------------------
    def commit_and_send(self, sock: zmq.Socket[bytes]) -> None:
        try:
            if self._dirty:
                self.store.sync()
            else:
                self.store.keepalive()
        except BaseException:
            log.exception("writing the store's log failed: no write of this batch is acknowledged; stopping")
            self._fail_outbox()
            raise
        self._dirty = False
        self._send(sock)

    def final_flush(self, sock: zmq.Socket[bytes], *, sync: bool) -> None:
        """Shutdown: sync what is left when `sync` (no failure so far), then send."""
        if self._dirty and sync:
            self.store.sync()
            self._dirty = False
        self._send(sock)

    def _fail_outbox(self) -> None:
        failed = []
        for identity, frame in self._outbox:
            try:
                rid = envelope.decode(frame, envelope.MAX_REPLY_DEPTH, from_server=True).id
            except envelope.BadEnvelope:
                rid = None
            error = envelope.encode_error(
                ErrorCode.UNAVAILABLE, "this coordinator stops: its log refused the write; re-send", rid, self.epoch
            )
            failed.append((identity, error))
        self._outbox = failed

    def _send(self, sock: zmq.Socket[bytes]) -> None:
        outbox, self._outbox = self._outbox, []
        for identity, frame in outbox:
            try:
                sock.send_multipart([identity, frame], zmq.NOBLOCK)
            except zmq.Again:
                log.warning("reply to %s dropped: the client's queue is full", identity.hex())
