"""Operator metrics: a snapshot dict and Prometheus metrics (``crkafka_consumer_*``).

Counters that the hot path touches live in the threads as plain integers (no
locks, no per-record work); the snapshot and the Prometheus collector read them
when asked. Each operator has its own ``CollectorRegistry``
(``op.prometheus_registry``), so several operators in one process (the Spark
source) never clash; every sample carries an ``operator`` label so registries
can be merged (:func:`merged_registry`) or scraped side by side.

Per-partition offsets come from what the event thread (the only thread that
touches the consumer) already learns:

1. after each poll, at most every ``HIGHWATER_REFRESH_S``, it hands the
   high-water marks of the fetch responses to :meth:`OperatorMetrics.set_end_offsets`
   (no request to the broker);
2. after each successful commit it hands the committed offsets to
   :meth:`OperatorMetrics.set_committed`;
3. the collector (HTTP thread) reads those dicts, which are replaced, never
   mutated, so a scrape sees one consistent map, and the positions from the
   offset manager (under its lock).

Lag is ``end offset - position`` (records fetched but not yet processed or
not yet fetched); the committed-offset lag is ``end offset - committed``.

Prometheus names follow the conventions: ``crkafka_`` prefix, base units,
``_total`` counters, ``topic`` and ``partition`` as separate labels. The full
list is in docs/operations.md ("Metrics"); the snapshot's keys (the Python
API, ``op.metrics()``) are :class:`MetricsSnapshot`'s.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Literal, TypedDict
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from coordinator.protocol.common.partitions import by_label
from cr_consumer.kafka.client import TopicPartition
from cr_consumer.operator.offset_manager import OffsetManager

log = logging.getLogger(__name__)

PREFIX = "crkafka_consumer_"
#: How long MetricsEndpoint.stop() waits for the HTTP thread.
ENDPOINT_STOP_TIMEOUT_S = 5.0

#: Buckets (seconds) of the drain and reset duration histograms: a drain is a
#: commit round trip (milliseconds); a reset may wait for a merge (seconds).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

#: The snapshot's keys whose values are numbers the collector exports as they are.
NumberKey = Literal[
    "nPartitionRebalances",
    "nQueueFullPause",
    "nDroppedMalformedMessages",
    "nSubmittedMessages",
    "nDroppedResetPending",
    "nDroppedStale",
    "nDroppedAborted",
    "nHeldOpen",
    "nClientSkips",
    "nResetRequests",
    "nDrains",
    "nResets",
    "nAssignedPartitions",
    "nConsumedTopics",
    "nPendingMessages",
    "isPaused",
    "nRestoringPartitions",
]

#: (Prometheus name without prefix and ``_total``, snapshot key, help).
COUNTERS: tuple[tuple[str, NumberKey, str], ...] = (
    ("partition_rebalances", "nPartitionRebalances", "Partition assignments received"),
    ("queue_full_pauses", "nQueueFullPause", "Times all partitions were paused because the record queue was full"),
    ("malformed_records_dropped", "nDroppedMalformedMessages", "Records the deserialiser could not decode, dropped"),
    ("records_submitted", "nSubmittedMessages", "Records submitted downstream"),
    ("reset_pending_records_dropped", "nDroppedResetPending", "Records polled while a reset was pending, dropped"),
    ("stale_records_dropped", "nDroppedStale", "Queued records dropped because a reset or rebalance came first"),
    (
        "aborted_records_dropped",
        "nDroppedAborted",
        "Polled records of aborted transactions dropped by the source (crkafka.filter.aborted)",
    ),
    (
        "open_transaction_holds",
        "nHeldOpen",
        "Times a partition was read again from a transaction still open (crkafka.filter.aborted)",
    ),
    (
        "client_skips",
        "nClientSkips",
        "Times a partition was read again from a committed record its client skipped (crkafka.filter.aborted)",
    ),
    ("reset_requests", "nResetRequests", "Region resets requested after a rebalance"),
    ("drains", "nDrains", "Completed drains (each commits the processed offsets)"),
    ("resets", "nResets", "Completed resets"),
)
#: (Prometheus name without prefix, snapshot key, help).
GAUGES: tuple[tuple[str, NumberKey, str], ...] = (
    ("assigned_partitions", "nAssignedPartitions", "Partitions currently assigned"),
    ("consumed_topics", "nConsumedTopics", "Topics of the assigned partitions"),
    ("pending_records", "nPendingMessages", "Records in the record queue and drain buffer"),
    ("paused", "isPaused", "1 while partitions are paused because the record queue is full"),
    ("restoring_partitions", "nRestoringPartitions", "Partitions held while the pipeline restores their state"),
)
#: Per-partition gauges (name without prefix, help).
PARTITION_GAUGES = (
    ("lag", "Records between the position (next offset to process) and the end offset (high-water mark)"),
    ("position", "Next offset to process"),
    ("end_offset", "End offset (high-water mark) from the last fetch response"),
    ("committed_offset", "Last offset committed to Kafka by a drain or a batch commit"),
)


class Readings(TypedDict):
    """The snapshot's values that live in the operator's threads (the state
    machine, the rebalancer, the queue, the event and process threads, the
    decoder); ``readings()`` returns them at every snapshot."""

    state: str
    nPartitionRebalances: int
    nPendingMessages: int
    nQueueFullPause: int
    isPaused: int
    nDroppedMalformedMessages: int
    nSubmittedMessages: int
    nDroppedStale: int
    nDroppedAborted: int
    nHeldOpen: int
    nClientSkips: int
    nRestoringPartitions: int


class MetricsSnapshot(Readings):
    """``op.metrics()``: the readings, and what this module keeps itself."""

    nAssignedPartitions: int
    nConsumedTopics: int
    drainTimeMillis: float
    drainTimeMillisMax: float
    resetTimeMillis: float
    nDroppedResetPending: int
    nResetRequests: int
    nDrains: int
    nResets: int
    #: lag by partition label, ``topic[partition]``
    consumerLag: dict[str, int]


class OperatorMetrics:
    """Counters, duration histograms and per-partition offsets of one operator.

    ``offsets``: the operator's offset manager (positions, assignment);
    ``readings()``: the operator's :class:`Readings`, read when asked.
    """

    #: Written by the handler caller's thread (drain_done, reset_done) and the
    #: event thread (the rest, and both offset maps); read by any thread that
    #: asks for a snapshot or scrapes. Plain numbers and maps replaced as a
    #: whole, so no lock: a reader sees each value either before or after an update.
    drain_ms: float
    drain_ms_max: float
    reset_ms: float
    n_drains: int
    n_resets: int
    n_dropped_reset_pending: int
    n_reset_requests: int
    _end_offsets: dict[TopicPartition, int]
    _committed: dict[TopicPartition, int]

    def __init__(self, name: str, offsets: OffsetManager, readings: Callable[[], Readings]) -> None:
        self._name = name
        self._offsets = offsets
        self._readings = readings
        self.drain_ms = 0.0
        self.drain_ms_max = 0.0
        self.reset_ms = 0.0
        self.n_drains = 0
        self.n_resets = 0
        self.n_dropped_reset_pending = 0
        self.n_reset_requests = 0
        self._end_offsets = {}
        self._committed = {}
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(self)
        self._drain_seconds = Histogram(
            PREFIX + "drain_duration_seconds",
            "Duration of a drain (block, stop polling, commit)",
            ["operator"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        ).labels(name)
        self._reset_seconds = Histogram(
            PREFIX + "reset_duration_seconds",
            "Duration of a reset (merge, seek, read positions back)",
            ["operator"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        ).labels(name)

    def drain_done(self, ms: float) -> None:
        self.drain_ms = ms
        self.drain_ms_max = max(self.drain_ms_max, ms)
        self.n_drains += 1
        self._drain_seconds.observe(ms / 1000)

    def reset_done(self, ms: float) -> None:
        self.reset_ms = ms
        self.n_resets += 1
        self._reset_seconds.observe(ms / 1000)

    def dropped_reset_pending(self, n: int) -> None:
        """Event thread: ``n`` records polled while a reset was pending, dropped."""
        self.n_dropped_reset_pending += n

    def reset_requested(self) -> None:
        """Event thread: a revocation made this operator ask for a region reset."""
        self.n_reset_requests += 1

    def set_end_offsets(self, end_offsets: Mapping[TopicPartition, int | None]) -> None:
        """Event thread: the high-water marks of the assigned partitions (None: not fetched yet)."""
        self._end_offsets = {tp: hw for tp, hw in end_offsets.items() if hw is not None}

    def set_committed(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Event thread: offsets just committed (merged into those committed before)."""
        self._committed = {**self._committed, **offsets}

    def unregister(self) -> None:
        with contextlib.suppress(KeyError):
            self.registry.unregister(self)

    def partition_offsets(self) -> dict[TopicPartition, dict[str, int]]:
        """Per assigned partition: position, end_offset, lag, committed_offset (those known)."""
        positions = self._offsets.snapshot()
        end_offsets = self._end_offsets
        committed = self._committed
        out: dict[TopicPartition, dict[str, int]] = {}
        for tp in self._offsets.assigned():
            row: dict[str, int] = {}
            if tp in positions:
                row["position"] = positions[tp]
            if tp in end_offsets:
                row["end_offset"] = end_offsets[tp]
                if tp in positions:
                    row["lag"] = max(0, end_offsets[tp] - positions[tp])
            if tp in committed:
                row["committed_offset"] = committed[tp]
            out[tp] = row
        return out

    def snapshot(self) -> MetricsSnapshot:
        live = self._readings()
        assigned = self._offsets.assigned()
        lag = by_label({tp: row["lag"] for tp, row in self.partition_offsets().items() if "lag" in row})
        return {
            **live,
            "nAssignedPartitions": len(assigned),
            "nConsumedTopics": len({tp.topic for tp in assigned}),
            "drainTimeMillis": round(self.drain_ms, 3),
            "drainTimeMillisMax": round(self.drain_ms_max, 3),
            "resetTimeMillis": round(self.reset_ms, 3),
            "nDroppedResetPending": self.n_dropped_reset_pending,
            "nResetRequests": self.n_reset_requests,
            "nDrains": self.n_drains,
            "nResets": self.n_resets,
            "consumerLag": lag,
        }

    # prometheus_client collector protocol
    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot()
        name = self._name
        for metric, key, doc in COUNTERS:
            c = CounterMetricFamily(PREFIX + metric, doc, labels=["operator"])
            c.add_metric([name], snap[key])
            yield c
        for metric, key, doc in GAUGES:
            g = GaugeMetricFamily(PREFIX + metric, doc, labels=["operator"])
            g.add_metric([name], snap[key])
            yield g
        g = GaugeMetricFamily(
            PREFIX + "state", "1 for the operator's current client state", labels=["operator", "state"]
        )
        g.add_metric([name, snap["state"]], 1)
        yield g
        rows = sorted(self.partition_offsets().items())
        for metric, doc in PARTITION_GAUGES:
            g = GaugeMetricFamily(PREFIX + metric, doc, labels=["operator", "topic", "partition"])
            for tp, row in rows:
                if metric in row:
                    g.add_metric([name, tp.topic, str(tp.partition)], row[metric])
            yield g


