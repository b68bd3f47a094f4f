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

:class:`EndpointRing` is shared by the threads of one client; a thread moves the ring only
from the endpoint it found silent, so two threads that find the same endpoint silent move it
once.
"""

from __future__ import annotations

import threading

#: Most endpoints one client is given: a leader and a handful of standbys.
MAX_ENDPOINTS = 8
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
        scheme, sep, address = endpoint.partition("://")
        if not sep or scheme not in SCHEMES or not address or len(endpoint) > MAX_ENDPOINT_LEN:
            raise ValueError(f"coordinator endpoint must look like tcp://HOST:PORT, got {endpoint[:80]!r}")
    if len(set(endpoints)) != len(endpoints):
        raise ValueError(f"coordinator endpoints repeat: {','.join(endpoints)[:200]!r}")
    return endpoints


class EndpointRing:
    """Steps 1-3 for one client: the endpoint to talk to now, moved on by :meth:`move_from`."""

    def __init__(self, text: str) -> None:
        self.endpoints = parse_endpoints(text)
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

    def __str__(self) -> str:
        return ",".join(self.endpoints)


__all__ = ["MAX_ENDPOINTS", "EndpointRing", "parse_endpoints"]
