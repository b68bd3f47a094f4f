"""A bounded number of connections on the coordinator's ROUTER socket.

Why: every TCP connection costs the process a file descriptor, and it counts
from the moment libzmq accepts it, before any handshake (CURVE does not help).
When the process runs out of descriptors, libzmq's listener fails ``accept``
with EMFILE and retries at once (100% CPU), new clients are never accepted and
the HTTP endpoint cannot accept either. So connections are capped below the
descriptor limit, and idle or dead ones are closed.

How, in order:

1. At start-up, :func:`raise_nofile_limit` raises RLIMIT_NOFILE's soft limit to
   the hard limit.
2. :func:`configure_socket` (before bind) sets: ``ZMQ_HANDSHAKE_IVL`` (a
   connection that has not finished its ZMTP/CURVE handshake in time is
   closed), ZMTP heartbeats (a peer that answers no PING for
   ``heartbeat_timeout_s`` is closed), TCP keepalive (the kernel finds
   half-open connections) and the listen backlog.
3. :class:`ConnectionLimiter` watches the socket with a ZeroMQ socket monitor
   (``ACCEPTED``, ``DISCONNECTED``, ``ACCEPT_FAILED``), read on the loop thread,
   and keeps the set of open connections (their descriptors).
4. A connection accepted while ``limit`` connections are open is shut down at
   once (``shutdown(2)`` on its descriptor: libzmq reads EOF and closes it
   itself). The client sees a closed connection and reconnects later; clients
   already connected are not affected. Each refusal is counted
   (``crkafka_coordinator_connections_refused_total``); a WARNING is logged at most every
   ``WARN_EVERY_S``.
5. The limit in force is ``min(--max-connections, soft RLIMIT_NOFILE -
   FD_RESERVE)``, so the cap is reached before the descriptors run out and the
   store, the HTTP endpoint and libzmq keep the descriptors they need.

A shut-down descriptor is checked first to be a socket whose local address is
this listener's (not a descriptor libzmq closed and the process reused for
something else); the monitor's events are applied in order before any shutdown.
"""

from __future__ import annotations

import logging
import os
import resource
import socket
import time
from typing import Protocol

import attrs
import zmq
from zmq.utils.monitor import recv_monitor_message

log = logging.getLogger(__name__)

#: Default cap on open connections (members, Spark executors, status clients).
DEFAULT_MAX_CONNECTIONS = 1024
#: Descriptors kept for everything that is not a client connection (log
#: segments, lock, compaction file, HTTP listener and its connections, libzmq's
#: own eventfds and epoll, Python): the cap stays this far below RLIMIT_NOFILE.
FD_RESERVE = 128
#: A connection that has not completed its handshake after this long is
#: closed: an idle or never-handshaking connection cannot hold a slot for long.
DEFAULT_HANDSHAKE_TIMEOUT_S = 10.0
#: ZMTP PING interval, and how long a peer may stay silent before it is
#: closed: finds dead peers (a host that vanished) without waiting for TCP.
HEARTBEAT_IVL_S = 10.0
HEARTBEAT_TIMEOUT_S = 30.0
#: TCP keepalive: idle time before the first probe, probe interval, probes. The
#: kernel's own check for a peer that vanished: its half-open connection would
#: otherwise hold a connection slot until a write fails.
KEEPALIVE_IDLE_S = 60
KEEPALIVE_INTVL_S = 10
KEEPALIVE_CNT = 3
#: Pending (not yet accepted) TCP connections the kernel queues: a burst of
#: reconnecting members waits to be accepted instead of retrying SYNs for seconds.
LISTEN_BACKLOG = 128
#: At most one WARNING per this many seconds about refused connections or
#: failed accepts (a flood must not flood the log).
WARN_EVERY_S = 10.0
#: Monitor events read per call, so a flood of connects cannot hold the loop.
MAX_EVENTS_PER_CALL = 4096

_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_ACCEPT_FAILED


class ConnectionMetrics(Protocol):
    """What the limiter updates (coordinator.server.metrics.CoordinatorMetrics)."""

    def set_connections(self, open_now: int, limit: int) -> None: ...

    def connection_refused(self) -> None: ...


@attrs.frozen
class ConnectionLimits:
    """The connection settings of one server (``--max-connections``, ``--handshake-timeout``)."""

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    handshake_timeout_s: float = DEFAULT_HANDSHAKE_TIMEOUT_S

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.max_connections, int) or not 1 <= self.max_connections <= 1_000_000:
            raise ValueError(f"max_connections must be an integer in 1..1000000, got {self.max_connections!r}")
        if not 0.1 <= self.handshake_timeout_s <= 3600:
            raise ValueError(f"handshake timeout must be in 0.1..3600 s, got {self.handshake_timeout_s!r}")

    def effective_limit(self) -> int:
        """The cap in force: below the soft descriptor limit by FD_RESERVE (at least 1)."""
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return self.max_connections
        return max(1, min(self.max_connections, soft - FD_RESERVE))


def raise_nofile_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit; returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the file descriptor limit from %s to %s: %s", soft, hard, exc)
    return soft


