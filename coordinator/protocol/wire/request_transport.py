"""How a client's request reaches the coordinator and its reply comes back: sockets, tries,
re-sends, endpoint failover and the epoch fence (docs/protocol.md, "Client behaviour").

Protocol:

1. Each calling thread gets its own DEALER socket (thread-local), so a merge
   blocking in one thread never blocks another thread's request. Replies are
   matched by request id; a reply with another id (a stale answer to an
   earlier, abandoned request) is dropped. The sockets of threads that have
   ended are closed when another thread opens its socket.
2. A request is sent and its reply awaited for at most ``try_timeout``
   seconds. No reply -> the connection is presumed lost: the socket is closed
   and recreated (a fresh connection and identity) and the SAME request (same
   id) is re-sent, with exponential backoff and jitter (tenacity).
3. A ``LOAD_IN_PROGRESS`` reply is retried the same way (the coordinator is
   replaying its log after a restart), and so is ``UNAVAILABLE`` (the coordinator
   stops: its log refused the write, e.g. a deposed leader fenced by the new one).
4. Given several endpoints (a leader on Kafka and its standbys,
   ``coordinator/protocol/common/endpoints.py``), a try without a reply or
   answered ``LOAD_IN_PROGRESS`` or ``UNAVAILABLE`` moves the calling thread to the next endpoint
   (a fresh socket) before the request is re-sent.
5. A ``NOT_LEADER`` reply (a standby) names the leader's endpoint: checked like a
   configured one, it becomes the calling thread's endpoint at once (added to the
   list when it is not there, bounded: ``EndpointRing.redirect``) and the same
   request (same id) is re-sent there after ``BACKOFF_INITIAL_S``. A reply naming
   no usable endpoint counts as ``LOAD_IN_PROGRESS``.
6. Every frame carries its leader's epoch; one with a lower epoch than the highest
   this client has seen (a deposed leader's, a lagging standby's redirect) is
   dropped, logged and counted (``EndpointRing.fence``: ``client.fence.dropped``), as if
   it had not arrived.
7. When the caller's deadline passes without a usable reply,
   :class:`~coordinator.protocol.wire.errors.CoordinatorUnavailable` is raised, naming the
   endpoint and what was tried. Any other error reply raises the
   :class:`~coordinator.protocol.wire.errors.CoordinatorError` subclass of its code (``.code``).

Re-sending is safe only for requests that are idempotent under re-sending; the
client's operations are (``coordinator/client.py`` says why for each).

Thread safety: every method may be called from any thread concurrently.
``close()`` must be called once, after the other threads stopped using the
transport (ZeroMQ sockets may not be closed while another thread polls them).
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import tenacity
import zmq

from coordinator.protocol.common.endpoints import EndpointRing, EpochFence
from coordinator.protocol.wire import envelope
from coordinator.protocol.wire.errors import CoordinatorUnavailable, LoadInProgress, NotLeader, error_for_code

log = logging.getLogger(__name__)

#: Backoff between tries (LOAD_IN_PROGRESS or no reply): exponential with jitter,
#: so clients retrying against a restarting coordinator do not hammer it in step.
BACKOFF_INITIAL_S = 0.02
BACKOFF_MAX_S = 1.0
BACKOFF_JITTER_S = 0.05

#: A request body, or a function of the seconds left that builds it (a merge re-sends
#: the wait it has left).
Body = Mapping[str, Any] | Callable[[float], Mapping[str, Any]]


class NoReply(Exception):
    """No reply within one try's wait (step 2): the connection is presumed lost."""


class _ThreadSocket(threading.local):
    """The calling thread's socket (None until its first request, or after a lost connection)."""

    sock: zmq.Socket[bytes] | None = None
    #: The endpoint ``sock`` is connected to.
    endpoint: str = ""


