"""The control channel's connection to the coordinator: which endpoint, its socket, following the leader.

The control channel's I/O thread (``control.py``) talks to one coordinator endpoint at a
time through one :class:`CoordinatorLink`: a ZeroMQ DEALER socket with a fixed routing id
(``<member>/<incarnation>``) and a monitor of its connection events, both polled by the
I/O thread's poller. What the link decides (the steps continue ``control.py``'s):

6. Given several endpoints (a coordinator on Kafka with standbys,
   ``coordinator/protocol/common/endpoints.py``): an endpoint silent for
   ``MOVE_ON_S``, or answering only ``LOAD_IN_PROGRESS`` for ``LOST_AFTER_S``, is left
   for the next one (:meth:`CoordinatorLink.move_on`): a fresh socket (same routing id)
   and back to step 1 there. What was in flight on the old socket is lost, as at a
   coordinator restart (held requests are kept, step 3).
7. A ``NOT_LEADER`` answer (a standby) names the leader's endpoint: checked like a
   configured endpoint (``errors.leader_of``; a bad one counts as ``LOAD_IN_PROGRESS``),
   it is added to the list when it is not there (bounded, ``EndpointRing.redirect``) and
   the channel moves there at once (:meth:`CoordinatorLink.follow_redirect`), as in step 6
   (back to step 1 there: the join is re-sent with a new request id, the requests held
   meanwhile after it).
8. Every frame carries its leader's epoch. One with an epoch lower than the highest the
   channel has seen (``EndpointRing.fence``) is dropped before it is read further, logged
   and counted (:meth:`CoordinatorLink.admit`, the channel's ``fence.dropped``): a command
   a deposed leader pushed before it was fenced, or its late answer, never reaches the
   member; a dropped frame does not count as served (step 6).

The link is the I/O thread's only; the :class:`EndpointRing` it moves is the channel's
(its endpoints and epochs are read by any thread).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import zmq

from coordinator.protocol.common.endpoints import EndpointRing

log = logging.getLogger(__name__)

#: Reconnect interval of the DEALER socket while the coordinator is down: bounds
#: how long after a coordinator restart the member notices it.
RECONNECT_IVL_MS = 100
#: No answer at all for this long: presume the coordinator lost us and join again
#: (its restart may have dropped our queued messages).
LOST_AFTER_S = 3.0
#: Given several endpoints, one silent for this long is left for the next (step 6): three
#: heartbeats without any answer. Bounds how long after a leader's death a member waits before
#: it tries the standby; a leader paused for longer costs the member a rejoin. One that answers
#: only LOAD_IN_PROGRESS (a standby taking over, or one that is not the leader) is left after
#: LOST_AFTER_S: longer, so that a member that reached a standby during its takeover does not
#: go back to the dead leader first.
MOVE_ON_S = 1.5


@dataclass
class IoClock:
    """The I/O thread's timestamps (monotonic) and its count of connections."""

    last_heard: float
    #: The last answer or push that was not ``LOAD_IN_PROGRESS`` (step 6).
    last_served: float = 0.0
    join_sent: float = 0.0
    last_hb: float = 0.0
    connects: int = 0


