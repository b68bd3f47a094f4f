"""The consumer operator: one member of a Kafka consumer group in a consistent region.

Threads (see event_thread.py and process_thread.py): the event thread owns the
KafkaConsumer, polls and serves events; the process thread submits batches
under the region permit. The region runtime (or a test, or the standalone
driver) calls the state-handler methods (handlers.py). The permit is held by the
caller for the whole drain/checkpoint/reset (``permit.block()``): ``drain``
and ``reset`` block it themselves too (idempotent), and whoever runs the
cycle unblocks it at RESUME.

Standalone (no ``permit`` given): the operator makes its own permit and a
driver thread (standalone.py) drains and commits every ``commit_period_s``
and handles rebalances by seeking to the committed offsets (at-least-once,
like a plain group consumer).
"""

from __future__ import annotations

import logging
import threading
import time

from kafka import KafkaConsumer, TopicPartition

from cr_consumer.operator.config import OperatorConfig, RegionMode
from cr_consumer.operator.event_thread import EventThread, OperatorFailed
from cr_consumer.operator.gc_policy import apply_gc_policy, release_gc_policy
from cr_consumer.operator.handlers import EVENT_TIMEOUT_S, DrainError, RegionHandlers, ResetError
from cr_consumer.operator.local_control import LocalControl
from cr_consumer.operator.message_queue import Batch, BatchQueue
from cr_consumer.operator.metrics import OperatorMetrics
from cr_consumer.operator.offset_manager import OffsetManager
from cr_consumer.operator.process_thread import Decoder, ProcessThread
from cr_consumer.operator.rebalance import Listener, Rebalancer
from cr_consumer.operator.region import RegionPermit
from cr_consumer.operator.states import ClientState, StateMachine

log = logging.getLogger(__name__)
S = ClientState

#: Bound on creating the KafkaConsumer and subscribing (bad bootstrap address).
START_TIMEOUT_S = 30.0
#: Bound on stopping each thread at close.
CLOSE_JOIN_S = 10.0
#: How often the event thread refreshes the high-water marks for lag metrics.
HIGHWATER_REFRESH_S = 0.5


class _LoggingRegion:
    def request_reset(self, *, force: bool, reason: str) -> None:
        log.warning("region reset requested (force=%s) but no region runtime is attached: %s", force, reason)

    def request_drain(self, *, reason: str) -> None:
        log.warning("region drain requested but no region runtime is attached: %s", reason)