class RequestTransport:
    """The sockets of one client and the tries of its requests (see the module docstring)."""

    def __init__(
        self,
        ring: EndpointRing,
        endpoint: str,
        *,
        try_timeout: float,
        curve_server_key: bytes | None,
        curve_keypair: tuple[bytes, bytes] | None,
        context: zmq.Context[zmq.Socket[bytes]],
    ) -> None:
        self._ring = ring
        #: The endpoint list as the caller gave it, for messages.
        self.endpoint = endpoint
        self._try_timeout = try_timeout
        self._curve_server_key = curve_server_key
        self._curve_keypair = curve_keypair
        self._ctx = context
        self._local = _ThreadSocket()
        self._lock = threading.Lock()
        self._sockets: dict[zmq.Socket[bytes], threading.Thread] = {}  # socket -> owning thread
        self._closed = False
        self._prefix = f"{os.getpid():x}-{uuid.uuid4().hex[:8]}"
        self._ids = itertools.count(1)

    @property
    def fence(self) -> EpochFence:
        """The leader epochs seen (step 6)."""
        return self._ring.fence

    @property
    def first_endpoint(self) -> str:
        """The first configured endpoint."""
        return self._ring.configured[0]

    # ------------------------------------------------------------------ sockets
    def _socket(self) -> zmq.Socket[bytes]:
        sock = self._local.sock
        if sock is not None:
            return sock
        if self._closed:
            raise RuntimeError("CoordinatorClient is closed")
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IMMEDIATE, 1)
        if self._curve_keypair is not None:
            sock.curve_publickey, sock.curve_secretkey = self._curve_keypair
            sock.curve_serverkey = self._curve_server_key
        endpoint = self._ring.current
        sock.connect(endpoint)
        with self._lock:
            # Sockets of threads that have ended are closed here, so a client used
            # from many short-lived threads does not accumulate file descriptors.
            dead = [s for s, t in self._sockets.items() if not t.is_alive()]
            for s in dead:
                del self._sockets[s]
            self._sockets[sock] = threading.current_thread()
        for s in dead:
            s.close(0)
        self._local.sock = sock
        self._local.endpoint = endpoint
        return sock

    def _drop_socket(self) -> None:
        sock = self._local.sock
        self._local.sock = None
        if sock is not None:
            with self._lock:
                self._sockets.pop(sock, None)
            sock.close(0)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            socks, self._sockets = list(self._sockets), {}
        for s in socks:
            s.close(0)

    # ------------------------------------------------------------------ requests

    def _request_id(self) -> str:
        return f"{self._prefix}-{next(self._ids)}"

    def request(self, msg_type: str, body: Body, total: float) -> dict[str, Any]:
        """Send one request and return the reply body, retried for at most ``total``
        seconds (steps 2-7)."""
        deadline = time.monotonic() + total
        rid = self._request_id()
        tries = 0

        def remaining() -> float:
            return deadline - time.monotonic()

        backoff = tenacity.wait_exponential_jitter(
            multiplier=BACKOFF_INITIAL_S, max=BACKOFF_MAX_S, jitter=BACKOFF_JITTER_S
        )

        def wait(state: tenacity.RetryCallState) -> float:
            failed = state.outcome.exception() if state.outcome is not None else None
            return BACKOFF_INITIAL_S if isinstance(failed, NotLeader) else float(backoff(state))

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type((NoReply, LoadInProgress, NotLeader)),
            wait=wait,
            stop=tenacity.stop_before_delay(total),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    tries += 1
                    left = remaining()
                    if left <= 0:
                        raise NoReply()
                    payload = body(left) if callable(body) else body
                    frame = envelope.encode(msg_type, payload, rid)
                    try:
                        return self._try(frame, rid, min(self._try_timeout, left))
                    except NotLeader as redirect:
                        if redirect.leader is not None:  # always (error_for_code), but typed optional
                            self._redirect(redirect.leader)
                        raise
                    except (NoReply, LoadInProgress):
                        self._move_on()
                        raise
        except NoReply:
            raise CoordinatorUnavailable(
                f"no reply from the coordinator at {self.endpoint} to {msg_type!r} within {total:.1f}s "
                f"({tries} tries): is cr-coordinator running there, and if it uses CURVE, is this "
                f"client's public key in its allow-list?",
                endpoint=self.endpoint,
            ) from None
        except (LoadInProgress, NotLeader):
            raise CoordinatorUnavailable(
                f"the coordinator at {self.endpoint} was still loading its state after {total:.1f}s "
                f"({tries} tries); retry later or raise the client timeout",
                endpoint=self.endpoint,
                loading=True,
            ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def try_once(self, msg_type: str, body: Mapping[str, Any], wait_s: float) -> dict[str, Any]:
        """One try of one request, no retry and no redirect followed: the reply body, or
        NoReply, or the error reply's CoordinatorError (NotLeader and LoadInProgress too)."""
        rid = self._request_id()
        return self._try(envelope.encode(msg_type, body, rid), rid, wait_s)

    def _move_on(self) -> None:
        """Step 4: the calling thread's endpoint did not serve; with several, the next one."""
        if self._ring.several:
            self._ring.move_from(self._local.endpoint)
            self._drop_socket()

    def _redirect(self, leader: str) -> None:
        """Step 5: talk to ``leader`` from now on (a fresh socket unless connected to it)."""
        if self._local.endpoint != leader or self._local.sock is None:
            log.info("the coordinator at %s is a standby; the leader is %s", self._local.endpoint, leader)
        self._ring.redirect(leader)
        if self._local.endpoint != leader:
            self._drop_socket()

    def _try(self, frame: bytes, rid: str, wait_s: float) -> dict[str, Any]:
        sock = self._socket()
        # IMMEDIATE: send blocks (up to the try's wait) until a connection is up,
        # so a down coordinator or a refused CURVE handshake ends in NoReply.
        sock.setsockopt(zmq.SNDTIMEO, max(1, int(wait_s * 1000)))
        end = time.monotonic() + wait_s
        try:
            sock.send(frame)
        except zmq.Again:
            self._drop_socket()
            raise NoReply() from None
        while True:
            left = end - time.monotonic()
            if left <= 0 or not sock.poll(int(left * 1000) + 1, zmq.POLLIN):
                if time.monotonic() < end:
                    continue
                self._drop_socket()
                raise NoReply()
            raw = sock.recv()
            try:
                env = envelope.decode(raw, envelope.MAX_REPLY_DEPTH, from_server=True)
            except envelope.BadEnvelope as bad:
                log.warning("dropped an undecodable frame from the coordinator: %s", bad)
                continue
            if not self._ring.fence.admit(env.epoch or 0, f"a {env.type!r} from {self._local.endpoint}"):
                continue  # step 6
            if env.type == envelope.ERROR_TYPE:
                # id null: the server could not read our id (e.g. TOO_LARGE); one
                # request is outstanding per socket, so it is ours.
                if env.id not in (rid, None):
                    continue
                raise error_for_code(str(env.body.get("code")), str(env.body.get("message")), env.body)
            if env.id != rid:
                # a stale reply, or a push (id null): pushes go to the member's control
                # channel (cr_consumer/runtime/member/control.py), never to this client
                log.debug("dropped a stale reply or a push (id %r, waiting for %r)", env.id, rid)
                continue
            return env.body


__all__ = ["BACKOFF_INITIAL_S", "BACKOFF_JITTER_S", "BACKOFF_MAX_S", "Body", "NoReply", "RequestTransport"]