class MergedCollector:
    """Collects several operators' registries as one (the members of one Spark runner).

    ``registries`` is called at every scrape, so operators started after the
    endpoint are included once they exist."""

    def __init__(self, registries: Callable[[], Iterable[CollectorRegistry]]) -> None:
        self._registries = registries

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for registry in self._registries():
            for family in registry.collect():
                merged = families.get(family.name)
                if merged is None:
                    families[family.name] = merged = Metric(family.name, family.documentation, family.type, family.unit)
                merged.samples.extend(family.samples)
        yield from families.values()


def merged_registry(registries: Callable[[], Iterable[CollectorRegistry]]) -> CollectorRegistry:
    """One registry exposing every sample of ``registries()`` (families merged by name)."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(MergedCollector(registries))
    return registry


class StatsCollector:
    """Counters read from a dict of running totals when scraped (``prefix + key + "_total"``)."""

    def __init__(self, prefix: str, stats: Callable[[], Mapping[str, int]], docs: Mapping[str, str]) -> None:
        self._prefix = prefix
        self._stats = stats
        self._docs = dict(docs)

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        stats = self._stats()
        for key, doc in self._docs.items():
            yield CounterMetricFamily(self._prefix + key, doc, value=stats.get(key, 0))


class LabelledCounters:
    """One counter family read from a map of running totals when scraped: ``name + "_total"``
    with one sample per key of ``totals()`` (the key's items are the ``labels``' values). The
    caller bounds the map's keys; the map must be replaced, never mutated, by its writer."""

    def __init__(
        self, name: str, doc: str, labels: tuple[str, ...], totals: Callable[[], Mapping[tuple[str, ...], int]]
    ) -> None:
        self._name = name
        self._doc = doc
        self._labels = labels
        self._totals = totals

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self._name, self._doc, labels=list(self._labels))
        for values, total in sorted(self._totals().items()):
            family.add_metric(list(values), total)
        yield family


