"""Observability of the coordinator: Prometheus metrics and the HTTP endpoints.

* ``GET /``: the status page for people (:mod:`coordinator.server.status_page`), built
  from the same snapshot as /status; 503 when the loop does not answer.
* ``GET /healthz``: 200 ``ok`` while the loop thread runs and answers a no-op
  call within ``HEALTH_TIMEOUT_S``; 503 otherwise (a wedged or dead loop).
* ``GET /ready``: 200 once the durable log is replayed (requests are served),
  503 before.

* ``GET /metrics``: Prometheus text format of :class:`CoordinatorMetrics`
  (a registry per server, so several servers in one process do not clash;
  every name is listed in docs/operations.md, "Metrics").
  Counters and the load time are updated by the loop as things happen; the
  gauges from the store's stats are refreshed by the loop every second.
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
from collections.abc import Callable, Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, Protocol, TypeVar

import attrs
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from coordinator.protocol.wire.status import CoordinatorStatus, StoreStats
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


#: Buckets (seconds) of the region checkpoint and reset duration histograms: a
#: checkpoint round is a drain and a checkpoint on every member (milliseconds
#: to seconds); a reset may wait up to the reset timeout (minutes).
REGION_DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


#: Children cached per label cache (bounds its memory; the callers' label values
#: come from closed sets: the registered message types plus ``unknown`` and
#: ``malformed``, the error codes).
MAX_CACHED_LABELS = 256

C_co = TypeVar("C_co", covariant=True)
C = TypeVar("C")


class LabelledFamily(Protocol[C_co]):
    """A Prometheus metric family with one label (Counter, Gauge, Histogram)."""

    def labels(self, *values: str) -> C_co: ...


class LabelCache(Generic[C]):
    """The children of one single-label ``family`` by label value.

    ``Counter.labels(value)`` validates the value, takes the family's lock and
    looks the child up on every call: ``labels(v).inc()`` costs ~0.9 us against
    ~0.3 us for ``inc()`` on a kept child (bench/bench_coordinator_gc.py), paid
    per request by the loop thread. So:

    1. ``child(value)``: the cached child, else ``family.labels(value)``, cached.
    2. At most ``MAX_CACHED_LABELS`` children are cached; a caller that passed
       free text would get uncached (slower, still correct) counting past the
       bound instead of unbounded memory.

    A cached child is the same object ``labels(value)`` returns, so the
    exposition is unchanged. Thread safety: a dict read and a dict store, each
    atomic; two threads that miss at once both call ``labels()``, which returns
    the same child."""

    def __init__(self, family: LabelledFamily[C]) -> None:
        self._family = family
        self._children: dict[str, C] = {}

    def child(self, value: str) -> C:
        found = self._children.get(value)
        if found is not None:
            return found
        made = self._family.labels(value)
        if len(self._children) < MAX_CACHED_LABELS:
            self._children[value] = made
        return made

    def __len__(self) -> int:
        return len(self._children)


@attrs.frozen
class RegionSample:
    """One region's state as the loop thread saw it (read by the HTTP thread)."""

    name: str
    phase: str
    last_consistent: int | None
    checkpoints: int
    resets: int
    consecutive_resets: int
    failed: bool
    members: int
    #: Failure resets in a row, each soon after the previous (coordinator/region/reset.py).
    failure_streak: int = 0


