"""Rebalance handling: the listener and the seeks it defers to the event thread.
Where each partition is seeked (merged checkpoint offsets, control variables,
start positions): ``seek_targets.py``.

The Kafka client calls the listener during its poll, possibly on the
library's own thread (kafka-python's IO thread), where blocking client calls
are not allowed. So the listener only changes in-memory state (and seeks or
pauses: client state, no broker round trip);
everything that needs the broker or the coordinator runs on the event thread
right after the poll that triggered it (:meth:`Rebalancer.after_poll`).

Revocation (eager: every owned partition, before every rebalance):

1. bump the reset epoch and clear the message queue (always);
2. if records were fetched since subscribe or the last reset (state
   RECORDS_FETCHED), or partitions were lost: enter CR_RESET_PENDING (stop
   fetching: the partitions assigned next stay paused until the reset seeks
   them; the event thread keeps calling poll, because kafka-python completes
   the group join only inside poll), and on the event thread set the group's reset-pending flag in the
   coordinator; if this member set it first, ask the region for a reset in
   force mode (one reset per rebalance across the group);
3. otherwise nothing more.

Assignment:

1. update the offset manager's assignment and nPartitionRebalances; in
   SUBSCRIBED or RESET_COMPLETE seek at once every partition whose target is
   known in memory (merged checkpoint offset, cached control variable); pause
   the others (held) so nothing is fetched before they are seeked;
2. on the event thread, in SUBSCRIBED or RESET_COMPLETE: seek each held partition to
   its merged checkpoint offset (kept from the last reset until retired), else
   its control variable, else its start position (then saved as the control
   variable, first writer wins, using the effective value): the configured
   one at the job's first start (then saved for every subscribed partition),
   its earliest offset for a partition that appeared later
   (``seek_targets.plan_start``); read positions
   back into the offset manager; resume the partitions;
3. in CR_RESET_PENDING: no seek: the reset will seek and resume them.
   Standalone (no region): the seek above is done anyway, committed offsets
   first, and is the reset (RESET_COMPLETE): at-least-once, like any plain
   group consumer.

Cooperative (incremental) rebalancing (``config.cooperative``, the
cooperative-sticky assignor): kafka-python revokes only the partitions that
move, after the rebalance's SyncGroup, and names only the partitions added in
``on_partitions_assigned``; the others stay assigned and keep fetching
through the whole rebalance. So:

1. revocation: the revoked partitions leave the offset manager and the held
   set at once (no drain or checkpoint of this member reports or commits
   them again; the process thread's offset updates for them are ignored);
   ``joining`` is not set (this member is not waiting for an assignment:
   it keeps its other partitions). If records were fetched (RECORDS_FETCHED)
   or partitions were lost, the same as eager step 2: a new epoch (the queue
   may hold the revoked partitions' records), CR_RESET_PENDING and one forced
   region reset, because this member's pending output may hold records of a
   revoked partition beyond the last consistent checkpoint, which its next
   owner re-reads from there. Otherwise (nothing fetched since the last reset)
   the queue is empty and nothing of the revoked partitions is pending: no
   reset.
2. assignment: the added partitions join the ones kept (the offset manager's
   assignment and the held set are extended, not replaced); they are seeked
   as in the eager steps 1-3, to the last consistent checkpoint's offsets the
   runtime announced (``set_consistent_offsets``): nobody processed them
   since, or a reset follows that rewinds them (step 1).

State restore (``restore_hold.py``): a partition seeked after an assignment (in the listener or
in step 2) or by a reset is held while the pipeline restores its state; the member's other
partitions flow meanwhile. A revoked partition leaves the hold.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Mapping
from typing import Protocol

from coordinator.protocol.common.partitions import by_label
from cr_consumer.kafka.client import KafkaClient, TopicPartition
from cr_consumer.operator.config import OperatorConfig
from cr_consumer.operator.offset_manager import OffsetManager
from cr_consumer.operator.restore_hold import RestoreHold, StateRestorer
from cr_consumer.operator.seek_targets import LOOKUP_TIMEOUT_MS, SeekTargets, plan_start, start_offsets
from cr_consumer.operator.states import ClientState, ClientStateMachine

log = logging.getLogger(__name__)

S = ClientState
#: Bound on reading a position back after a seek (it may need a broker round trip).
POSITION_TIMEOUT_MS = 15000


class PartitionGate(Protocol):
    """The part of the event thread the rebalancer uses (``EventThread``)."""

    @property
    def consumer(self) -> KafkaClient | None:
        """The Kafka client (None before it exists)."""
        ...

    def pause_partitions(self, partitions: Collection[TopicPartition]) -> None:
        """Hold ``partitions`` (the listener, during the event thread's poll)."""
        ...

    def resume_partitions(self, consumer: KafkaClient, partitions: Collection[TopicPartition]) -> None:
        """Resume ``partitions`` unless the backpressure holds them (event thread)."""
        ...


class Rebalancer:
    """The client's :class:`~cr_consumer.kafka.client.RebalanceListener`, its state
    and the deferred seeks of one operator.

    ``new_epoch(reason)`` drops the queued batches (a new reset epoch);
    ``request_reset(reason)`` asks the region for a reset (once per rebalance,
    see the module docstring); ``standalone``: no region runtime, so the seek
    after an assignment is the reset, committed offsets first.
    """

    #: Partitions assigned but not yet seeked (paused meanwhile). Written under
    #: ``_lock`` on Kafka's IO thread (replaced at an assignment) and on the
    #: event thread (shrunk after the seek, emptied by a reset); read without
    #: the lock by the event thread's backpressure, on the thread that shrinks
    #: it, so it sees either the set before or after a replacement.
    held: set[TopicPartition]
    #: True from subscribe/revocation until the next assignment (the event
    #: thread polls longer then, see event_thread.JOIN_POLL_TIMEOUT_MS).
    #: Written on Kafka's IO thread; read by the event thread and the member's
    #: heartbeat. A plain bool: no lock.
    joining: bool
    #: Assignments received; written on Kafka's IO thread under ``_lock``.
    n_partition_rebalances: int

    def __init__(
        self,
        name: str,
        config: OperatorConfig,
        *,
        sm: ClientStateMachine,
        offsets: OffsetManager,
        targets: SeekTargets,
        events: PartitionGate,
        new_epoch: Callable[[str], None],
        request_reset: Callable[[str], None],
        standalone: bool,
        restorer: StateRestorer | None = None,
    ) -> None:
        self.name = name
        self._config = config
        self._sm = sm
        self._offsets = offsets
        self._targets = targets
        self._events = events
        self._new_epoch = new_epoch
        self._request_reset = request_reset
        self._standalone = standalone
        self._restore = RestoreHold(name, restorer)
        self._cooperative = config.cooperative
        self._lock = threading.Lock()
        self.held = set()
        self._assign_pending = False
        self._reset_reason: str | None = None
        self.n_partition_rebalances = 0
        self.joining = True

    # -- IO thread ----------------------------------------------------------
    def on_lost(self, tps: Collection[TopicPartition]) -> None:
        self.on_revoked(tps, lost=True)

    def on_revoked(self, tps: Collection[TopicPartition], *, lost: bool = False) -> None:
        state = self._sm.state
        if state in (S.INITIALIZED, S.CLOSED, S.FAILED):
            return
        need = lost or state is S.RECORDS_FETCHED
        if self._cooperative:
            gone = set(tps)
            self._offsets.set_assignment(tp for tp in self._offsets.assigned() if tp not in gone)
            with self._lock:
                self.held = self.held - gone
            self._restore.revoked(gone)
            if need:
                self._new_epoch("partitions lost" if lost else "partitions revoked")
        else:
            self.joining = True
            self._restore.revoked(tps)
            self._new_epoch("partitions lost" if lost else "partitions revoked")
        if not need:
            log.info(
                "%s: revocation of %d partitions ignored (state %s: nothing fetched)", self.name, len(tps), state.value
            )
            return
        self._sm.to_if(
            {S.SUBSCRIBED, S.RECORDS_FETCHED, S.RESET_COMPLETE, S.CR_RESET_PENDING},
            S.CR_RESET_PENDING,
            "partitions lost" if lost else "partitions revoked after records were fetched",
        )
        # Polling goes on: kafka-python completes the group join only inside
        # poll(). Nothing is fetched meanwhile: eager revocation took every
        # partition, and new ones arrive paused (held).
        with self._lock:
            self._reset_reason = f"{'lost' if lost else 'revoked'} {len(tps)} partitions"

    def on_assigned(self, partitions: Collection[TopicPartition]) -> None:
        tps = set(partitions)
        # Cooperative: ``tps`` are only the added partitions; the kept ones stay.
        self._offsets.set_assignment(set(self._offsets.assigned()) | tps if self._cooperative else tps)
        # Fast path: a target known in memory (merged checkpoint, cached
        # control variable) is seeked right here (seek is pure client state),
        # so fetching starts in this very poll; the rest is held (paused) and
        # seeked on the event thread after the poll.
        # Standalone: committed offsets come first, and they need the broker.
        seek_now = not self._standalone and self._sm.state in (S.SUBSCRIBED, S.RESET_COMPLETE)
        fast = self._targets.known(tps) if seek_now else {}
        consumer = self._events.consumer
        if consumer is not None:  # the listener runs inside the client's poll: it exists
            for tp, off in fast.items():
                consumer.seek(tp, off)
            self.hold_for_restore(consumer, fast.keys())  # starting a restore is pure memory too
        self._offsets.set_many(fast)
        held = tps - fast.keys()
        self._events.pause_partitions(held)
        with self._lock:
            self.n_partition_rebalances += 1
            self.held = self.held | held if self._cooperative else held
            self._assign_pending = bool(self.held)
        self.joining = False
        log.info("%s: assigned %s (seeked at once: %s)", self.name, sorted(tps), by_label(fast))

    # -- event thread ---------------------------------------------------------
    def after_poll(self, consumer: KafkaClient) -> None:
        with self._lock:
            reason, self._reset_reason = self._reset_reason, None
            assign = self._assign_pending
        if reason is not None:
            self._request_reset(reason)
        restored = self._restore.finished()
        if restored:
            self._events.resume_partitions(consumer, restored & consumer.assignment())
        if assign:
            state = self._sm.state
            if state is S.CR_RESET_PENDING and not self._standalone:
                with self._lock:
                    self._assign_pending = False
                return
            if state in (S.CLOSED, S.FAILED, S.INITIALIZED):
                return
            with self._lock:
                held = set(self.held)
                self._assign_pending = False
            self.seek(consumer, held & consumer.assignment(), merged=self._targets.merged())
            if state is S.CR_RESET_PENDING:  # standalone: the seek (committed offsets first) is the reset
                self._sm.to_if({S.CR_RESET_PENDING}, S.RESET_COMPLETE, "standalone: seeked after the rebalance")
            restoring = self.hold_for_restore(consumer, held & consumer.assignment())
            with self._lock:
                self.held -= held
            self._events.resume_partitions(consumer, held - restoring)

    @property
    def restoring(self) -> frozenset[TopicPartition]:
        """The partitions held for their state's restore (``restore_hold.py``)."""
        return self._restore.held

    def hold_for_restore(self, consumer: KafkaClient, tps: Collection[TopicPartition]) -> set[TopicPartition]:
        """Start restoring the state of the seeked ``tps`` and keep paused those whose restore is
        not finished; returns them (the caller resumes the others)."""
        return self._restore.hold(consumer, tps)

    def seek(
        self,
        consumer: KafkaClient,
        tps: Collection[TopicPartition],
        *,
        merged: Mapping[TopicPartition, int] | None,
        initial_only: bool = False,
    ) -> dict[TopicPartition, int]:
        """Seek ``tps``: merged offset, else control variable, else start position.

        Returns {tp: position read back}; also stores them in the offset manager.
        """
        targets: dict[TopicPartition, int] = {}
        if merged and not initial_only:
            targets.update({tp: merged[tp] for tp in tps if tp in merged})
        missing = [tp for tp in tps if tp not in targets]
        if missing and self._standalone and not initial_only:
            for tp, c in consumer.committed(missing, POSITION_TIMEOUT_MS).items():
                if c is not None:
                    targets[tp] = c
            missing = [tp for tp in missing if tp not in targets]
        if missing:
            cv = self._targets.control_variables()
            targets.update({tp: cv[tp] for tp in missing if tp in cv})
            missing = [tp for tp in missing if tp not in targets]
            if missing:
                group_started = bool(cv)
                subscribed = set() if group_started else consumer.subscribed_partitions(LOOKUP_TIMEOUT_MS)
                plan = plan_start(missing, group_started=group_started, subscribed=subscribed)
                effective = self._targets.save_control_variables(start_offsets(consumer, self._config, plan))
                targets.update({tp: effective[tp] for tp in missing})
        for tp, off in targets.items():
            consumer.seek(tp, off)
        positions = {tp: consumer.position(tp, POSITION_TIMEOUT_MS) for tp in targets}
        self._offsets.set_many(positions)
        log.info("%s: seeked %s", self.name, by_label(positions))
        return positions

    def clear_held(self) -> set[TopicPartition]:
        """A reset seeks every partition: nothing stays held, for a seek or a restore (the
        reset drops the restores; ``hold_for_restore`` after its seeks holds them again)."""
        with self._lock:
            held, self.held = self.held, set()
            self._assign_pending = False
        self._restore.clear()
        return held


__all__ = ["PartitionGate", "Rebalancer"]
