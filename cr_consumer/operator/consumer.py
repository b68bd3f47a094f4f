"""The consumer operator: one member of a Kafka consumer group in a consistent region.

Parts, each owned by the operator and given what it needs at construction:

* the event thread (event_thread.py) owns the Kafka client (a
  :class:`~cr_consumer.kafka.client.KafkaClient`: kafka-python or librdkafka,
  ``OperatorConfig.client``), polls and serves events; the rebalancer
  (rebalance.py) is its rebalance listener and seeks, to the seek targets
  (merged checkpoint offsets, control variables, start positions:
  seek_targets.py, control_plane.py);
* the record intake (record_intake.py) queues the polled records, stamped with
  the reset epoch; with ``crkafka.filter.aborted``, the source's own
  ``read_committed`` (``cr_consumer/kafka/kafka_python/aborted_records.py``)
  decides every polled record before it is queued, gives each batch its end,
  and seeks a partition back to its first record of a transaction still open;
* the process thread (process_thread.py) submits batches under the region
  permit; a bounded queue (message_queue.py) joins the two threads;
* the region handlers (handlers.py): drain, checkpoint, reset, called by the
  region runtime (or a test, or the standalone driver) through this class;
* the region requester (region_requester.py): a reset after a revocation, a
  drain at the trigger count, asked of the region;
* the metrics (metrics.py).

Standalone (no ``permit`` given): the operator makes its own permit and a
standalone driver (standalone_driver.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from coordinator.protocol.common.gc_policy import freeze_after_start, thaw_at_close
from cr_consumer.kafka.client import GroupMembership, KafkaClient, TopicPartition
from cr_consumer.kafka.factory import make_client
from cr_consumer.operator.config import OperatorConfig, RegionMode
from cr_consumer.operator.control_plane import ControlPlane, control_plane_for
from cr_consumer.operator.event_thread import EventThread, OperatorFailed
from cr_consumer.operator.handlers import EVENT_TIMEOUT_S, DrainSignal, RegionHandlers
from cr_consumer.operator.message_queue import BatchQueue
from cr_consumer.operator.metrics import MetricsSnapshot, OperatorMetrics, Readings
from cr_consumer.operator.offset_manager import OffsetManager
from cr_consumer.operator.process_thread import Decoder, ProcessThread, SubmitBatch, per_record
from cr_consumer.operator.rebalance import Rebalancer
from cr_consumer.operator.record_intake import RecordIntake, aborted_filter
from cr_consumer.operator.region import NoRegion, RegionPermit, RegionRequests
from cr_consumer.operator.region_requester import RegionRequester
from cr_consumer.operator.restore_hold import StateRestorer
from cr_consumer.operator.seek_targets import SeekTargets
from cr_consumer.operator.standalone_driver import StandaloneDriver
from cr_consumer.operator.states import ClientState, ClientStateMachine

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


class ConsumerOperator:
    """One source operator; see the module docstring for its threads and parts."""

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
        self._own_control = control is None
        self.control = control if control is not None else control_plane_for(config)
        self.sm = ClientStateMachine(self.name)
        self.offsets = OffsetManager()
        self.queue = BatchQueue(config.effective_queue_capacity)
        self.targets = SeekTargets(self.control, config.group_id)
        self._failure = None
        self._highwater_at = 0.0
        self._drains = DrainSignal()
        self.stats = OperatorMetrics(self.name, self.offsets, self._readings)
        self._driver: StandaloneDriver | None = None
        if self.standalone:
            self._driver = StandaloneDriver(
                self.name,
                mode=config.region_mode,
                commit_period_s=config.commit_period_s,
                permit=self.permit,
                drain=self.drain,
                resume_polling=self.resume_polling,
                state=lambda: self.sm.state,
                failed=lambda: self._failure is not None,
                joining=lambda: self.rebalancer.joining,
                on_failure=self._on_failure,
            )
        self.requester = RegionRequester(
            config,
            region=region if region is not None else NoRegion(),
            driver=self._driver,
            control=self.control,
            sm=self.sm,
            stats=self.stats,
            drains=self._drains,
        )
        decoder = None
        if config.key_deserializer is not None or config.value_deserializer is not None:
            decoder = Decoder(config.key_deserializer, config.value_deserializer, config.on_malformed)
        self.decoder = decoder
        #: The source's own filter of aborted records (``crkafka.filter.aborted``): event thread only.
        self._aborted = aborted_filter(config)
        self.intake = RecordIntake(self.name, queue=self.queue, sm=self.sm, stats=self.stats, aborted=self._aborted)
        self.events = EventThread(
            self.name,
            self._make_consumer,
            on_records=self.intake.on_records,
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
            new_epoch=self.intake.new_epoch,
            request_reset=self.requester.reset,
            standalone=self.standalone,
            restorer=restorer,
        )
        self.process = ProcessThread(
            self.name,
            queue=self.queue,
            permit=self.permit,
            offsets=self.offsets,
            epoch=lambda: self.intake.epoch,
            submit_batch=submit_batch,
            decoder=decoder,
            trigger_count=config.trigger_count,
            on_trigger=self.requester.drain_at_trigger,
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
            control=self.control,
            stats=self.stats,
            drains=self._drains,
            new_epoch=self.intake.new_epoch,
            check_alive=self._check_alive,
            standalone=self.standalone,
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

    def _after_poll(self, consumer: KafkaClient) -> None:
        self.rebalancer.after_poll(consumer)
        if self._cooperative:
            self.handlers.drain_commit.after_poll(consumer)
        now = time.monotonic()
        if now - self._highwater_at >= HIGHWATER_REFRESH_S:
            self._highwater_at = now
            # highwater() reads the last fetch response: no request to the broker
            self.stats.set_end_offsets({tp: consumer.highwater(tp) for tp in consumer.assignment()})

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
            "nClientSkips": self._aborted.skips if self._aborted is not None else 0,
            "nRestoringPartitions": len(self.rebalancer.restoring),
        }


__all__ = ["ConsumerOperator", "OperatorFailed"]
