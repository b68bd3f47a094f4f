"""The consumer operator: one member of a Kafka consumer group in a consistent region.

Parts, each owned by the operator and given what it needs at construction:

* the event thread (event_thread.py) owns the Kafka client (a
  :class:`~cr_consumer.kafka.client.KafkaClient`: kafka-python or librdkafka,
  ``OperatorConfig.client``), polls and serves events; the rebalancer
  (rebalance.py) is its rebalance listener and seeks, to the seek targets
  (merged checkpoint offsets, control variables: rebalance.py, control_plane.py);
* with ``crkafka.filter.aborted``, the source's own ``read_committed``
  (``cr_consumer/kafka/kafka_python/aborted_records.py``) decides every polled
  record on the event thread before it is queued, gives each batch its end, and
  seeks a partition back to its first record of a transaction still open;
* the process thread (process_thread.py) submits batches under the region
  permit; a bounded queue (message_queue.py) joins the two threads;
* the region handlers (handlers.py): drain, checkpoint, reset, called by the
  region runtime (or a test, or the standalone driver) through this class;
* the metrics (metrics.py).

Standalone (no ``permit`` given): the operator makes its own permit and a
:class:`StandaloneDriver`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from coordinator.protocol.common.gc_policy import freeze_after_start, thaw_at_close
from cr_consumer.kafka.client import GroupMembership, KafkaClient, KafkaRecord, TopicPartition
from cr_consumer.kafka.factory import make_client
from cr_consumer.operator.config import OperatorConfig, RegionMode
from cr_consumer.operator.control_plane import ControlPlane, LocalControl
from cr_consumer.operator.event_thread import EventThread, OperatorFailed
from cr_consumer.operator.handlers import EVENT_TIMEOUT_S, DrainSignal, RegionHandlers
from cr_consumer.operator.message_queue import Batch, BatchQueue
from cr_consumer.operator.metrics import MetricsSnapshot, OperatorMetrics, Readings
from cr_consumer.operator.offset_manager import OffsetManager
from cr_consumer.operator.process_thread import Decoder, ProcessThread, SubmitBatch, per_record
from cr_consumer.operator.rebalance import Rebalancer
from cr_consumer.operator.region import DrainError, NoRegion, RegionPermit, RegionRequests
from cr_consumer.operator.restore_hold import StateRestorer
from cr_consumer.operator.seek_targets import SeekTargets
from cr_consumer.operator.states import ClientState, ClientStateMachine

if TYPE_CHECKING:
    from cr_consumer.kafka.kafka_python.aborted_records import AbortedRecordFilter

log = logging.getLogger(__name__)
S = ClientState

#: Bound on creating the KafkaConsumer and subscribing (bad bootstrap address).
START_TIMEOUT_S = 30.0
#: Bound on stopping each thread at close.
CLOSE_JOIN_S = 10.0
#: Cooperative: how long close() lets a drain's deferred Kafka commit wait for
#: the group's rebalance to end (then the consumer closes without it; the
#: region's checkpoint holds the offsets). Short: the member runtime leaves the
#: region only after its source closed, so a cycle that starts meanwhile waits
#: for this member (a remove during a rebalance would stall the survivors).
CLOSE_COMMIT_WAIT_S = 2.0
#: How often the event thread refreshes the high-water marks for lag metrics.
HIGHWATER_REFRESH_S = 0.5


#: Bound on blocking the permit before a standalone drain, so a stuck submit
#: shows as an error in the log instead of a silent hang.
PERMIT_BLOCK_S = 60.0
#: Wait between checks in operator-driven mode (no period): bounds how late the
#: thread notices that the operator failed (a failure does not notify it).
IDLE_WAIT_S = 1.0


class StandaloneDriver:
    """The operator without a region runtime. A plain group consumer commits what
    it processed now and then; this thread does that with the operator's own
    handlers:

    1. every ``commit_period_s`` (periodic mode), or when the process thread
       reached the trigger count (operator-driven mode, :meth:`StandaloneDriver.request_drain`):
       a. block the permit (the in-flight batch finishes);
       b. ``drain()``: stop polling, one synchronous commit of the submitted offsets;
       c. resume polling (throttled) and unblock the permit.
       A failed drain is logged and retried at the next period (a rebalance makes
       the commit fail).
    2. A periodic commit is skipped while the group join is in progress (nothing
       is assigned, and the drain would interrupt the join's polls).

    Rebalances need no cycle here: the revocation clears the queue and the next
    assignment seeks every partition to its committed offset (else control
    variable, else start position), see rebalance.py. Records submitted after the
    last commit are submitted again: at-least-once, as with any group consumer.

    The thread ends on :meth:`StandaloneDriver.stop` (joined with a timeout); an
    exception in a cycle other than a failed drain is handed to ``on_failure``
    (fatal for the operator).
    """

    #: The reason of a drain asked for by the process thread, or None. Written
    #: by the process thread and this thread, under ``_cond``.
    _drain_reason: str | None
    #: Set by stop() (the closing thread), under ``_cond``.
    _stop: bool

    def __init__(
        self,
        name: str,
        *,
        mode: RegionMode,
        commit_period_s: float,
        permit: RegionPermit,
        drain: Callable[[], None],
        resume_polling: Callable[[], None],
        state: Callable[[], ClientState],
        failed: Callable[[], bool],
        joining: Callable[[], bool],
        on_failure: Callable[[BaseException], None],
    ) -> None:
        self.name = name
        self._periodic = mode is RegionMode.PERIODIC
        self._period = commit_period_s
        self._permit = permit
        self._drain = drain
        self._resume_polling = resume_polling
        self._state = state
        self._failed = failed
        self._joining = joining
        self._on_failure = on_failure
        self._cond = threading.Condition()
        self._stop = False
        self._drain_reason = None
        self._thread = threading.Thread(target=self._run, name=f"cr-standalone-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def request_drain(self, reason: str) -> None:
        with self._cond:
            self._drain_reason = reason
            self._cond.notify_all()

    def _run(self) -> None:
        next_commit = time.monotonic() + self._period
        try:
            while True:
                with self._cond:
                    wait = max(0.0, next_commit - time.monotonic()) if self._periodic else IDLE_WAIT_S
                    self._cond.wait_for(lambda: self._stop or self._drain_reason is not None, wait)
                    if self._stop:
                        return
                    drain, self._drain_reason = self._drain_reason, None
                if self._failed():
                    return
                if drain is not None or (self._periodic and time.monotonic() >= next_commit):
                    next_commit = time.monotonic() + self._period
                    if self._joining() and drain is None:
                        continue  # nothing assigned, nothing to commit; do not interrupt the join's polls
                    self._cycle()
        except Exception as exc:  # fatal for the operator, reported there
            log.exception("%s: standalone driver failed", self.name)
            self._on_failure(exc)

    def _cycle(self) -> None:
        if not self._permit.block(PERMIT_BLOCK_S):
            self._permit.unblock()
            raise TimeoutError(f"{self.name}: the process thread kept the permit for {PERMIT_BLOCK_S}s")
        try:
            if self._state() not in (ClientState.CLOSED, ClientState.FAILED):
                try:
                    self._drain()
                except DrainError as exc:
                    log.warning("%s: standalone drain failed (will retry): %s", self.name, exc)
                self._resume_polling()
        finally:
            self._permit.unblock()


class ConsumerOperator:
    """One source operator; see the module docstring for its threads and parts."""

    #: Reset epoch of the batches queued now: bumped (never lowered) by a
    #: revocation (Kafka's IO thread) and a reset (the handler caller), read by
    #: the event thread (stamping batches) and the process thread (dropping
    #: older ones). No lock: any bump makes older batches stale, and two racing
    #: bumps still leave a value above every stamped batch.
    _epoch: int
    #: The first fatal error; written once by whichever thread fails first
    #: (event, process, standalone driver), read by every caller.
    _failure: BaseException | None
    #: Event thread only: when the high-water marks were last refreshed.
    _highwater_at: float

    def __init__(
        self,
        config: OperatorConfig,
        submit: Callable[[Any], None] | None = None,
        *,
        submit_batch: SubmitBatch | None = None,
        permit: RegionPermit | None = None,
        region: RegionRequests | None = None,
        control: ControlPlane | None = None,
        restorer: StateRestorer | None = None,
    ) -> None:
        if not isinstance(config, OperatorConfig):
            raise TypeError(f"config must be an OperatorConfig, got {type(config).__name__}")
        if submit_batch is None:
            if submit is None:
                raise ValueError("give submit(record) or submit_batch(records)")
            submit_batch = per_record(submit)
        self.config = config
        self.name = config.operator_name
        #: Incremental rebalancing (config.cooperative, parsed once: read after every poll).
        self._cooperative = config.cooperative
        self.standalone = permit is None
        self.permit = permit if permit is not None else RegionPermit()
        if (
            config.region_mode is RegionMode.OPERATOR_DRIVEN
            and region is not None
            and not hasattr(region, "request_drain")
        ):
            raise TypeError("region_mode operator_driven needs a region object with request_drain(reason=...)")
        self._region: RegionRequests = region if region is not None else NoRegion()
        self._own_control = control is None
        if control is None:
            if config.coordinator:
                from coordinator.client import CoordinatorClient

                control = CoordinatorClient(config.coordinator, timeout=config.coordinator_timeout_s)
            else:
                control = LocalControl()
        self.control: ControlPlane = control
        self.sm = ClientStateMachine(self.name)
        self.offsets = OffsetManager()
        self.queue = BatchQueue(config.effective_queue_capacity)
        self.targets = SeekTargets(control, config.group_id)
        self._epoch = 0
        self._failure = None
        self._highwater_at = 0.0
        self._drains = DrainSignal()
        self.stats = OperatorMetrics(self.name, self.offsets, self._readings)
        decoder = None
        if config.key_deserializer is not None or config.value_deserializer is not None:
            decoder = Decoder(config.key_deserializer, config.value_deserializer, config.on_malformed)
        self.decoder = decoder
        #: The source's own filter of aborted records (``crkafka.filter.aborted``): event thread only.
        self._aborted: AbortedRecordFilter | None = None
        if config.filter_aborted:
            from cr_consumer.kafka.kafka_python.aborted_records import for_consumer  # lazily: kafka is heavy

            self._aborted = for_consumer(
                config.bootstrap_servers, config.client_properties(), f"cr-{self.name}-markers"
            )
        self.events = EventThread(
            self.name,
            self._make_consumer,
            on_records=self._on_records,
            after_poll=self._after_poll,
            should_pause=lambda: self.queue.free() < config.max_poll_records,
            may_resume=lambda: self.queue.free() >= max(config.max_poll_records, config.effective_queue_capacity // 2),
            blocked=lambda: self.permit.blocked,
            held=lambda: self.rebalancer.held | self.rebalancer.restoring,
            joining=lambda: self.rebalancer.joining,
            on_failure=self._on_failure,
            max_poll_records=config.max_poll_records,
            on_close=self._aborted.close if self._aborted is not None else None,
        )
        self.rebalancer = Rebalancer(
            self.name,
            config,
            sm=self.sm,
            offsets=self.offsets,
            targets=self.targets,
            events=self.events,
            new_epoch=self._new_epoch,
            request_reset=self._request_region_reset,
            standalone=self.standalone,
            restorer=restorer,
        )
        self.process = ProcessThread(
            self.name,
            queue=self.queue,
            permit=self.permit,
            offsets=self.offsets,
            epoch=lambda: self._epoch,
            submit_batch=submit_batch,
            decoder=decoder,
            trigger_count=config.trigger_count,
            on_trigger=self._on_trigger,
            on_failure=self._on_failure,
        )
        self.handlers = RegionHandlers(
            config,
            sm=self.sm,
            permit=self.permit,
            events=self.events,
            process=self.process,
            offsets=self.offsets,
            rebalancer=self.rebalancer,
            targets=self.targets,
            control=control,
            stats=self.stats,
            drains=self._drains,
            new_epoch=self._new_epoch,
            check_alive=self._check_alive,
            standalone=self.standalone,
        )
        self._driver: StandaloneDriver | None = None
        if self.standalone:
            self._driver = StandaloneDriver(
                self.name,
                mode=config.region_mode,
                commit_period_s=config.commit_period_s,
                permit=self.permit,
                drain=self.handlers.drain,
                resume_polling=self.handlers.resume_polling,
                state=lambda: self.sm.state,
                failed=lambda: self._failure is not None,
                joining=lambda: self.rebalancer.joining,
                on_failure=self._on_failure,
            )
        #: Set once register() answered: close() unregisters only then, so closing an
        #: operator that never started does not wait on an unreachable coordinator.
        self._registered = False

    # -- lifecycle ------------------------------------------------------------
    def start(self) -> ConsumerOperator:
        """1. register with the coordinator; 2. start the event thread (creates
        the consumer); 3. subscribe; 4. start the process thread; 5. poll;
        6. standalone: start the driver."""
        cfg = self.config
        members = list(self.control.register(cfg.group_id, cfg.region_index, self.name))
        self.handlers.set_members(members)
        self._registered = True
        log.info(
            "%s: registered in group %s (members %s, Kafka client %s)",
            self.name,
            cfg.group_id,
            members,
            cfg.client.value,
        )
        self.events.start(START_TIMEOUT_S)

        def subscribe(consumer: KafkaClient) -> None:
            if cfg.pattern:
                consumer.subscribe(pattern=cfg.pattern, listener=self.rebalancer)
            else:
                consumer.subscribe(topics=list(cfg.topics), listener=self.rebalancer)
            self.sm.to(S.SUBSCRIBED, f"topics={list(cfg.topics)} pattern={cfg.pattern}")

        self.events.call(subscribe, START_TIMEOUT_S, "subscribe")
        self.process.start()
        self.events.set_polling(True, EVENT_TIMEOUT_S)
        if self._driver is not None:
            self._driver.start()
        freeze_after_start(cfg.gc_policy, self.name)
        return self

    def close(self) -> None:
        """Stop the driver, the process thread; cooperative: finish a deferred
        Kafka commit (bounded, handlers.drain_commit.at_close); stop the event
        thread (which closes the consumer: it leaves the group); unregister;
        close the client."""
        if self.sm.state is S.CLOSED:
            return
        self.sm.to(S.CLOSED, "close()")
        if self._driver is not None:
            self._driver.stop(CLOSE_JOIN_S)
        self.process.stop(CLOSE_JOIN_S)
        if self.config.cooperative and self.handlers.drain_commit.pending and self._failure is None:
            try:
                self.events.call(
                    lambda c: self.handlers.drain_commit.at_close(c, CLOSE_COMMIT_WAIT_S),
                    CLOSE_COMMIT_WAIT_S + EVENT_TIMEOUT_S,
                    "deferred commit at close",
                )
            except Exception:  # closing goes on; the checkpoint holds the offsets
                log.warning("%s: the deferred Kafka commit at close failed", self.name, exc_info=True)
        self.events.stop(CLOSE_JOIN_S)
        try:
            if self._registered:
                self.control.unregister(self.config.group_id, self.name)
        except Exception:  # shutting down; the coordinator may be gone
            log.warning("%s: could not unregister from the coordinator", self.name, exc_info=True)
        if self._own_control:
            self.control.close()
        self.stats.unregister()
        thaw_at_close(self.config.gc_policy, self.name)

    def __enter__(self) -> ConsumerOperator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def state(self) -> ClientState:
        return self.sm.state

    @property
    def failure(self) -> BaseException | None:
        return self._failure

    # -- the region handlers (StateHandler, region.py; steps in handlers.py) -------
    def drain(self) -> None:
        self.handlers.drain()

    def checkpoint(self, seq: int) -> bytes:
        return self.handlers.checkpoint(seq)

    def reset(self, seq: int, data: bytes | None, attempt: int = 0) -> None:
        self.handlers.reset(seq, data, attempt)

    def reset_to_initial_state(self, attempt: int = 0) -> None:
        self.handlers.reset_to_initial_state(attempt)

    def retire_checkpoint(self, seq: int) -> None:
        self.handlers.retire_checkpoint(seq)

    def resume_polling(self) -> None:
        self.handlers.resume_polling()

    def set_consistent_offsets(self, seq: int, offsets: dict[TopicPartition, int]) -> None:
        """The runtime's last consistent checkpoint ``seq`` and its source offsets:
        a partition assigned later (without a reset) starts there, not at the
        offsets of the last reset (which retiring older checkpoints drops)."""
        self.targets.set_merged(seq, offsets)

    # -- read by the member's control channel (any thread) -------------------------
    @property
    def group_metadata(self) -> GroupMembership | None:
        """The client's group membership as of the last poll (None before the
        client exists); a snapshot the event thread takes, so reading it
        never touches the client."""
        return self.events.group

    @property
    def cooperative(self) -> bool:
        """Incremental rebalancing (the cooperative-sticky assignor, OperatorConfig.cooperative)."""
        return self.config.cooperative

    @property
    def joining(self) -> bool:
        """True from subscribe or a revocation until the next assignment."""
        return self.rebalancer.joining

    def request_rejoin(self) -> bool:
        """Make the consumer rejoin its group at its next poll (queued for the
        event thread); False before the consumer exists."""
        return self.events.request_rejoin()

    # -- called by the threads ----------------------------------------------------
    def _make_consumer(self) -> KafkaClient:
        return make_client(self.config.client, self.config.client_properties())

    def _on_records(self, consumer: KafkaClient, records: dict[TopicPartition, list[KafkaRecord]]) -> None:
        epoch = self._epoch  # read before the state: a revocation in between bumps it
        state = self.sm.state
        if state is S.CR_RESET_PENDING or state is S.CLOSED or state is S.FAILED:
            self.stats.dropped_reset_pending(sum(len(r) for r in records.values()))
            return
        if state is not S.RECORDS_FETCHED:
            self.sm.to_if({S.SUBSCRIBED, S.RESET_COMPLETE}, S.RECORDS_FETCHED, "first records fetched")
        if self._aborted is None:
            self.queue.put_many([Batch(epoch, tp, recs) for tp, recs in records.items()])
            return
        filtered = self._aborted.filter(records, consumer.assignment())
        for tp, f in filtered.items():
            if f.rewind is not None:  # records of a transaction still open: read again later
                consumer.seek(tp, f.rewind)
        self.queue.put_many([Batch(epoch, tp, f.records, f.end) for tp, f in filtered.items() if f.end is not None])

    def _after_poll(self, consumer: KafkaClient) -> None:
        self.rebalancer.after_poll(consumer)
        if self._cooperative:
            self.handlers.drain_commit.after_poll(consumer)
        now = time.monotonic()
        if now - self._highwater_at >= HIGHWATER_REFRESH_S:
            self._highwater_at = now
            # highwater() reads the last fetch response: no request to the broker
            self.stats.set_end_offsets({tp: consumer.highwater(tp) for tp in consumer.assignment()})

    def _on_trigger(self) -> None:
        """Operator-driven: trigger-count tuples submitted; ask for a drain and wait for it."""
        before = self._drains.count()
        reason = f"{self.name}: {self.config.trigger_count} tuples since the last drain"
        if self._driver is not None:
            self._driver.request_drain(reason)
        elif self._region.request_drain(reason=reason) is False:
            return  # no drain follows (the region resets or waits): do not wait the drain timeout for it
        if not self._drains.wait_after(
            before, self.config.drain_timeout_s, lambda: self.sm.state in (S.CLOSED, S.FAILED)
        ):
            log.warning("%s: requested drain did not happen within %.0fs", self.name, self.config.drain_timeout_s)

    def _on_failure(self, exc: BaseException) -> None:
        if self._failure is None:
            self._failure = exc
        self.sm.to_if(
            {S.INITIALIZED, S.SUBSCRIBED, S.RECORDS_FETCHED, S.CR_RESET_PENDING, S.RESET_COMPLETE},
            S.FAILED,
            f"{type(exc).__name__}: {exc}",
        )
        self.events.stop_polling_async()
        self._drains.wake()

    def _check_alive(self) -> None:
        if self._failure is not None:
            raise OperatorFailed(f"{self.name} failed: {self._failure!r}") from self._failure
        if self.sm.state is S.CLOSED:
            raise OperatorFailed(f"{self.name} is closed")

    def _new_epoch(self, reason: str) -> None:
        """New reset epoch: drop the queued batches (and, in the process thread,
        any older batch it still holds)."""
        self._epoch += 1
        n = self.queue.clear()
        if n:
            log.info("%s: dropped %d queued records (%s)", self.name, n, reason)

    def _request_region_reset(self, reason: str) -> None:
        """Event thread, after a revocation with fetched records: one reset per
        rebalance group-wide (the first member to set reset-pending asks)."""
        self.stats.reset_requested()
        if self.standalone:
            log.info("%s: standalone: the next assignment seeks to the committed offsets (%s)", self.name, reason)
            return
        try:
            first = not self.control.set_reset_pending(self.config.group_id, True)
        except Exception:  # a duplicate reset is harmless, a missing one is not
            log.exception("%s: cannot set reset-pending in the coordinator; requesting a reset anyway", self.name)
            first = True
        if first:
            log.info("%s: requesting a region reset (force): %s", self.name, reason)
            self._region.request_reset(force=True, reason=f"{self.name}: {reason}")
        else:
            log.info("%s: a reset is already pending in group %s (%s)", self.name, self.config.group_id, reason)

    # -- metrics ----------------------------------------------------------------
    def metrics(self) -> MetricsSnapshot:
        """A snapshot of the operator's metrics (see metrics.py for the names)."""
        return self.stats.snapshot()

    @property
    def prometheus_registry(self) -> CollectorRegistry:
        return self.stats.registry

    def _readings(self) -> Readings:
        """The metrics the threads hold, for the snapshot."""
        decoder = self.decoder
        return {
            "state": self.sm.state.value,
            "nPartitionRebalances": self.rebalancer.n_partition_rebalances,
            "nPendingMessages": len(self.queue),
            "nQueueFullPause": self.events.n_queue_full_pause,
            "isPaused": int(self.events.paused),
            "nDroppedMalformedMessages": decoder.n_dropped if decoder is not None else 0,
            "nSubmittedMessages": self.process.n_submitted,
            "nDroppedStale": self.process.n_dropped_stale,
            "nDroppedAborted": self._aborted.dropped if self._aborted is not None else 0,
            "nHeldOpen": self._aborted.holds if self._aborted is not None else 0,
            "nRestoringPartitions": len(self.rebalancer.restoring),
        }


__all__ = ["ConsumerOperator", "OperatorFailed", "StandaloneDriver"]
