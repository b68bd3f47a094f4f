"""The region handlers of the consumer operator: drain, checkpoint, reset.

:class:`RegionHandlers` is owned by ``ConsumerOperator``, which forwards the
``StateHandler`` methods (region.py) to it. The region runtime (or a test, or the standalone driver) calls these with the
region permit held for the whole drain/checkpoint/reset (``permit.block()``);
``drain`` and ``reset`` block it themselves too (idempotent) to wait for the
in-flight batch, and whoever runs the cycle unblocks it at RESUME. Each
method's steps are numbered in its docstring. A handler that cannot do its
job raises (DrainError, ResetError, ContinuityError: ``region.py``;
OperatorFailed): the runtime then resets the region, or retries the reset.

The drain's Kafka commit and its deferral under cooperative rebalancing:
``drain_commit.py``; the count of completed drains a trigger waits for:
:class:`DrainSignal`.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from coordinator.protocol.common.partitions import offsets_text
from cr_consumer.kafka.client import KafkaClient, TopicPartition
from cr_consumer.operator.checkpoint import OperatorCheckpoint
from cr_consumer.operator.config import OperatorConfig
from cr_consumer.operator.control_plane import ControlPlane
from cr_consumer.operator.drain_commit import COMMIT_TIMEOUT_S, DrainCommit
from cr_consumer.operator.event_thread import EventThread
from cr_consumer.operator.metrics import OperatorMetrics
from cr_consumer.operator.offset_manager import Interval, OffsetManager
from cr_consumer.operator.process_thread import ProcessThread
from cr_consumer.operator.rebalance import Rebalancer
from cr_consumer.operator.region import ContinuityError, DrainError, RegionPermit, ResetError
from cr_consumer.operator.seek_targets import SeekTargets
from cr_consumer.operator.states import ClientState, ClientStateMachine

log = logging.getLogger(__name__)
S = ClientState

#: The drain's commit ends this long before the drain's deadline (at most a
#: fifth of the drain timeout), so a failing commit reports its own error
#: (the offsets and the cause) instead of the waiter giving up a moment earlier
#: with a bare "did not finish in time".
COMMIT_MARGIN_S = 0.5
#: Bound on a stop/start-polling round trip to the event thread (at most one
#: poll plus queued events): a wedged event thread fails the handler instead
#: of hanging it.
EVENT_TIMEOUT_S = 10.0


P = ParamSpec("P")
R = TypeVar("R")


def _serialized(method: Callable[Concatenate[RegionHandlers, P], R]) -> Callable[Concatenate[RegionHandlers, P], R]:
    """Run the handler under the handlers' lock (see RegionHandlers)."""

    @functools.wraps(method)
    def wrapper(self: RegionHandlers, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._lock:
            return method(self, *args, **kwargs)

    return wrapper


class RegionHandlers:
    """drain, checkpoint, reset, reset_to_initial_state, retire_checkpoint.

    One handler at a time per operator: two resets (or a drain and a reset)
    called concurrently by a runtime run one after the other, never
    interleaved (``_lock``). ``new_epoch(reason)`` drops the queued batches;
    ``check_alive()`` raises OperatorFailed once the operator failed or closed;
    ``standalone``: no region runtime (no reset-pending flag to clear).
    """

    #: The group's registered members: written by set_members() (the operator's
    #: start()) and checkpoint(); read by reset() (how many contributions a
    #: merge waits for). Handler caller threads, under ``_lock``.
    _members: list[str]
    #: The intervals (start, offset) whose offsets the last successful drain
    #: committed, for the checkpoint that follows; None after a failed drain or
    #: a reset. Handler threads, ``_lock``.
    _drained: dict[TopicPartition, Interval] | None

    def __init__(
        self,
        config: OperatorConfig,
        *,
        sm: ClientStateMachine,
        permit: RegionPermit,
        events: EventThread,
        process: ProcessThread,
        offsets: OffsetManager,
        rebalancer: Rebalancer,
        targets: SeekTargets,
        control: ControlPlane,
        stats: OperatorMetrics,
        drains: DrainSignal,
        new_epoch: Callable[[str], None],
        check_alive: Callable[[], None],
        standalone: bool,
    ) -> None:
        self.name = config.operator_name
        self.config = config
        self._sm = sm
        self._permit = permit
        self._events = events
        self._process = process
        self._offsets = offsets
        self._rebalancer = rebalancer
        self._targets = targets
        self._control = control
        self._stats = stats
        self._drains = drains
        self._new_epoch = new_epoch
        self._check_alive = check_alive
        self._standalone = standalone
        self._lock = threading.RLock()
        self._members = []
        self._drained = None
        #: The drain's Kafka commit and its cooperative deferral (event thread only);
        #: the operator also runs the deferred one after each poll and at a graceful close.
        self.drain_commit = DrainCommit(self.name, cooperative=config.cooperative, rebalancer=rebalancer, stats=stats)

    @_serialized
    def set_members(self, members: list[str]) -> None:
        """The members registered when the operator started."""
        self._members = list(members)

    @_serialized
    def drain(self) -> None:
        """Drain: afterwards the committed offsets are exactly what was submitted.

        1. Wait (drain timeout) until the in-flight batch is done: block the
           permit. Polling goes on meanwhile; records fetched now wait in the
           message queue (the backpressure pauses the partitions if it fills).
        2. One event on the event thread does the rest, so the drain waits for
           the event thread once (for the poll in progress), not once to stop
           polling and again to commit:
           a. stop polling;
           b. refuse if a rebalance made a reset necessary (CR_RESET_PENDING);
           c. read the offset manager's offsets of the assignment (consistent:
              the permit is blocked, nothing is being submitted), with where
              each partition's interval began (the checkpoint answer's ``from``);
           d. commit them in one synchronous commit; a failure raises DrainError.
              Cooperative rebalancing: the commit waits for a stable group
              generation and a refused one does not fail the drain
              (``DrainCommit.commit``): the checkpoint holds the offsets.
        3. Records fetched but not submitted stay in the message queue, in
           both region modes, and are submitted after the drain in fetch
           order. There is no separate drain buffer: a process thread already
           waiting on the queue would take a batch polled after the drain ahead
           of the buffered ones, submit a partition's newer batch before its
           older one, and move the offset manager backwards.
        4. Keep the offsets for the checkpoint; record drainTimeMillis(Max).
        """
        self._check_alive()
        cfg = self.config
        t0 = time.monotonic()
        self._drained = None  # a failed drain leaves nothing for a checkpoint
        if self._sm.state is S.CR_RESET_PENDING:
            raise DrainError(f"{self.name}: a rebalance made a reset necessary; not committing")
        deadline = t0 + cfg.drain_timeout_s
        if not self._permit.block(cfg.drain_timeout_s):
            raise DrainError(f"{self.name}: the in-flight batch did not finish within {cfg.drain_timeout_s}s")
        margin = min(COMMIT_MARGIN_S, cfg.drain_timeout_s / 5)

        def stop_and_commit(consumer: KafkaClient) -> dict[TopicPartition, Interval]:
            commit_timeout_ms = int(max(0.05, min(deadline - margin - time.monotonic(), COMMIT_TIMEOUT_S)) * 1000)
            self._events.stop_polling_async()
            if self._sm.state is S.CR_RESET_PENDING:
                raise DrainError(f"{self.name}: a rebalance made a reset necessary; not committing")
            intervals = self._offsets.intervals()
            offsets = {tp: interval.end for tp, interval in intervals.items()}
            if offsets:
                self.drain_commit.commit(consumer, offsets, commit_timeout_ms)
            return intervals

        try:
            intervals = self._events.call(stop_and_commit, max(0.05, deadline - time.monotonic()), "drain")
        except TimeoutError as exc:
            raise DrainError(f"{self.name}: the drain did not finish within {cfg.drain_timeout_s}s: {exc}") from exc
        self._drained = intervals
        self._process.reset_trigger()
        self._stats.drain_done((time.monotonic() - t0) * 1000)
        self._drains.done()
        log.debug(
            "%s: drained, committed %s",
            self.name,
            offsets_text({tp: interval.end for tp, interval in intervals.items()}),
        )

    @_serialized
    def checkpoint(self, seq: int) -> bytes:
        """Checkpoint: 1. take the intervals of the last drain (or the current
        ones); each must have a start (a seek set it; else the checkpoint
        fails: the region could not check its continuity); 2. read the
        registered members; 3. encode the versioned JSON, with each
        partition's offset and where its interval began (``starts``: the
        checkpoint answer's ``from``, coordinator/region/continuity.py);
        4. the next interval of each partition starts at this checkpoint's
        offset (``OffsetManager.rebase``); 5. resume polling, throttled while
        the permit stays blocked."""
        self._check_alive()
        intervals = self._drained if self._drained is not None else self._offsets.intervals()
        unstarted = {tp: interval.end for tp, interval in intervals.items() if interval.start is None}
        if unstarted:
            raise ContinuityError(
                f"{self.name}: checkpoint {seq}: records of {offsets_text(unstarted)} were "
                f"submitted from a position no seek set; the region cannot check where they "
                f"began"
            )
        offsets = {tp: interval.end for tp, interval in intervals.items()}
        starts = {tp: interval.start for tp, interval in intervals.items() if interval.start is not None}
        # seq: every member's checkpoint of seq gets the same list (the coordinator
        # fixes it at the first call), so the merge's N agrees; operator renews our lease.
        members = self._control.members(self.config.group_id, operator=self.name, seq=seq)
        self._members = list(members)
        data = OperatorCheckpoint(self.name, tuple(members), offsets, starts).encode()
        self._offsets.rebase(intervals)
        self.resume_polling()
        return data

    @_serialized
    def reset(self, seq: int, data: bytes | None, attempt: int = 0) -> None:
        """Reset to checkpoint ``seq``.

        1. Enter CR_RESET_PENDING (records polled from now on are dropped).
        2. Merge the members' checkpoints through the coordinator (waits at most
           min(reset timeout/2, max.poll.interval/2, 15 s); a sole contributor
           uses its own offsets without asking: a runtime that merged the
           offsets itself passes them as a one-member checkpoint). ``data``
           None or empty: this member has no checkpoint ``seq`` and
           contributes no offsets, with N = the members registered now.
        3-7. As :meth:`_reset_to`: stop polling, clear the queue, seek every assigned partition to its merged offset or, when
           absent from the checkpoint, to its control variable, read positions
           back, RESET_COMPLETE, clear reset-pending, resume throttled.
        """
        self._check_alive()
        t0 = time.monotonic()
        self._sm.to(S.CR_RESET_PENDING, f"reset to checkpoint {seq} attempt {attempt}")
        ckpt = OperatorCheckpoint.decode(data) if data else None
        own = dict(ckpt.offsets) if ckpt is not None else {}
        n = len(ckpt.members) if ckpt is not None and ckpt.members else max(1, len(self._members))
        own_wire = {(tp.topic, tp.partition): off for tp, off in own.items()}
        try:
            if n == 1:  # a sole contributor uses its own offsets: no round trip
                merged_raw = own_wire
            else:
                merged_raw = self._control.merge_checkpoint(
                    self.config.group_id, seq, attempt, n, self.name, own_wire, timeout=self.config.merge_timeout_s
                )
        except Exception as exc:
            raise ResetError(
                f"{self.name}: merging checkpoint {seq} (attempt {attempt}, {n} members) failed: {exc!r}"
            ) from exc
        merged = {TopicPartition(t, p): int(o) for (t, p), o in merged_raw.items()}
        self._targets.set_merged(seq, merged)
        self._reset_to(merged, initial=False, what=f"checkpoint {seq}")
        self._stats.reset_done((time.monotonic() - t0) * 1000)

    @_serialized
    def reset_to_initial_state(self, attempt: int = 0) -> None:
        """Reset to initial state: as :meth:`reset`, every partition seeked to
        its control variable (else its start position, saved first-writer-wins)."""
        self._check_alive()
        t0 = time.monotonic()
        self._sm.to(S.CR_RESET_PENDING, f"reset to initial state attempt {attempt}")
        self._targets.clear_merged()
        self._reset_to(None, initial=True, what="initial state")
        self._stats.reset_done((time.monotonic() - t0) * 1000)

    @_serialized
    def retire_checkpoint(self, seq: int) -> None:
        """Retire: drop the merged map of a checkpoint <= seq, here and in the coordinator."""
        self._targets.retire(seq)
        self._control.retire_checkpoint(self.config.group_id, seq)

    def _reset_to(self, merged: dict[TopicPartition, int] | None, *, initial: bool, what: str) -> None:
        """3. stop polling; 4. block the permit (the in-flight batch finishes)
        and clear the queue (new epoch); 5. on the event thread seek every
        assigned partition, read positions back, resume the held partitions but
        those held for their state's restore (``restore_hold.py``),
        RESET_COMPLETE; 6. clear the group's reset-pending flag; 7. resume
        polling throttled."""
        cfg = self.config
        self._events.set_polling(False, EVENT_TIMEOUT_S)
        if not self._permit.block(cfg.reset_timeout_s):
            raise ResetError(f"{self.name}: the in-flight batch did not finish within {cfg.reset_timeout_s}s")
        self._new_epoch(f"reset to {what}")

        def seek_all(consumer: KafkaClient) -> dict[TopicPartition, int]:
            self.drain_commit.drop()  # the region rewinds below the drain that deferred it
            tps = consumer.assignment()
            self._offsets.set_assignment(tps)
            self._rebalancer.clear_held()
            positions = self._rebalancer.seek(consumer, tps, merged=merged, initial_only=initial)
            restoring = self._rebalancer.hold_for_restore(consumer, tps)
            paused = consumer.paused() - restoring
            if paused:
                consumer.resume(paused)
            self._sm.to(S.RESET_COMPLETE, f"reset to {what}")
            return positions

        try:
            positions = self._events.call(seek_all, cfg.reset_timeout_s, f"reset to {what}")
        except Exception as exc:
            raise ResetError(f"{self.name}: seeking for the reset to {what} failed: {exc!r}") from exc
        self._drained = None
        if not self._standalone:
            try:
                self._control.set_reset_pending(cfg.group_id, False)
            except Exception as exc:
                raise ResetError(
                    f"{self.name}: the reset to {what} is done here but clearing the group's "
                    f"reset-pending flag failed (retry the reset): {exc!r}"
                ) from exc
        log.info("%s: reset to %s complete: %s", self.name, what, offsets_text(positions))
        self.resume_polling()

    def resume_polling(self) -> None:
        """Resume polling; while the permit stays blocked (until RESUME) the
        event thread polls short and sparse (event_thread.py: the throttle).

        Also in CR_RESET_PENDING: nothing is fetched then (partitions held
        paused, records dropped), but kafka-python needs poll() to finish a
        group join."""
        if self._sm.state in (S.CLOSED, S.FAILED):
            return
        self._events.set_polling(True, EVENT_TIMEOUT_S)


class DrainSignal:
    """Completed drains, counted, so a thread that asked for a drain can wait for it.

    The process thread (operator-driven mode) reads :meth:`count`, asks the
    region for a drain, then :meth:`wait_after` that count; the handler caller
    calls :meth:`done` after each drain; a failure :meth:`wake` s the waiter.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._count = 0  # guarded by _cond

    def count(self) -> int:
        with self._cond:
            return self._count

    def done(self) -> None:
        with self._cond:
            self._count += 1
            self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait_after(self, before: int, timeout: float, give_up: Callable[[], bool]) -> bool:
        """Wait until a drain completed after ``before`` was read or ``give_up()``; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._count > before or give_up(), timeout)


__all__ = ["EVENT_TIMEOUT_S", "DrainSignal", "RegionHandlers"]
