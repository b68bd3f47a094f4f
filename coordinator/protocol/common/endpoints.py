"""Where a client finds the coordinator: one endpoint, or the leader's and its standbys'.

A coordinator on Kafka may run with standbys (``cr-coordinator --state kafka --standby``,
``docs/durable-state.md``), each bound to its own endpoint; only the leader serves, a standby
answers ``LOAD_IN_PROGRESS`` until it takes over. A client is given them all, comma-separated
(``tcp://a:5570,tcp://b:5570``), and finds the leader itself:

1. It talks to one endpoint at a time, the first at start.
2. It moves to the next (cyclically) when the one it talks to has not served it for a client's
   own bounds: no reply (a dead or paused leader), or only ``LOAD_IN_PROGRESS`` (a standby, or a
   leader still replaying its log). Moving drops the connection and whatever it had in flight,
   as a coordinator restart does; each client says what it re-sends
   (``coordinator/client.py``, ``cr_consumer/runtime/member/control.py``).
3. With one endpoint there is nowhere to move: a client waits for it, as before.
4. A standby that knows the leader answers ``NOT_LEADER`` naming the leader's endpoint
   (``coordinator/protocol/wire/errors.py``). The client checks the name like a configured
   endpoint (:func:`check_endpoint`: a known scheme, bounded length, no control characters or
   commas); a bad one is logged and the reply treated as ``LOAD_IN_PROGRESS``. A good one
   becomes the endpoint to talk to at once (:meth:`EndpointRing.redirect`): an endpoint of the
   list, or one added to it, at most :data:`MAX_LEARNED` of them, the oldest added replaced
   first (a configured endpoint is never replaced). The client re-sends the same request there.
5. Every frame from a coordinator carries its leader's epoch (``envelope.decode(...,
   from_server=True)``). :class:`EpochFence` keeps the highest epoch the client has seen and
   drops any frame with a lower one (logged, counted): a reply or pushed command that a
   deposed leader sent, or a redirect a lagging standby sent, never reaches the client's
   logic. The check runs before the frame is read further, so a redirect is followed only
   when it is not older than what the client knows.

:class:`EndpointRing` is shared by the threads of one client; a thread moves the ring only
from the endpoint it found silent, so two threads that find the same endpoint silent move it
once. Its :class:`EpochFence` (``ring.fence``) is shared the same way.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)

#: Most endpoints one client is given: a leader and a handful of standbys.
MAX_ENDPOINTS = 8
#: Most endpoints a client adds to its list from redirects (step 4): bounds what hostile or
#: confused replies can make it remember; the oldest added is replaced first.
MAX_LEARNED = 4
#: The ZeroMQ transports a coordinator binds (``inproc`` within one process: tests).
SCHEMES = ("tcp", "ipc", "inproc")
#: Longest endpoint text (``tcp://`` plus a DNS name and a port, or an ``ipc://`` path).
MAX_ENDPOINT_LEN = 300


def parse_endpoints(text: str) -> tuple[str, ...]:
    """Step 1's list from ``tcp://HOST:PORT[,tcp://HOST:PORT...]``; ValueError naming what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"coordinator endpoint must look like tcp://HOST:PORT, got {text!r}")
    endpoints = tuple(part.strip() for part in text.split(","))
    if len(endpoints) > MAX_ENDPOINTS:
        raise ValueError(f"at most {MAX_ENDPOINTS} coordinator endpoints, got {len(endpoints)}")
    for endpoint in endpoints:
        check_endpoint(endpoint)
    if len(set(endpoints)) != len(endpoints):
        raise ValueError(f"coordinator endpoints repeat: {','.join(endpoints)[:200]!r}")
    return endpoints


def check_endpoint(endpoint: object) -> str:
    """One endpoint, configured or named by a reply (step 4): ``SCHEME://ADDRESS`` with a scheme
    of :data:`SCHEMES`, at most :data:`MAX_ENDPOINT_LEN` characters, no whitespace, control
    characters or commas; ValueError otherwise."""
    if not isinstance(endpoint, str):
        raise ValueError(f"coordinator endpoint must be a string, got {type(endpoint).__name__}")
    scheme, sep, address = endpoint.partition("://")
    if (
        not sep
        or scheme not in SCHEMES
        or not address
        or len(endpoint) > MAX_ENDPOINT_LEN
        or "," in endpoint
        or not endpoint.isprintable()
        or any(c.isspace() for c in endpoint)
    ):
        raise ValueError(f"coordinator endpoint must look like tcp://HOST:PORT, got {endpoint[:80]!r}")
    return endpoint


class EpochFence:
    """Step 5: the highest leader epoch one client has seen (thread-safe)."""

    def __init__(self) -> None:
        self.highest = 0
        #: Frames dropped for a lower epoch.
        self.dropped = 0
        self._lock = threading.Lock()

    def admit(self, epoch: int, what: str) -> bool:
        """True for a frame of ``epoch`` >= the highest seen (which it raises to ``epoch``); False,
        logged and counted, for a lower one. ``what`` names the frame in the log."""
        with self._lock:
            if epoch >= self.highest:
                self.highest = epoch
                return True
            self.dropped += 1
            highest = self.highest
        log.warning("dropped %s of leader epoch %d: epoch %d was seen already", what[:120], epoch, highest)
        return False


class EndpointRing:
    """Steps 1-4 for one client: the endpoint to talk to now, moved on by :meth:`move_from`
    and :meth:`redirect`; its :class:`EpochFence` is ``fence``."""

    def __init__(self, text: str) -> None:
        self.endpoints = parse_endpoints(text)
        self.configured = self.endpoints
        self.fence = EpochFence()
        self._learned: list[str] = []  # added by redirects, oldest first
        self._at = 0
        self._lock = threading.Lock()

    @property
    def current(self) -> str:
        return self.endpoints[self._at]

    @property
    def several(self) -> bool:
        """More than one endpoint: moving on is possible (step 3)."""
        return len(self.endpoints) > 1

    def move_from(self, endpoint: str) -> str:
        """Step 2: ``endpoint`` did not serve; the endpoint to talk to now (the next one, unless
        another thread moved on from ``endpoint`` already)."""
        with self._lock:
            if self.endpoints[self._at] == endpoint:
                self._at = (self._at + 1) % len(self.endpoints)
            return self.endpoints[self._at]

    def redirect(self, endpoint: str) -> str:
        """Step 4: a reply named ``endpoint`` (already checked: :func:`check_endpoint`) as the
        leader's; it is the endpoint to talk to now, added to the list if it is not there."""
        with self._lock:
            if endpoint not in self.endpoints:
                current = self.endpoints[self._at]
                if len(self._learned) >= MAX_LEARNED:
                    self._learned.pop(0)
                self._learned.append(endpoint)
                self.endpoints = self.configured + tuple(self._learned)
                self._at = self.endpoints.index(current) if current in self.endpoints else 0
            self._at = self.endpoints.index(endpoint)
            return endpoint

    def __str__(self) -> str:
        return ",".join(self.endpoints)


__all__ = ["MAX_ENDPOINTS", "MAX_LEARNED", "EndpointRing", "EpochFence", "check_endpoint", "parse_endpoints"]
