"""Observability of the coordinator: Prometheus metrics and the HTTP endpoints.

* ``GET /``: the status page for people (:mod:`coordinator.status_page`), built
  from the same snapshot as /status; 503 when the loop does not answer.
* ``GET /healthz``: 200 ``ok`` while the loop thread runs and answers a no-op
  call within ``HEALTH_TIMEOUT_S``; 503 otherwise (a wedged or dead loop).
* ``GET /ready``: 200 once the durable log is replayed (requests are served),
  503 before.

* ``GET /metrics``: Prometheus text format of :class:`CoordinatorMetrics`
  (a registry per server, so several servers in one process do not clash).
  Counters and the load time are updated by the loop as things happen; the
  gauges from the store's stats are refreshed by the loop every second.
* ``GET /status``: JSON snapshot (groups, members, region index, reset-pending
  flags, pending merges, store stats). It is computed ON the loop thread via
  ``server.call_in_loop`` so it never reads the store while the loop writes;
  if the loop does not answer within ``STATUS_TIMEOUT_S`` the reply is 503.
* Anything else: 404.

The HTTP server runs on one daemon thread owned by :class:`HttpEndpoint`;
``stop()`` shuts it down and joins it. Each connection is served on its own
thread; at most ``MAX_HTTP_CONNECTIONS`` at once (more are closed at once and
counted in ``coordinator_http_refused``), and a connection that sends nothing
for ``HTTP_IDLE_TIMEOUT_S`` is closed, so idle or slow clients cannot hold
threads and file descriptors for ever.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from coordinator.status_page import render_page

log = logging.getLogger(__name__)

#: Bound on waiting for the loop thread to build /status, so a busy or wedged
#: loop makes /status fail (503) instead of hanging the HTTP thread.
STATUS_TIMEOUT_S = 5.0
#: Bound on the /healthz no-op call on the loop: a loop that cannot run it this
#: fast is reported unhealthy (503) instead of hanging the probe.
HEALTH_TIMEOUT_S = 2.0
#: How long stop() waits for the HTTP thread.
STOP_TIMEOUT_S = 5.0
#: Concurrent HTTP connections served; more are closed at once (bounds threads
#: and descriptors taken by scrapers or an attacker on the HTTP port).
MAX_HTTP_CONNECTIONS = 64
#: An HTTP connection silent this long is closed (bounds slow-loris clients).
HTTP_IDLE_TIMEOUT_S = 5.0


class CoordinatorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("coordinator_requests", "Requests received, by message type", ["type"], registry=r)
        self.errors = Counter("coordinator_errors", "Error replies sent, by code", ["code"], registry=r)
        self.merges_pending = Gauge("coordinator_merges_pending", "Checkpoint merges waiting for contributions", registry=r)
        self.merges_completed = Counter("coordinator_merges_completed", "Checkpoint merges completed", registry=r)
        self.control_variables = Gauge("coordinator_control_variables", "Live control-variable entries", registry=r)
        self.groups = Gauge("coordinator_groups", "Registered consumer groups", registry=r)
        self.log_bytes = Gauge("coordinator_log_bytes", "Size of the durable log in bytes", registry=r)
        self.compactions = Counter("coordinator_compactions", "Log compactions done by this process", registry=r)
        self._compactions_seen = 0
        self.limit_rejections = Counter("coordinator_limit_rejections", "Requests refused by a resource limit, by limit", ["limit"], registry=r)
        self.load_seconds = Gauge("coordinator_load_seconds", "Time the start-up replay of the log took", registry=r)
        self.connections = Gauge("coordinator_connections", "Open client connections on the ZeroMQ socket", registry=r)
        self.connection_limit = Gauge(
            "coordinator_connection_limit", "Connections accepted at most (--max-connections, capped by the fd limit)",
            registry=r)
        self.connections_refused = Counter(
            "coordinator_connections_refused", "Connections closed because the connection limit was reached",
            registry=r)
        self.http_refused = Counter(
            "coordinator_http_refused", "HTTP connections closed because MAX_HTTP_CONNECTIONS were being served",
            registry=r)

    def set_connections(self, open_now: int, limit: int) -> None:
        self.connections.set(open_now)
        self.connection_limit.set(limit)

    def connection_refused(self) -> None:
        self.connections_refused.inc()

    def update_from_stats(self, stats: dict[str, Any]) -> None:
        """Refresh gauges from ``store.stats()`` (keys that are absent are skipped)."""
        for key, gauge in (
            ("control_variables", self.control_variables),
            ("groups", self.groups),
            ("log_bytes", self.log_bytes),
        ):
            value = stats.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                gauge.set(value)
        done = stats.get("compactions")
        if isinstance(done, int) and done > self._compactions_seen:
            self.compactions.inc(done - self._compactions_seen)
            self._compactions_seen = done

    def render(self) -> bytes:
        return generate_latest(self.registry)


class HttpEndpoint:
    def __init__(self, address: str, server: Any, metrics: CoordinatorMetrics) -> None:
        host, port = parse_host_port(address)
        self.server = server
        self.metrics = metrics
        handler = _make_handler(self)
        try:
            self._httpd = _BoundedHTTPServer((host, port), handler, metrics)
        except OSError as exc:
            raise OSError(f"cannot serve HTTP on {address}: {exc}") from exc
        self._httpd.daemon_threads = True
        self.address = f"{self._httpd.server_address[0]}:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="coordinator-http", daemon=True)

    def start(self) -> None:
        self._thread.start()
        log.info("HTTP /, /status, /metrics, /healthz and /ready on http://%s", self.address)

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(STOP_TIMEOUT_S)

    def status_json(self) -> bytes:
        snap = self.server.call_in_loop(self.server.status_snapshot, STATUS_TIMEOUT_S)
        return json.dumps(snap, indent=2, sort_keys=True, default=str).encode()

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

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 metrics: CoordinatorMetrics) -> None:
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

        def do_GET(self) -> None:  # noqa: N802 (http.server API)
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
                self._send(200 if ready else 503, "text/plain",
                           b"ready\n" if ready else b"not ready: replaying the durable log\n")
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
