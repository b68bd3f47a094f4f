"""Operator metrics: a snapshot dict and Prometheus metrics.

Names follow the reference design. Counters that the hot path touches live in
the threads as plain integers (no locks, no per-record work); the snapshot and
the Prometheus collector read them when asked. Each operator has its own
``CollectorRegistry`` (``op.prometheus_registry``), so several operators in one
process (the Spark source) never clash; every sample carries an ``operator``
label so registries can be merged by an exporter.

Snapshot keys: nAssignedPartitions, nConsumedTopics, nPartitionRebalances,
nPendingMessages, nQueueFullPause, drainTimeMillis, drainTimeMillisMax,
nDroppedMalformedMessages, nSubmittedMessages, nDroppedResetPending,
nDroppedStale, nResetRequests, nDrains, nResets, resetTimeMillis, state,
isPaused, consumerLag ({"topic[partition]": lag}).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

_COUNTERS = {
    "nPartitionRebalances": "partition assignments received",
    "nQueueFullPause": "times all partitions were paused because the queue was full",
    "nDroppedMalformedMessages": "records the deserialiser could not decode",
    "nSubmittedMessages": "tuples submitted",
    "nDroppedResetPending": "records polled in CR_RESET_PENDING and dropped",
    "nDroppedStale": "queued records dropped because a reset or rebalance came first",
    "nResetRequests": "region resets requested after a rebalance",
    "nDrains": "completed drains",
    "nResets": "completed resets",
}
_GAUGES = {
    "nAssignedPartitions": "partitions currently assigned",
    "nConsumedTopics": "topics of the assigned partitions",
    "nPendingMessages": "records in the message queue and drain buffer",
    "drainTimeMillis": "duration of the last drain",
    "drainTimeMillisMax": "longest drain",
    "resetTimeMillis": "duration of the last reset",
    "isPaused": "1 while partitions are paused for a full queue",
}


class OperatorMetrics:
    def __init__(self, op) -> None:
        self._op = op
        self.drain_ms = 0.0
        self.drain_ms_max = 0.0
        self.reset_ms = 0.0
        self.n_drains = 0
        self.n_resets = 0
        self.n_dropped_reset_pending = 0
        self.n_reset_requests = 0
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(self)

    def drain_done(self, ms: float) -> None:
        self.drain_ms = ms
        self.drain_ms_max = max(self.drain_ms_max, ms)
        self.n_drains += 1

    def reset_done(self, ms: float) -> None:
        self.reset_ms = ms
        self.n_resets += 1

    def unregister(self) -> None:
        try:
            self.registry.unregister(self)
        except KeyError:
            pass

    def snapshot(self) -> dict:
        op = self._op
        assigned = op.offsets.assigned()
        offsets = op.offsets.snapshot()
        lag = {}
        for tp, hw in dict(op._highwater).items():
            off = offsets.get(tp)
            if hw is not None and off is not None:
                lag[f"{tp.topic}[{tp.partition}]"] = max(0, hw - off)
        decoder = op.decoder
        return {
            "state": op.state.value,
            "nAssignedPartitions": len(assigned),
            "nConsumedTopics": len({tp.topic for tp in assigned}),
            "nPartitionRebalances": op.rebalancer.n_partition_rebalances,
            "nPendingMessages": len(op.queue),
            "nQueueFullPause": op.events.n_queue_full_pause,
            "isPaused": int(op.events.paused),
            "drainTimeMillis": round(self.drain_ms, 3),
            "drainTimeMillisMax": round(self.drain_ms_max, 3),
            "resetTimeMillis": round(self.reset_ms, 3),
            "nDroppedMalformedMessages": decoder.n_dropped if decoder is not None else 0,
            "nSubmittedMessages": op.process.n_submitted,
            "nDroppedResetPending": self.n_dropped_reset_pending,
            "nDroppedStale": op.process.n_dropped_stale,
            "nResetRequests": self.n_reset_requests,
            "nDrains": self.n_drains,
            "nResets": self.n_resets,
            "consumerLag": lag,
        }

    # prometheus_client collector protocol
    def describe(self):
        return []

    def collect(self):
        snap = self.snapshot()
        name = self._op.name
        for key, doc in _COUNTERS.items():
            c = CounterMetricFamily(f"cr_consumer_{key}", doc, labels=["operator"])
            c.add_metric([name], snap[key])
            yield c
        for key, doc in _GAUGES.items():
            g = GaugeMetricFamily(f"cr_consumer_{key}", doc, labels=["operator"])
            g.add_metric([name], snap[key])
            yield g
        g = GaugeMetricFamily("cr_consumer_consumer_lag", "records behind the high-water mark",
                              labels=["operator", "partition"])
        for part, lag in sorted(snap["consumerLag"].items()):
            g.add_metric([name, part], lag)
        yield g


__all__ = ["OperatorMetrics"]