def configure_socket(sock: zmq.Socket[bytes], limits: ConnectionLimits) -> None:
    """Step 2: handshake timeout, heartbeats, TCP keepalive, backlog (before bind)."""
    sock.setsockopt(zmq.HANDSHAKE_IVL, int(limits.handshake_timeout_s * 1000))
    sock.setsockopt(zmq.HEARTBEAT_IVL, int(HEARTBEAT_IVL_S * 1000))
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, int(HEARTBEAT_TIMEOUT_S * 1000))
    sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
    sock.setsockopt(zmq.TCP_KEEPALIVE_IDLE, KEEPALIVE_IDLE_S)
    sock.setsockopt(zmq.TCP_KEEPALIVE_INTVL, KEEPALIVE_INTVL_S)
    sock.setsockopt(zmq.TCP_KEEPALIVE_CNT, KEEPALIVE_CNT)
    sock.setsockopt(zmq.BACKLOG, LISTEN_BACKLOG)


class ConnectionLimiter:
    """Steps 3-4 for one ROUTER socket. Loop thread only; ``close()`` at shutdown."""

    def __init__(self, sock: zmq.Socket[bytes], limits: ConnectionLimits, metrics: ConnectionMetrics | None) -> None:
        self.limit = limits.effective_limit()
        if self.limit < limits.max_connections:
            log.warning(
                "connection limit %d lowered to %d: the file descriptor limit is %d (reserve %d)",
                limits.max_connections,
                self.limit,
                resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                FD_RESERVE,
            )
        self._sock = sock
        self._limits = limits
        self._metrics = metrics
        self.monitor: zmq.Socket[bytes] = sock.get_monitor_socket(_EVENTS)
        self.open: set[int] = set()
        self.refused = 0
        self._local: tuple[int, str | int] | None = None  # (family, port or ipc path) of the listener
        self._last_warning = 0.0
        self._publish()

    def bound(self, endpoint: str) -> None:
        """The socket is bound to ``endpoint`` (tcp://HOST:PORT or ipc://PATH)."""
        scheme, _, rest = endpoint.partition("://")
        if scheme == "tcp":
            self._local = (socket.AF_INET, int(rest.rpartition(":")[2]))
        elif scheme == "ipc":
            self._local = (socket.AF_UNIX, rest)
        log.info(
            "%s: at most %d connections, handshake timeout %gs", endpoint, self.limit, self._limits.handshake_timeout_s
        )

    def on_events(self) -> None:
        """Read the queued monitor events, then shut down connections over the limit."""
        newest: dict[int, None] = {}  # accepted in this call, in order (a reused descriptor: its last accept)
        for _ in range(MAX_EVENTS_PER_CALL):
            try:
                event = recv_monitor_message(self.monitor, zmq.NOBLOCK)
            except zmq.Again:
                break
            kind, value = event["event"], event["value"]
            if kind == zmq.EVENT_ACCEPTED:
                newest.pop(value, None)
                newest[value] = None
                self.open.add(value)
            elif kind == zmq.EVENT_DISCONNECTED:
                newest.pop(value, None)
                self.open.discard(value)
            elif kind == zmq.EVENT_ACCEPT_FAILED:
                self._warn(f"accept failed ({os.strerror(value)}): the process is out of descriptors or memory")
        over = len(self.open) - self.limit
        refused = 0
        for fd in reversed(newest):  # the newest connections are the ones over the limit
            if over <= 0:
                break
            self.open.discard(fd)
            over -= 1
            if self._shutdown(fd):
                refused += 1
                if self._metrics is not None:
                    self._metrics.connection_refused()
        if refused:
            self.refused += refused
            self._warn(f"connection limit {self.limit} reached: {self.refused} connection(s) refused so far")
        self._publish()

    def close(self) -> None:
        try:
            self._sock.disable_monitor()
        except zmq.ZMQError as exc:
            log.debug("disable_monitor: %s", exc)
        self.monitor.close(0)

    def _shutdown(self, fd: int) -> bool:
        """Shut down ``fd`` if it is still a connection of this listener; libzmq then closes it."""
        try:
            conn = socket.socket(fileno=fd)
        except OSError:
            return False  # already closed
        try:
            if not self._is_ours(conn):
                return False
            conn.shutdown(socket.SHUT_RDWR)
            return True
        except OSError:
            return False
        finally:
            conn.detach()  # the descriptor stays libzmq's

    def _is_ours(self, conn: socket.socket) -> bool:
        if self._local is None:
            return False
        family, where = self._local
        if family == socket.AF_UNIX:
            return conn.family == socket.AF_UNIX and conn.getsockname() == where
        return conn.family in (socket.AF_INET, socket.AF_INET6) and conn.getsockname()[1] == where

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last_warning >= WARN_EVERY_S:
            self._last_warning = now
            log.warning("%s (%d open)", message, len(self.open))

    def _publish(self) -> None:
        if self._metrics is not None:
            self._metrics.set_connections(len(self.open), self.limit)
