"""The coordinator's cached metric children count exactly as ``labels()`` does,
and the cache stays bounded."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from coordinator.server.metrics import MAX_CACHED_LABELS, CoordinatorMetrics, LabelCache

from support.metrics import samples

TYPES = ["ping", "merge_checkpoint", "ping", "unknown", "malformed", "merge_checkpoint", "ping", "register"]
CODES = ["TIMEOUT", "INVALID", "TIMEOUT", "UNKNOWN_TYPE"]


def test_cached_counts_render_the_same_exposition_as_labels():
    cached, direct = CoordinatorMetrics(), CoordinatorMetrics()
    for msg_type in TYPES:
        cached.count_request(msg_type)
        direct.requests.labels(msg_type).inc()
    for code in CODES:
        cached.count_error(code)
        direct.errors.labels(code).inc()
    for name in ("crkafka_coordinator_requests_total", "crkafka_coordinator_errors_total"):
        assert sorted(samples(cached.render().decode(), name), key=str) == sorted(
            samples(direct.render().decode(), name), key=str
        )
    requests = {
        labels["type"]: v for labels, v in samples(cached.render().decode(), "crkafka_coordinator_requests_total")
    }
    assert requests == {"ping": 3, "merge_checkpoint": 2, "unknown": 1, "malformed": 1, "register": 1}


def test_a_cached_child_is_the_familys_own_child():
    family = Counter("c", "c", ["kind"], registry=CollectorRegistry())
    cache = LabelCache(family)
    assert cache.child("a") is family.labels("a")
    assert cache.child("a") is cache.child("a")
    family.labels("a").inc(2)
    cache.child("a").inc()
    assert family.labels("a")._value.get() == 3


def test_the_cache_is_bounded_and_counts_past_the_bound():
    registry = CollectorRegistry()
    family = Counter("bounded", "b", ["kind"], registry=registry)
    cache = LabelCache(family)
    values = [f"v{i}" for i in range(MAX_CACHED_LABELS + 50)]
    for value in values + values:
        cache.child(value).inc()
    assert len(cache) == MAX_CACHED_LABELS
    counts = {
        s.labels["kind"]: s.value for metric in family.collect() for s in metric.samples if s.name == "bounded_total"
    }
    assert counts == {value: 2.0 for value in values}