class RegionMetrics:
    """``crkafka_region_*``: counters and gauges from a snapshot, duration histograms.

    1. The loop thread calls :meth:`update` every metrics refresh with one
       :class:`RegionSample` per region; the tuple is replaced, never mutated,
       so a scrape (HTTP thread) sees one consistent set.
    2. The loop thread calls :meth:`checkpoint_done` / :meth:`reset_done` when
       a checkpoint becomes consistent or a reset round completes.
    3. A dropped region's samples vanish at the next :meth:`update`.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._phases: tuple[str, ...] = ()
        self._samples: tuple[RegionSample, ...] = ()
        self._observed: set[str] = set()  # regions with histogram children (loop thread only)
        self._checkpoint_seconds = Histogram(
            "crkafka_region_checkpoint_duration_seconds",
            "Duration of a checkpoint round, from the drain command to the checkpoint being consistent",
            ["region"],
            buckets=REGION_DURATION_BUCKETS,
            registry=registry,
        )
        self._reset_seconds = Histogram(
            "crkafka_region_reset_duration_seconds",
            "Duration of a reset, from its first cause to every member having reset",
            ["region"],
            buckets=REGION_DURATION_BUCKETS,
            registry=registry,
        )
        registry.register(self)

    def update(self, samples: Iterable[RegionSample], phases: Iterable[str]) -> None:
        """Loop thread: the regions now and every phase a region can be in."""
        self._phases = tuple(phases)
        self._samples = tuple(samples)
        live = {s.name for s in self._samples}
        for region in self._observed - live:
            for histogram in (self._checkpoint_seconds, self._reset_seconds):
                histogram.labels(region)  # both children exist: remove() needs them
                histogram.remove(region)
        self._observed &= live

    def checkpoint_done(self, region: str, seconds: float) -> None:
        self._observed.add(region)
        self._checkpoint_seconds.labels(region).observe(seconds)

    def reset_done(self, region: str, seconds: float) -> None:
        self._observed.add(region)
        self._reset_seconds.labels(region).observe(seconds)

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        samples = self._samples
        phase = GaugeMetricFamily(
            "crkafka_region_phase", "1 for the region's current phase, 0 for the others", labels=["region", "phase"]
        )
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {
            "last": GaugeMetricFamily(
                "crkafka_region_last_consistent_checkpoint",
                "Sequence number of the last consistent checkpoint (-1: none yet)",
                labels=["region"],
            ),
            "checkpoints": CounterMetricFamily(
                "crkafka_region_checkpoints", "Checkpoints that became consistent", labels=["region"]
            ),
            "resets": CounterMetricFamily("crkafka_region_resets", "Reset rounds started", labels=["region"]),
            "consecutive": GaugeMetricFamily(
                "crkafka_region_consecutive_resets",
                "Failure resets since the region last made progress",
                labels=["region"],
            ),
            "streak": GaugeMetricFamily(
                "crkafka_region_failure_streak",
                "Failure resets in a row, each within failure_memory_s of the previous (drives the backoff hold)",
                labels=["region"],
            ),
            "failed": GaugeMetricFamily("crkafka_region_failed", "1 when the region is FAILED", labels=["region"]),
            "members": GaugeMetricFamily("crkafka_region_members", "Members joined", labels=["region"]),
        }
        for s in samples:
            for p in self._phases:
                phase.add_metric([s.name, p], 1 if s.phase == p else 0)
            families["last"].add_metric([s.name], s.last_consistent if s.last_consistent is not None else -1)
            families["checkpoints"].add_metric([s.name], s.checkpoints)
            families["resets"].add_metric([s.name], s.resets)
            families["consecutive"].add_metric([s.name], s.consecutive_resets)
            families["streak"].add_metric([s.name], s.failure_streak)
            families["failed"].add_metric([s.name], 1 if s.failed else 0)
            families["members"].add_metric([s.name], s.members)
        yield phase
        yield from families.values()


class CoordinatorMetrics:
    """``crkafka_coordinator_*`` and ``crkafka_region_*``: one registry per server."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        p = "crkafka_coordinator_"
        # prometheus_client adds "_total" to counter names
        self.requests = Counter(p + "requests", "Requests received, by message type", ["type"], registry=r)
        self.errors = Counter(p + "errors", "Error replies sent, by code", ["code"], registry=r)
        # Counted per request on the loop thread: children looked up once (LabelCache).
        self._requests_by_type = LabelCache(self.requests)
        self._errors_by_code = LabelCache(self.errors)
        self.merges_pending = Gauge(p + "merges_pending", "Checkpoint merges waiting for contributions", registry=r)
        self.merges_completed = Counter(p + "merges_completed", "Checkpoint merges completed", registry=r)
        self.control_variables = Gauge(p + "control_variables", "Live control-variable entries", registry=r)
        self.groups = Gauge(p + "groups", "Registered consumer groups", registry=r)
        self.log_bytes = Gauge(p + "log_bytes", "Size of the durable log", registry=r)
        self.compactions = Counter(p + "compactions", "Log compactions done by this process", registry=r)
        self._compactions_seen = 0
        self.limit_rejections = Counter(
            p + "limit_rejections", "Requests refused by a resource limit, by limit", ["limit"], registry=r
        )
        self.load_seconds = Gauge(p + "load_duration_seconds", "Time the start-up replay of the log took", registry=r)
        self.connections = Gauge(p + "connections", "Open client connections on the ZeroMQ socket", registry=r)
        self.connection_limit = Gauge(
            p + "max_connections",
            "Connections accepted at most (--max-connections, capped by the fd limit)",
            registry=r,
        )
        self.connections_refused = Counter(
            p + "connections_refused", "Connections closed because the connection limit was reached", registry=r
        )
        self.http_refused = Counter(
            p + "http_connections_refused",
            "HTTP connections closed because MAX_HTTP_CONNECTIONS were being served",
            registry=r,
        )
        self.regions = RegionMetrics(r)

    def count_request(self, msg_type: str) -> None:
        """One request of ``msg_type`` (a registered type, ``unknown`` or ``malformed``)."""
        self._requests_by_type.child(msg_type).inc()

    def count_error(self, code: str) -> None:
        """One error reply with ``code`` (an ``ErrorCode`` value)."""
        self._errors_by_code.child(code).inc()

    def set_connections(self, open_now: int, limit: int) -> None:
        self.connections.set(open_now)
        self.connection_limit.set(limit)

    def connection_refused(self) -> None:
        self.connections_refused.inc()

    def update_from_stats(self, stats: StoreStats) -> None:
        """Refresh gauges from ``store.stats()``."""
        self.control_variables.set(stats.control_variables)
        self.groups.set(stats.groups)
        self.log_bytes.set(stats.log_bytes)
        done = stats.compactions
        if done > self._compactions_seen:
            self.compactions.inc(done - self._compactions_seen)
            self._compactions_seen = done

    def render(self) -> bytes:
        return generate_latest(self.registry)


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
