"""The coordinator's Prometheus metrics: ``crkafka_coordinator_*`` and ``crkafka_region_*``.

1. Each server has its own :class:`CoordinatorMetrics` registry, so several
   servers in one process do not clash; every name is listed in
   docs/operations.md, "Metrics".
2. The loop thread updates the counters and the load time as things happen;
   its housekeeping (every second) refreshes the gauges from the store's stats
   and lets each service update its own (``Service.update_metrics``).
3. A scrape (HTTP ``/metrics``, ``coordinator.server.http``) reads the registry
   from the HTTP thread: ``render`` is its Prometheus text format.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Generic, Protocol, TypeVar

import attrs
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from coordinator.protocol.wire.status import StoreStats

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