class MetricsEndpoint:
    """``GET /metrics`` of a member process or the Spark runner, on ``host:port``.

    1. :meth:`start` binds the port (0: any free port; :attr:`address` tells
       which) and serves ``registry`` from one daemon thread that this object
       owns; a port in use raises ``OSError`` naming the address.
    2. Each scrape runs the registry's collectors on a thread of the server:
       they only read what the operator's threads publish (see OperatorMetrics).
    3. :meth:`stop` shuts the server down and joins its thread (bounded).
    """

    def __init__(self, registry: CollectorRegistry, port: int, host: str = "127.0.0.1") -> None:
        if not 0 <= port <= 65535:
            raise ValueError(f"metrics port must be 0..65535, got {port}")
        self._registry = registry
        self._port = port
        self._host = host
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.address: str | None = None

    def start(self) -> str:
        try:
            self._server, self._thread = start_http_server(self._port, self._host, self._registry)
        except OSError as exc:
            raise OSError(f"cannot serve /metrics on {self._host}:{self._port}: {exc}") from exc
        host, port = self._server.server_address[:2]
        self.address = f"{host.decode() if isinstance(host, bytes) else host}:{port}"
        log.info("metrics on http://%s/metrics", self.address)
        return self.address

    def stop(self) -> None:
        server, thread, self._server, self._thread = self._server, self._thread, None, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(ENDPOINT_STOP_TIMEOUT_S)


__all__ = [
    "DURATION_BUCKETS",
    "LabelledCounters",
    "MergedCollector",
    "MetricsEndpoint",
    "MetricsSnapshot",
    "OperatorMetrics",
    "Readings",
    "StatsCollector",
    "merged_registry",
]