class ConsumerOperator(RegionHandlers):
    def __init__(
        self,
        config: OperatorConfig,
        submit=None,
        *,
        submit_batch=None,
        permit: RegionPermit | None = None,
        region=None,
        control=None,
    ) -> None:
        if not isinstance(config, OperatorConfig):
            raise TypeError(f"config must be an OperatorConfig, got {type(config).__name__}")
        if submit is None and submit_batch is None:
            raise ValueError("give submit(record) or submit_batch(records)")
        self.config = config
        self.name = config.operator_name
        self.standalone = permit is None
        self.permit = permit if permit is not None else RegionPermit()
        if config.region_mode is RegionMode.OPERATOR_DRIVEN and region is not None and not hasattr(region, "request_drain"):
            raise TypeError("region_mode operator_driven needs a region object with request_drain(reason=...)")
        self._region = region if region is not None else _LoggingRegion()
        self._own_control = control is None
        if control is None:
            if config.coordinator:
                from coordinator.client import CoordinatorClient

                control = CoordinatorClient(config.coordinator, timeout=config.coordinator_timeout_s)
            else:
                control = LocalControl()
        self.control = control
        self.sm = StateMachine(self.name)
        self.offsets = OffsetManager()
        self.queue = BatchQueue(config.effective_queue_capacity)
        self._epoch = 0
        self._merged: tuple[int, dict] | None = None
        self._drained: dict | None = None
        self._members: list[str] = []
        self._failure: BaseException | None = None
        self._handler_lock = threading.RLock()  # see handlers._serialized
        self._drain_cond = threading.Condition()
        self._drain_count = 0
        self._cv_cache: dict[TopicPartition, int] = {}
        self._highwater_at = 0.0
        self.use_committed_first = self.standalone
        self.stats = OperatorMetrics(self)
        self.rebalancer = Rebalancer(self)
        decoder = None
        if config.key_deserializer is not None or config.value_deserializer is not None:
            decoder = Decoder(config.key_deserializer, config.value_deserializer, config.on_malformed)
        self.decoder = decoder
        self.events = EventThread(
            self.name,
            self._make_consumer,
            on_records=self._on_records,
            after_poll=self._after_poll,
            should_pause=lambda: self.queue.free() < config.max_poll_records,
            blocked=lambda: self.permit.blocked,
            held=lambda: self.rebalancer.held,
            joining=lambda: self.rebalancer.joining,
            on_failure=self._on_failure,
            max_poll_records=config.max_poll_records,
        )
        self.process = ProcessThread(
            self.name,
            queue=self.queue,
            permit=self.permit,
            offsets=self.offsets,
            epoch=lambda: self._epoch,
            submit=submit,
            submit_batch=submit_batch,
            decoder=decoder,
            trigger_count=config.trigger_count,
            on_trigger=self._on_trigger,
            on_failure=self._on_failure,
        )
        self._driver = None
        #: Set once register() answered: close() unregisters only then, so closing an
        #: operator that never started does not wait on an unreachable coordinator.
        self._registered = False

    # -- lifecycle ------------------------------------------------------------
    def start(self) -> ConsumerOperator:
        """1. register with the coordinator; 2. start the event thread (creates
        the consumer); 3. subscribe; 4. start the process thread; 5. poll."""
        cfg = self.config
        self._members = list(self.control.register(cfg.group_id, cfg.region_index, self.name))
        self._registered = True
        log.info("%s: registered in group %s (members %s)", self.name, cfg.group_id, self._members)
        self.events.start(START_TIMEOUT_S)

        def subscribe(consumer):
            listener = Listener(self.rebalancer)
            if cfg.pattern:
                consumer.subscribe(pattern=cfg.pattern, listener=listener)
            else:
                consumer.subscribe(topics=list(cfg.topics), listener=listener)
            self.sm.to(S.SUBSCRIBED, f"topics={list(cfg.topics)} pattern={cfg.pattern}")

        self.events.call(subscribe, START_TIMEOUT_S, "subscribe")
        self.process.start()
        self.events.set_polling(True, EVENT_TIMEOUT_S)
        if self.standalone:
            from cr_consumer.operator.standalone import StandaloneDriver

            self._driver = StandaloneDriver(self)
            self._driver.start()
        apply_gc_policy(cfg.gc_policy, self.name)
        return self

    def close(self) -> None:
        """Stop the driver, the process thread and the event thread (which
        closes the consumer: it leaves the group); unregister; close the client."""
        if self.sm.state is S.CLOSED:
            return
        self.sm.to(S.CLOSED, "close()")
        if self._driver is not None:
            self._driver.stop(CLOSE_JOIN_S)
        self.process.stop(CLOSE_JOIN_S)
        self.events.stop(CLOSE_JOIN_S)
        try:
            if self._registered and hasattr(self.control, "unregister"):
                self.control.unregister(self.config.group_id, self.name)
        except Exception:  # noqa: BLE001 - shutting down; the coordinator may be gone
            log.warning("%s: could not unregister from the coordinator", self.name, exc_info=True)
        if self._own_control:
            self.control.close()
        self.stats.unregister()
        release_gc_policy(self.config.gc_policy, self.name)

    def __enter__(self) -> ConsumerOperator:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def state(self) -> ClientState:
        return self.sm.state

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    # -- called by the threads ----------------------------------------------------
    def _make_consumer(self) -> KafkaConsumer:
        return KafkaConsumer(**self.config.kafka_config())

    def _on_records(self, consumer, records: dict) -> None:
        epoch = self._epoch  # read before the state: a revocation in between bumps it
        state = self.sm.state
        if state is S.CR_RESET_PENDING or state is S.CLOSED or state is S.FAILED:
            self.stats.n_dropped_reset_pending += sum(len(r) for r in records.values())
            return
        if state is not S.RECORDS_FETCHED:
            self.sm.to_if({S.SUBSCRIBED, S.RESET_COMPLETE}, S.RECORDS_FETCHED, "first records fetched")
        self.queue.put_many([Batch(epoch, tp, recs) for tp, recs in records.items()])

    def _after_poll(self, consumer) -> None:
        self.rebalancer.after_poll(consumer)
        now = time.monotonic()
        if now - self._highwater_at >= HIGHWATER_REFRESH_S:
            self._highwater_at = now
            # highwater() reads the last fetch response: no request to the broker
            self.stats.set_end_offsets({tp: consumer.highwater(tp) for tp in consumer.assignment()})

    def _on_trigger(self) -> None:
        """Operator-driven: trigger-count tuples submitted; ask for a drain and wait for it."""
        with self._drain_cond:
            before = self._drain_count
        reason = f"{self.name}: {self.config.trigger_count} tuples since the last drain"
        if self._driver is not None:
            self._driver.request_drain(reason)
        elif self._region.request_drain(reason=reason) is False:
            return  # no drain follows (the region resets or waits): do not wait the drain timeout for it
        with self._drain_cond:
            if not self._drain_cond.wait_for(
                lambda: self._drain_count > before or self.sm.state in (S.CLOSED, S.FAILED),
                self.config.drain_timeout_s,
            ):
                log.warning("%s: requested drain did not happen within %.0fs", self.name, self.config.drain_timeout_s)

    def _on_failure(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
        self.sm.to_if({S.INITIALIZED, S.SUBSCRIBED, S.RECORDS_FETCHED, S.CR_RESET_PENDING, S.RESET_COMPLETE},
                      S.FAILED, f"{type(exc).__name__}: {exc}")
        self.events.stop_polling_async()
        with self._drain_cond:
            self._drain_cond.notify_all()

    def _check_alive(self) -> None:
        if self._failure is not None:
            raise OperatorFailed(f"{self.name} failed: {self._failure!r}") from self._failure
        if self.sm.state is S.CLOSED:
            raise OperatorFailed(f"{self.name} is closed")

    # -- used by the rebalancer (event thread / IO thread) -----------------------------
    def clear_queued(self, reason: str) -> None:
        """New epoch; drop the queued batches."""
        self._epoch += 1
        n = self.queue.clear()
        if n:
            log.info("%s: dropped %d queued records (%s)", self.name, n, reason)

    def merged_offsets(self) -> dict | None:
        return self._merged[1] if self._merged is not None else None

    def control_variables(self) -> dict:
        cv = self.control.get_initial_offsets(self.config.group_id)
        out = {TopicPartition(t, p): int(o) for (t, p), o in cv.items()}
        self._cv_cache = {**self._cv_cache, **out}
        return out

    def save_control_variables(self, offsets: dict) -> dict:
        eff = self.control.put_initial_offsets(self.config.group_id, {(tp.topic, tp.partition): o for tp, o in offsets.items()})
        out = {TopicPartition(t, p): int(o) for (t, p), o in eff.items()}
        self._cv_cache = {**self._cv_cache, **out}
        return out

    def cached_control_variables(self) -> dict:
        """Control variables read or written before (they never change: first writer wins)."""
        return self._cv_cache

    def request_region_reset(self, reason: str) -> None:
        """After a revocation with fetched records: one reset per rebalance group-wide."""
        self.stats.n_reset_requests += 1
        if self.standalone:
            log.info("%s: standalone: the next assignment seeks to the committed offsets (%s)", self.name, reason)
            return
        try:
            first = not self.control.set_reset_pending(self.config.group_id, True)
        except Exception:  # noqa: BLE001 - a duplicate reset is harmless, a missing one is not
            log.exception("%s: cannot set reset-pending in the coordinator; requesting a reset anyway", self.name)
            first = True
        if first:
            log.info("%s: requesting a region reset (force): %s", self.name, reason)
            self._region.request_reset(force=True, reason=f"{self.name}: {reason}")
        else:
            log.info("%s: a reset is already pending in group %s (%s)", self.name, self.config.group_id, reason)

    # -- metrics ----------------------------------------------------------------
    def metrics(self) -> dict:
        """A snapshot of the operator's metrics (see metrics.py for the names)."""
        return self.stats.snapshot()

    @property
    def prometheus_registry(self):
        return self.stats.registry

    @staticmethod
    def _fmt(offsets: dict) -> str:
        return "{" + ", ".join(f"{tp.topic}[{tp.partition}]={o}" for tp, o in sorted(offsets.items())) + "}"


__all__ = ["ConsumerOperator", "DrainError", "OperatorFailed", "ResetError"]
