"""The event thread: the only thread that touches the Kafka client.

The client is a :class:`~cr_consumer.kafka.client.KafkaClient` (kafka-python or
librdkafka, ``OperatorConfig.client``); this module and the parts it calls
(rebalance.py, handlers.py) use only that interface.

It loops:

1. serve every queued event (a callable run with the consumer; its caller
   waits on a Future with a timeout, and an exception raised by the callable
   is set on that Future: delivered to the waiter, never swallowed);
2. run the operator's deferred rebalance work (``after_poll``), because
   rebalance listeners may run on the client library's own thread
   (kafka-python's IO thread), where no blocking client call is allowed;
3. if polling is on and the message queue has less free space than
   max.poll.records (backpressure):
   a. with a client whose pause drops the records it fetched ahead
      (``KafkaClient.pause_drops_fetched``: librdkafka, which then fetches them
      again after the resume), first do not poll at all, for up to
      :data:`HOLD_MAX_S`, serving events meanwhile, until the queue has room
      for a poll: the records wait in the client's own bounded prefetch queue
      and nothing is fetched twice;
   b. otherwise, or once the queue stayed full for HOLD_MAX_S (the process
      thread is stalled: polls must go on for the group's rebalances), pause
      every assigned partition and poll; resume them once ``may_resume()``
      (the operator: half the queue is free). The gap between the two marks
      makes pause/resume episodes rare;
   while the region permit is blocked (the runtime is about to
   drain, checkpoint or reset: nothing is being submitted), first wait up to
   :data:`BLOCKED_WAIT_S` for events, so the handler's event is picked up at
   once instead of after a poll, and then poll briefly
   (:data:`BLOCKED_POLL_TIMEOUT_MS`, :data:`BLOCKED_MAX_RECORDS`); otherwise
   ``poll`` for at most :data:`POLL_TIMEOUT_MS` while records flow
   (:data:`IDLE_POLL_TIMEOUT_MS` once no poll has returned records for
   :data:`IDLE_AFTER_S`), so a stop-polling
   request waits at most that long (:data:`JOIN_POLL_TIMEOUT_MS` while a
   group join is in progress); hand the records to the
   operator (``on_records``). The blocked-permit pacing is also the
   reference's throttle after a checkpoint or reset: until the runtime gives
   the permit back (RESUME), polls are short and sparse, so the queue does not
   fill before the region resumes. (The reference polls with timeout 0 then;
   kafka-python 3 cannot finish a group join with zero-timeout polls, so the
   poll keeps a short timeout.)
4. if polling is off: wait up to :data:`IDLE_WAIT_S` for the next event.

Failure: an exception outside an event (poll, rebalance work) is fatal: it is
logged, kept as :attr:`EventThread.failure`, every waiting and later caller
gets :class:`OperatorFailed` caused by it, and the consumer is closed.
Shutdown: :meth:`EventThread.stop` asks the loop to end, which closes the
consumer (leaving the group) and joins the thread with a timeout.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Collection
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from cr_consumer.kafka.client import GroupMembership, KafkaClient, KafkaRecord, TopicPartition

log = logging.getLogger(__name__)

#: Longest single poll while records are flowing (a poll returned some within
#: IDLE_AFTER_S): bounds how late a stop-polling event (drain) or any other event is
#: served when the poll has to wait for a fetch. 20 ms made that wait the
#: drain's latency tail (p99 ~23 ms with 250 drains under load); 5 ms: p99
#: 8-16 ms, same throughput (BENCHMARKS.md).
POLL_TIMEOUT_MS = 5
#: Longest single poll once the topic looks idle (see IDLE_AFTER_S): each poll
#: costs ~1.2 ms of CPU in kafka-python 3 (thread hand-offs), so 5 ms polls
#: would burn ~23 % of a core on an idle topic (20 ms: ~7 %). A drain on an
#: idle operator waits up to this long.
IDLE_POLL_TIMEOUT_MS = 20
#: How long no poll must have returned records before polls use
#: IDLE_POLL_TIMEOUT_MS. Not "after one empty poll": while records flow, a
#: poll often finds the fetch buffer empty between two fetch responses, and a
#: 20 ms poll started then returns only when the next response has landed and
#: 500 records are parsed (25-45 ms measured): that poll was the whole drain
#: latency tail (p99 22-30 ms; BENCHMARKS.md, drain latency).
IDLE_AFTER_S = 0.5
#: While the permit is blocked: the longest wait for events between two polls.
#: The drain's event then finds the thread waiting for it, not inside a poll
#: that returns only when a fetch lands or the poll times out (that wait was
#: the drain's latency tail: up to 30 ms of a 35 ms p99). Polling goes on
#: between the waits (group heartbeat-driven work, rebalances).
BLOCKED_WAIT_S = 0.02
#: While the permit is blocked: the poll's timeout and record cap, so an event
#: that arrives during that poll waits ~1-3 ms, not a full poll of
#: max.poll.records. Nothing is submitted while blocked, so nothing is lost.
BLOCKED_POLL_TIMEOUT_MS = 2
BLOCKED_MAX_RECORDS = 100
#: Poll timeout while the group join is in progress (no assignment yet, or
#: after a revocation): kafka-python finishes a join only inside poll(), and
#: with a pattern subscription each poll first waits for a metadata refresh;
#: a poll must outlast that refresh or the join never completes. Also bounds
#: how late an event (the reset of a member that is joining) is served during
#: a join. With kafka.compat.keep_completed_joins installed (a join that
#: completes between polls is kept), 100 ms completes joins reliably and keeps
#: a restarted member's wait for its reset short.
JOIN_POLL_TIMEOUT_MS = 100
#: Slice of the blocked-permit wait: how late the permit's unblocking (RESUME)
#: is noticed.
BLOCKED_SLICE_S = 0.005
#: Wait for events while not polling; bounds the reaction to a stop request.
IDLE_WAIT_S = 0.1
#: Longest time a full queue is waited out without polling (a client whose
#: pause drops its fetched-ahead records, step 3a) before the partitions are
#: paused and polling goes on. Bounds how late a rebalance callback runs (the
#: client serves them only inside poll; the group waits for this member's
#: rejoin meanwhile) while the process thread is stalled; a queue that frees
#: room sooner (the usual case: the process thread is slower than the fetch,
#: not stalled) never costs a pause and the refetch of everything librdkafka
#: had fetched ahead (up to its queued.max.messages.kbytes, 64 MB).
HOLD_MAX_S = 0.5
#: Slice of the wait for queue room while holding (step 3a): how late room in
#: the queue is noticed. The queue still holds nearly its capacity then, so
#: the process thread is never starved by it.
HOLD_SLICE_S = 0.002
#: Bound on closing the consumer (leave group) so shutdown never hangs on a
#: dead broker.
CLOSE_TIMEOUT_MS = 5000


class OperatorFailed(RuntimeError):
    """The operator hit a fatal error; ``__cause__`` is the original."""


class _Stop:
    """Queued by stop(): the loop ends when it takes one."""


T = TypeVar("T")

#: One queued call: ``fn(client)``, the future its result goes to, what it is
#: (for logs). Any: the queue holds calls of every result type; ``submit`` and
#: ``call`` give each caller its own.
_Event = tuple[Callable[[KafkaClient], Any], "Future[Any]", str]


class EventThread:
    """The thread that owns the Kafka client (see the module docstring).

    Every callable is injected: ``consumer_factory`` makes the client on this
    thread; ``on_records(consumer, records)`` and ``after_poll(consumer)`` run
    here after each poll; ``should_pause()``, ``blocked()``, ``held()`` and
    ``joining()`` are read before each poll; ``on_failure(exc)`` is called
    once if the loop dies; ``on_close()`` runs here once the client is closed
    (what ``on_records`` used alongside it: the filter of aborted records).
    """

    #: Polling on/off: written by this thread (set_polling's event) and by any
    #: thread through stop_polling_async (a plain bool: a stop is seen at the
    #: next loop turn).
    _polling: bool
    #: The first fatal error; written once by this thread, read by any caller.
    failure: BaseException | None
    #: The client; set and cleared by this thread. Other threads read it only
    #: to know whether it exists (request_rejoin) or from inside the poll
    #: (the rebalance listener, possibly on the library's own thread).
    consumer: KafkaClient | None
    #: The client's group membership, refreshed by this thread after every
    #: poll, so other threads (the member's heartbeat) read it without touching
    #: the client. None before the client exists.
    group: GroupMembership | None
    #: Backpressure episode state and count; this thread writes, metrics read.
    _paused: bool
    n_queue_full_pause: int
    #: Step 3a: since when (monotonic) the queue is full without a pause (None:
    #: not holding), and how many such episodes there were. This thread only.
    _full_since: float | None
    n_queue_full_hold: int

    def __init__(
        self,
        name: str,
        consumer_factory: Callable[[], KafkaClient],
        *,
        on_records: Callable[[KafkaClient, dict[TopicPartition, list[KafkaRecord]]], None],
        after_poll: Callable[[KafkaClient], None],
        should_pause: Callable[[], bool],
        blocked: Callable[[], bool],
        held: Callable[[], set[TopicPartition]],
        joining: Callable[[], bool],
        on_failure: Callable[[BaseException], None],
        max_poll_records: int,
        may_resume: Callable[[], bool] | None = None,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self._factory = consumer_factory
        self._on_records = on_records
        self._after_poll = after_poll
        self._should_pause = should_pause
        self._may_resume = may_resume if may_resume is not None else (lambda: not should_pause())
        self._blocked = blocked
        self._held = held
        self._joining = joining
        self._on_failure = on_failure
        self._on_close = on_close
        self._max_poll_records = max_poll_records
        self._events: queue.SimpleQueue[_Event | _Stop] = queue.SimpleQueue()
        self._polling = False
        self._paused = False
        self._last_records_at = 0.0  # monotonic time of the last poll that returned records
        self._stop_requested = False
        self.failure: BaseException | None = None
        self.n_queue_full_pause = 0
        self._full_since = None
        self.n_queue_full_hold = 0
        self.consumer = None
        self.group = None
        self._thread = threading.Thread(target=self._run, name=f"cr-event-{name}", daemon=True)
        self._started: Future[None] = Future()

    # -- control (any thread) ---------------------------------------------
    def start(self, timeout: float) -> None:
        self._thread.start()
        self._started.result(timeout)

    def submit(self, fn: Callable[[KafkaClient], T], what: str) -> Future[T]:
        fut: Future[T] = Future()
        if self.failure is not None:
            fut.set_exception(self._failed(what))
            return fut
        self._events.put((fn, fut, what))
        return fut

    def call(self, fn: Callable[[KafkaClient], T], timeout: float, what: str) -> T:
        """Run ``fn(client)`` on the event thread and return its result."""
        if threading.current_thread() is self._thread:
            assert self.consumer is not None, "called on the event thread before the client exists"
            return fn(self.consumer)
        fut = self.submit(fn, what)
        try:
            return fut.result(timeout)
        except FutureTimeout:
            fut.cancel()
            raise TimeoutError(f"{self.name}: event {what!r} not done within {timeout:.1f}s") from None

    def set_polling(self, on: bool, timeout: float = 5.0) -> None:
        """Start/stop polling; returns once the loop has seen it (no poll in progress)."""

        def apply(_client: KafkaClient) -> None:
            self._polling = on

        self.call(apply, timeout, "start polling" if on else "stop polling")

    @property
    def paused(self) -> bool:
        return self._paused

    def request_rejoin(self) -> bool:
        """Make the client rejoin its group at its next poll (an event: the
        client is only touched on this thread). False before the client exists.
        A library without such a call (librdkafka) ignores it: the rebalance then
        comes when the broker starts it (KafkaClient.request_rejoin)."""
        if self.consumer is None:
            return False
        self.submit(lambda client: client.request_rejoin(), "rejoin the group")
        return True

    def stop(self, timeout: float) -> None:
        self._stop_requested = True
        self._events.put(_Stop())
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.error("%s: event thread did not stop within %.1fs", self.name, timeout)

    def _failed(self, what: str) -> OperatorFailed:
        exc = OperatorFailed(f"{self.name}: cannot run {what!r}: the event thread failed: {self.failure!r}")
        exc.__cause__ = self.failure
        return exc

    # -- the loop (event thread) ------------------------------------------
    def _run(self) -> None:
        try:
            self.consumer = self._factory()
            self.group = self.consumer.group()
        except BaseException as exc:  # delivered to start()
            log.exception("%s: cannot create the Kafka consumer", self.name)
            self.failure = exc
            self._started.set_exception(exc)
            return
        self._started.set_result(None)
        try:
            self._loop()
        except BaseException as exc:  # kept, reported, re-raised to waiters
            log.exception("%s: event thread failed", self.name)
            self.failure = exc
            try:
                self._on_failure(exc)
            except Exception:  # the failure is already recorded; log the secondary error
                log.exception("%s: failure handler raised", self.name)
        finally:
            self._fail_pending()
            self._close_consumer()

    def _loop(self) -> None:
        consumer = self.consumer
        assert consumer is not None  # set by _run before the loop starts
        while not self._stop_requested:
            if not self._serve_events(block_s=0.0):
                return
            self._after_poll(consumer)
            if not self._polling:
                if not self._serve_events(block_s=IDLE_WAIT_S):
                    return
                continue
            if self._backpressure(consumer):
                if not self._serve_events(block_s=HOLD_SLICE_S):
                    return
                continue  # holding: the queue is full, nothing polled (step 3a)
            idle = time.monotonic() - self._last_records_at > IDLE_AFTER_S
            timeout_ms = IDLE_POLL_TIMEOUT_MS if idle else POLL_TIMEOUT_MS
            max_records = self._max_poll_records
            if self._joining():
                timeout_ms = JOIN_POLL_TIMEOUT_MS
            elif self._blocked():
                if not self._wait_while_blocked():
                    return
                if not self._polling:
                    continue  # the event served was a stop (a drain)
                timeout_ms, max_records = BLOCKED_POLL_TIMEOUT_MS, min(BLOCKED_MAX_RECORDS, max_records)
            records = consumer.poll(timeout_ms, max_records)
            self.group = consumer.group()
            self._after_poll(consumer)
            if records:
                self._last_records_at = time.monotonic()
                self._on_records(consumer, records)

    def _wait_while_blocked(self) -> bool:
        """Serve events for up to BLOCKED_WAIT_S while polling is on and the
        permit blocked; False when asked to stop."""
        end = time.monotonic() + BLOCKED_WAIT_S
        while self._polling and self._blocked() and time.monotonic() < end:
            if not self._serve_events(block_s=BLOCKED_SLICE_S):
                return False
        return True

    def _serve_events(self, block_s: float) -> bool:
        """Run queued events; False when asked to stop."""
        consumer = self.consumer
        assert consumer is not None  # served only by _loop, which runs while the client exists
        try:
            item = self._events.get(timeout=block_s) if block_s > 0 else self._events.get_nowait()
        except queue.Empty:
            return True
        while True:
            if isinstance(item, _Stop):
                return False
            fn, fut, what = item
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn(consumer))
                except BaseException as exc:  # noqa: BLE001 - delivered to the waiter
                    log.warning("%s: event %r failed: %r", self.name, what, exc)
                    fut.set_exception(exc)
            try:
                item = self._events.get_nowait()
            except queue.Empty:
                return True

    def _backpressure(self, consumer: KafkaClient) -> bool:
        """Steps 3a and 3b of the module docstring; True: hold (do not poll now)."""
        if self._should_pause():
            if not self._paused and consumer.pause_drops_fetched:
                now = time.monotonic()
                if self._full_since is None:
                    self._full_since = now
                    self.n_queue_full_hold += 1
                if now - self._full_since < HOLD_MAX_S:
                    return True
                log.debug("%s: queue full for %.1fs: pausing", self.name, now - self._full_since)
            missing = consumer.assignment() - consumer.paused()
            if missing:
                consumer.pause(missing)
            if not self._paused:
                self._paused = True
                self.n_queue_full_pause += 1
                log.debug("%s: queue full: paused %d partitions", self.name, len(missing))
        elif self._paused and self._may_resume():
            held = self._held()
            paused = [tp for tp in consumer.paused() if tp not in held]
            if paused:
                consumer.resume(paused)
            self._paused = False
            self._full_since = None
            log.debug("%s: queue has room: resumed %d partitions", self.name, len(paused))
        elif not self._paused:
            self._full_since = None
        return False

    def pause_partitions(self, partitions: Collection[TopicPartition]) -> None:
        """Hold partitions (rebalance listener, during our poll)."""
        consumer = self.consumer
        if partitions and consumer is not None:
            consumer.pause(partitions)

    def stop_polling_async(self) -> None:
        """Stop polling without waiting (from the rebalance listener)."""
        self._polling = False

    def resume_partitions(self, consumer: KafkaClient, partitions: Collection[TopicPartition]) -> None:
        """Resume unless the queue is full (then the backpressure resumes them)."""
        if partitions and not self._paused:
            consumer.resume(partitions)

    def _fail_pending(self) -> None:
        while True:
            try:
                item = self._events.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Stop):
                continue
            _fn, fut, what = item
            if fut.set_running_or_notify_cancel():
                if self.failure is not None:
                    fut.set_exception(self._failed(what))
                else:
                    fut.set_exception(OperatorFailed(f"{self.name}: closed before {what!r} ran"))

    def _close_consumer(self) -> None:
        consumer, self.consumer = self.consumer, None
        if consumer is None:
            return
        started = time.monotonic()
        try:
            consumer.close(CLOSE_TIMEOUT_MS)
        except Exception:  # closing is best effort; the error is logged, not hidden
            log.exception("%s: error while closing the Kafka consumer", self.name)
        log.info("%s: consumer closed in %.0f ms", self.name, (time.monotonic() - started) * 1000)
        if self._on_close is not None:
            try:
                self._on_close()
            except Exception:  # closing is best effort; the error is logged, not hidden
                log.exception("%s: error while closing what the records went through", self.name)


__all__ = ["POLL_TIMEOUT_MS", "EventThread", "OperatorFailed"]