class CoordinatorLink:
    """The I/O thread's socket to the ring's current endpoint and its monitor (see the module
    docstring). Connects at once; ``on_reconnect`` runs whenever it moves to another endpoint
    (the channel is not joined there yet)."""

    def __init__(
        self,
        ring: EndpointRing,
        member: str,
        routing_id: bytes,
        context: zmq.Context[zmq.Socket[bytes]],
        curve: tuple[bytes, bytes, bytes] | None,
        poller: zmq.Poller,
        on_reconnect: Callable[[], None],
    ) -> None:
        self._ring = ring
        self.member = member
        self._routing_id = routing_id
        self._ctx = context
        self._curve = curve  # (server public, client public, client secret)
        self._poller = poller
        self._on_reconnect = on_reconnect
        #: The endpoint the socket is connected to.
        self.connected_to = ring.current
        #: Step 7: the leader a NOT_LEADER answer named, until followed (None: none to follow).
        self.redirect_to: str | None = None
        self.sock, self.monitor = self._connect()
        started = time.monotonic()
        self.clock = IoClock(last_heard=started, last_served=started)

    def _socket(self) -> zmq.Socket[bytes]:
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.ROUTING_ID, self._routing_id)
        # A constant, short reconnect interval (no exponential backoff): after a
        # coordinator restart the member is back within RECONNECT_IVL_MS of the bind.
        sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_IVL_MS)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_IVL_MS)
        if self._curve is not None:
            server_public, public, secret = self._curve
            sock.curve_serverkey = server_public
            sock.curve_publickey = public
            sock.curve_secretkey = secret
        self.connected_to = self._ring.current
        sock.connect(self.connected_to)
        return sock

    def _connect(self) -> tuple[zmq.Socket[bytes], zmq.Socket[bytes]]:
        """A socket to the ring's endpoint and its monitor, both polled. Connection events: a
        reconnect (the coordinator restarted) sends a heartbeat at once, whose NOT_REGISTERED
        answer makes us join again, instead of waiting for the next heartbeat."""
        sock = self._socket()
        self._poller.register(sock, zmq.POLLIN)
        monitor = sock.get_monitor_socket(zmq.EVENT_CONNECTED)
        self._poller.register(monitor, zmq.POLLIN)
        return sock, monitor

    def reconnections(self) -> int:
        """Count the connection events the monitor reported; how many of them were
        reconnections (every connection after the socket's first)."""
        again = 0
        while True:
            try:
                self.monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return again
            self.clock.connects += 1
            if self.clock.connects > 1:
                again += 1

    def admit(self, epoch: int | None, msg_type: str) -> bool:
        """Step 8: whether a frame of ``epoch`` may be read further (else dropped and counted)."""
        return self._ring.fence.admit(epoch or 0, f"{self.member}: a {msg_type!r} from {self.connected_to}")

    def unserved(self, now: float) -> bool:
        """Step 6: the endpoint is to be left."""
        clock = self.clock
        return now - clock.last_heard > MOVE_ON_S or now - clock.last_served > LOST_AFTER_S

    def move_on(self, now: float) -> None:
        """Step 6: leave the endpoint that has not served for the next one."""
        silent = self.connected_to
        self._ring.move_from(silent)
        log.warning(
            "%s: the coordinator at %s has not served for %.1fs; trying %s",
            self.member,
            silent,
            now - self.clock.last_served,
            self._ring.current,
        )
        self._reconnect(now)

    def follow_redirect(self) -> None:
        """Step 7: move to the leader a NOT_LEADER answer named."""
        leader, self.redirect_to = self.redirect_to, None
        if leader is None or leader == self.connected_to:
            return
        log.warning(
            "%s: the coordinator at %s is a standby; moving to the leader %s", self.member, self.connected_to, leader
        )
        self._ring.redirect(leader)
        self._reconnect(time.monotonic())

    def _reconnect(self, now: float) -> None:
        """Steps 6-7: drop the socket, connect to the ring's endpoint, and join there."""
        for polled in (self.sock, self.monitor):
            self._poller.unregister(polled)
        self.sock.disable_monitor()
        self.monitor.close(linger=0)
        self.sock.close(linger=0)
        self._on_reconnect()
        clock = self.clock
        clock.last_served = clock.last_heard = now
        clock.join_sent = clock.last_hb = 0.0
        clock.connects = 0
        self.sock, self.monitor = self._connect()

    def close(self) -> None:
        """The I/O thread ends: close the socket (a final leave may still go out) and its monitor."""
        self.sock.disable_monitor()
        self.monitor.close(linger=0)
        self.sock.close(linger=200)
