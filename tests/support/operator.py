"""Helpers shared by the consumer-operator tests (no tests here)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from cr_consumer import ConsumerOperator, OperatorConfig
from cr_consumer.testing.kafka_util import committed_offsets

from support.group_timeouts import TEST_HEARTBEAT_INTERVAL_MS, TEST_SESSION_TIMEOUT_MS

if TYPE_CHECKING:
    from kafka.consumer.fetcher import ConsumerRecord

#: The Kafka client of the operators config() builds; tests/operator/conftest.py's
#: ``kafka_client`` fixture sets it per test (the operator's tests run with both).
CLIENT = "kafka-python"

FAST_GROUP = {
    "session.timeout.ms": TEST_SESSION_TIMEOUT_MS,
    "heartbeat.interval.ms": TEST_HEARTBEAT_INTERVAL_MS,
}


class Sink:
    """Collects submitted records (thread-safe); `per_partition` -> list of offsets."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.records: list[ConsumerRecord] = []
        self.cond = threading.Condition(self._lock)

    def __call__(self, record) -> None:
        with self._lock:
            self.records.append(record)
            self.cond.notify_all()

    def batch(self, records) -> None:
        with self._lock:
            self.records.extend(records)
            self.cond.notify_all()

    def __len__(self) -> int:
        return len(self.records)

    def offsets(self) -> dict[tuple[str, int], list[int]]:
        out: dict[tuple[str, int], list[int]] = {}
        with self._lock:
            for r in self.records:
                out.setdefault((r.topic, r.partition), []).append(r.offset)
        return out

    def wait_count(self, n: int, timeout: float) -> None:
        with self._lock:
            if not self.cond.wait_for(lambda: len(self.records) >= n, timeout):
                raise AssertionError(f"only {len(self.records)} of {n} records arrived within {timeout}s")

    def clear(self) -> None:
        with self._lock:
            self.records.clear()


def config(bootstrap: str, group: str, name: str, **kw) -> OperatorConfig:
    props = dict(FAST_GROUP)
    props.update(kw.pop("consumer_properties", {}))
    kw.setdefault("drain_timeout_s", 10.0)
    kw.setdefault("reset_timeout_s", 20.0)
    kw.setdefault("client", CLIENT)
    return OperatorConfig(
        bootstrap_servers=bootstrap, group_id=group, operator_name=name, consumer_properties=props, **kw
    )


def make(bootstrap, group, name, sink=None, **kw) -> ConsumerOperator:
    op_kw = {k: kw.pop(k) for k in ("permit", "region", "control", "submit_batch", "restorer") if k in kw}
    return ConsumerOperator(config(bootstrap, group, name, **kw), sink, **op_kw)


class Region:
    """Records reset/drain requests (what the region runtime would receive)."""

    def __init__(self) -> None:
        self.resets: list[str] = []
        self.drains: list[str] = []
        self.event = threading.Event()

    def request_reset(self, *, force: bool, reason: str) -> None:
        self.resets.append(reason)
        self.event.set()

    def request_drain(self, *, reason: str) -> None:
        self.drains.append(reason)
        self.event.set()


committed = committed_offsets  # the same view any Kafka tool has


class Members:
    """Drives the region handlers of several operators the way the runtime does:
    permit blocked around drain/checkpoint/reset, reset run concurrently (the
    merge blocks until every member contributed), RESUME = unblock."""

    def __init__(self) -> None:
        self.ops: list[ConsumerOperator] = []

    def add(self, op):
        self.ops.append(op)
        return op

    def block(self):
        for op in self.ops:
            assert op.permit.block(10), f"{op.name}: permit not released"

    def resume(self):
        for op in self.ops:
            op.permit.unblock()

    def drain_checkpoint(self, seq: int) -> dict[str, bytes]:
        self.block()
        for op in self.ops:
            op.drain()
        data = {op.name: op.checkpoint(seq) for op in self.ops}
        self.resume()
        return data

    def _all(self, fn, on_blocked=None):
        errors = []

        def run(op):
            try:
                fn(op)
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                errors.append(exc)

        self.block()
        if on_blocked is not None:
            on_blocked()
        threads = [threading.Thread(target=run, args=(op,)) for op in self.ops]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        if errors:
            raise errors[0]
        self.resume()

    def reset(self, seq: int, data: dict[str, bytes], attempt: int = 0):
        self._all(lambda op: op.reset(seq, data.get(op.name), attempt))

    def reset_initial(self, attempt: int = 0):
        self._all(lambda op: op.reset_to_initial_state(attempt))

    def close(self):
        for op in self.ops:
            op.close()
