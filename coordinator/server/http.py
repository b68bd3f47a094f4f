"""The coordinator's HTTP endpoints: status page, status, metrics, health and readiness.

* ``GET /``: the status page for people (:mod:`coordinator.server.status_page`), built
  from the same snapshot as /status; 503 when the loop does not answer.
* ``GET /healthz``: 200 ``ok`` while the loop thread runs and answers a no-op
  call within ``HEALTH_TIMEOUT_S``; 503 otherwise (a wedged or dead loop).
* ``GET /ready``: 200 once the durable log is replayed (requests are served),
  503 before.

* ``GET /metrics``: Prometheus text format of the server's
  :class:`~coordinator.server.metrics.CoordinatorMetrics`.
* ``GET /status``: the ``status`` reply's body as JSON (``CoordinatorStatus.to_body``,
  ``coordinator/protocol/wire/status.py``). It is computed ON the loop thread via
  ``server.call_in_loop`` so it never reads the store while the loop writes;
  if the loop does not answer within ``STATUS_TIMEOUT_S`` the reply is 503.
* Anything else: 404.

The HTTP server runs on one daemon thread owned by :class:`HttpEndpoint`;
``stop()`` shuts it down and joins it. Each connection is served on its own
thread; at most ``MAX_HTTP_CONNECTIONS`` at once (more are closed at once and
counted in ``crkafka_coordinator_http_connections_refused_total``), and a connection that sends nothing
for ``HTTP_IDLE_TIMEOUT_S`` is closed, so idle or slow clients cannot hold
threads and file descriptors for ever.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, TypeVar

from prometheus_client.exposition import CONTENT_TYPE_LATEST

from coordinator.protocol.wire.status import CoordinatorStatus
from coordinator.server.metrics import CoordinatorMetrics
from coordinator.server.status_page import render_page

log = logging.getLogger(__name__)

_T = TypeVar("_T")  # the result of a call run on the loop thread

#: Bound on waiting for the loop thread to build /status, so a busy or wedged
#: loop makes /status fail (503) instead of hanging the HTTP thread.
STATUS_TIMEOUT_S = 5.0
#: Bound on the /healthz no-op call on the loop: a loop that cannot run it this
#: fast is reported unhealthy (503) instead of hanging the probe.
HEALTH_TIMEOUT_S = 2.0
#: How long stop() waits for the HTTP thread, so a serve loop that does not
#: end cannot hang the coordinator's shutdown.
STOP_TIMEOUT_S = 5.0
#: Concurrent HTTP connections served; more are closed at once (bounds threads
#: and descriptors taken by scrapers or an attacker on the HTTP port).
MAX_HTTP_CONNECTIONS = 64
#: An HTTP connection silent this long is closed (bounds slow-loris clients).
HTTP_IDLE_TIMEOUT_S = 5.0


class ServedLoop(Protocol):
    """The server loop as the HTTP thread uses it (`coordinator.server.loop.CoordinatorServer`).

    Only `call_in_loop` runs code on the loop; `running` and `loaded` are read
    from the HTTP thread (a bool and a threading.Event)."""

    loaded: threading.Event

    @property
    def running(self) -> bool: ...
    def call_in_loop(self, fn: Callable[[], _T], timeout: float) -> _T: ...
    def status_snapshot(self) -> CoordinatorStatus: ...


class HttpEndpoint:
    """The HTTP thread: /, /status, /metrics, /healthz and /ready of one server loop."""

    def __init__(self, address: str, server: ServedLoop, metrics: CoordinatorMetrics) -> None:
        host, port = parse_host_port(address)
        self.server = server
        self.metrics = metrics
        handler = _make_handler(self)
        try:
            self._httpd = _BoundedHTTPServer((host, port), handler, metrics)
        except OSError as exc:
            raise OSError(f"cannot serve HTTP on {address}: {exc}") from exc
        self._httpd.daemon_threads = True
        self.address = f"{self._httpd.server_address[0]}:{self._httpd.server_address[1]}"  # type: ignore[str-bytes-safe]  # AF_INET: str
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, daemon=True, name=f"coordinator-http-{self._httpd.server_address[1]}"
        )

    def start(self) -> None:
        self._thread.start()
        log.info("HTTP /, /status, /metrics, /healthz and /ready on http://%s", self.address)

    def stop(self) -> None:
        """End the serve loop (if it ever started: ``shutdown()`` waits, without a
        bound, for a loop to acknowledge), close the socket, join the thread."""
        if self._thread.ident is not None:
            self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread.ident is not None:
            self._thread.join(STOP_TIMEOUT_S)
            if self._thread.is_alive():
                log.warning("the HTTP thread did not end within %.0fs", STOP_TIMEOUT_S)

    def status_json(self) -> bytes:
        snap = self.server.call_in_loop(self.server.status_snapshot, STATUS_TIMEOUT_S)
        return json.dumps(snap.to_body(), indent=2, sort_keys=True).encode()

    def status_html(self) -> bytes:
        return render_page(self.server.call_in_loop(self.server.status_snapshot, STATUS_TIMEOUT_S))

    def healthy(self) -> tuple[bool, str]:
        """The loop thread runs and executes a call within HEALTH_TIMEOUT_S."""
        if not self.server.running:
            return False, "the coordinator loop has stopped"
        try:
            self.server.call_in_loop(lambda: None, HEALTH_TIMEOUT_S)
        except TimeoutError:
            return False, f"the coordinator loop did not answer within {HEALTH_TIMEOUT_S:g}s"
        return True, "ok"

    def ready(self) -> bool:
        return bool(self.server.loaded.is_set())


def parse_host_port(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"HTTP address must be HOST:PORT (e.g. 127.0.0.1:9570), got {address!r}")
    return host.strip("[]"), int(port)


class _BoundedHTTPServer(ThreadingHTTPServer):
    """A thread per connection, at most MAX_HTTP_CONNECTIONS at once; more are closed at once."""

    daemon_threads = True
    #: Listen backlog: a burst of connections waits to be accepted (and counted
    #: against MAX_HTTP_CONNECTIONS) instead of trickling in by SYN retries.
    request_queue_size = 128

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], metrics: CoordinatorMetrics
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(MAX_HTTP_CONNECTIONS)
        self._metrics = metrics

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self._metrics.http_refused.inc()
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


def _make_handler(endpoint: HttpEndpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = HTTP_IDLE_TIMEOUT_S

        def do_GET(self) -> None:  # http.server API
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, CONTENT_TYPE_LATEST, endpoint.metrics.render())
            elif path in ("/status", "/"):
                try:
                    body = endpoint.status_json() if path == "/status" else endpoint.status_html()
                except Exception as exc:
                    log.exception("%s failed", path)
                    self._send(503, "text/plain", f"status unavailable: {exc}\n".encode())
                    return
                self._send(200, "application/json" if path == "/status" else "text/html; charset=utf-8", body)
            elif path == "/healthz":
                ok, why = endpoint.healthy()
                self._send(200 if ok else 503, "text/plain", f"{why}\n".encode())
            elif path == "/ready":
                ready = endpoint.ready()
                self._send(
                    200 if ready else 503,
                    "text/plain",
                    b"ready\n" if ready else b"not ready: replaying the durable log\n",
                )
            else:
                self._send(404, "text/plain", b"not found: try /, /status, /metrics, /healthz or /ready\n")

        def _send(self, code: int, ctype: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("http: " + fmt, *args)

    return Handler


__all__ = [
    "HEALTH_TIMEOUT_S",
    "HTTP_IDLE_TIMEOUT_S",
    "MAX_HTTP_CONNECTIONS",
    "STATUS_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "HttpEndpoint",
    "ServedLoop",
    "parse_host_port",
]
