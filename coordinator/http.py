"""Observability of the coordinator: Prometheus metrics and the HTTP /metrics and /status endpoints.

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
``stop()`` shuts it down and joins it.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

log = logging.getLogger(__name__)

#: Bound on waiting for the loop thread to build /status, so a busy or wedged
#: loop makes /status fail (503) instead of hanging the HTTP thread.
STATUS_TIMEOUT_S = 5.0
#: How long stop() waits for the HTTP thread.
STOP_TIMEOUT_S = 5.0


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
            self._httpd = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise OSError(f"cannot serve HTTP on {address}: {exc}") from exc
        self._httpd.daemon_threads = True
        self.address = f"{self._httpd.server_address[0]}:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="coordinator-http", daemon=True)

    def start(self) -> None:
        self._thread.start()
        log.info("HTTP /metrics and /status on http://%s", self.address)

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(STOP_TIMEOUT_S)

    def status_json(self) -> bytes:
        snap = self.server.call_in_loop(self.server.status_snapshot, STATUS_TIMEOUT_S)
        return json.dumps(snap, indent=2, sort_keys=True, default=str).encode()


def parse_host_port(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"HTTP address must be HOST:PORT (e.g. 127.0.0.1:9570), got {address!r}")
    return host, int(port)


def _make_handler(endpoint: HttpEndpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server API)
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, CONTENT_TYPE_LATEST, endpoint.metrics.render())
            elif path == "/status":
                try:
                    body = endpoint.status_json()
                except Exception as exc:
                    log.exception("/status failed")
                    self._send(503, "text/plain", f"status unavailable: {exc}\n".encode())
                    return
                self._send(200, "application/json", body)
            else:
                self._send(404, "text/plain", b"not found: try /metrics or /status\n")

        def _send(self, code: int, ctype: str, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug("http: " + fmt, *args)

    return Handler
