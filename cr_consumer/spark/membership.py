"""The query's consumer-group membership in the driver: holds partitions, reads no records.

With the partitioned reader the records are read in the executors
(:mod:`cr_consumer.spark.executor`); the driver-side source runner only needs
the group's verdict (which partitions this query owns) and a member to commit
through. :class:`GroupMember` is that member:

1. :meth:`GroupMember.start` starts a thread that owns one kafka-python
   client of the seam (:class:`~cr_consumer.kafka.client.KafkaClient`) in the
   group (``enable.auto.commit`` off), subscribed to the topics or pattern
   with the member as its rebalance listener and a rebalance hold (step 4).
   With ``assign`` (fixed partitions) member 0 assigns them itself, without
   a group assignment, and commits them to the group.
2. The listener pauses every partition the moment it is assigned, so the
   consumer never fetches a record; the thread calls ``poll`` only to take
   part in the group (joins, rebalances, heartbeats are kafka-python's
   background work): for :data:`JOIN_POLL_MS` until the first assignment,
   then for :data:`POLL_MS`. A paused consumer's poll sleeps (``time.sleep``
   inside kafka-python, which no wakeup interrupts), so the poll's length is
   how long a queued commit can wait for the thread: the short steady poll
   keeps the commit latency low, while the join keeps the poll it was
   tested with (a non-blocking poll broke joins).
3. :meth:`assignment` returns the partitions held now and a counter bumped at
   every revocation or assignment (the planner notices a rebalance).
4. Handover: when the group revokes partitions (another consumer of the group,
   e.g. a second Spark application, takes them), the listener holds the
   rebalance until the query has committed every range it planned for them
   (:attr:`handover`, set by the planner), sending the queued commits meanwhile,
   bounded by :data:`HANDOVER_TIMEOUT_S` (past it the member fails with
   :class:`HandoverTimedOut`, which fails the query). The rebalance, and
   so the next owner's assignment, completes only after that commit.
5. :meth:`submit_commit` queues a synchronous offset commit for the thread (the client
   is not thread-safe), bounded by :data:`COMMIT_TIMEOUT_S`; past it the
   commit fails with :class:`CommitTimedOut` and the caller retries later.
6. :meth:`close` stops the thread, which closes the client (LeaveGroup).

The members are kafka-python clients whatever ``kafka.client`` says (it picks
the executors' library): holding a rebalance is kafka-python's only.

Failure: an exception on the thread (a broker error the client does not
retry) is kept as :attr:`failure`; every later call raises
:class:`MemberFailed` naming it, which fails the query.

The member's Kafka properties are in ``client_properties.py``; the queued
calls and commits its thread serves, and the handover (step 4), in
``member_requests.py``.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import TypeVar, cast

from cr_consumer.kafka.client import ClientKind, KafkaClient, TopicPartition
from cr_consumer.kafka.factory import make_client
from cr_consumer.spark.client_properties import member_name, membership_properties
from cr_consumer.spark.member_requests import (
    CALL_MARGIN_S,
    COMMIT_TIMEOUT_S,
    CallRequest,
    CallTimedOut,
    CommitRequest,
    CommitTimedOut,
    HandoverHold,
    MemberFailed,
    fail_all,
    partition_names,
    serve_calls,
    serve_commits,
)
from cr_consumer.spark.options import SourceOptions

log = logging.getLogger(__name__)

R = TypeVar("R")  # what a call on the member's thread returns

#: One poll of the paused client once it holds its first assignment; bounds
#: how long a queued commit waits for the thread (part of the commit latency)
#: and how late a close is noticed. Each poll costs ~0.1 ms of CPU.
POLL_MS = 2
#: One poll until the first assignment (the group join).
JOIN_POLL_MS = 10
#: Records one poll may return (none: every partition is paused).
POLL_MAX_RECORDS = 1
#: Bound on creating the client (a bad bootstrap address fails the start).
START_TIMEOUT_S = 30.0
#: Bound on joining the thread at close (the client's LeaveGroup).
CLOSE_TIMEOUT_S = 15.0
#: Bound on the client's LeaveGroup at close (within CLOSE_TIMEOUT_S).
LEAVE_TIMEOUT_MS = 10_000


class GroupMember:
    def __init__(self, options: SourceOptions, group: str, index: int) -> None:
        self.options = options
        self.group = group
        self.name = member_name(index)
        self.index_holds_assign = index == 0  # with ``assign``, member 0 holds every partition
        self._properties = membership_properties(options, group, index)
        self._calls: queue.Queue[CallRequest] = queue.Queue()
        #: served by the member's thread, or during a handover by the client holding the rebalance
        self._commits: queue.Queue[CommitRequest] = queue.Queue()
        self._lock = threading.Lock()
        self._assigned: frozenset[TopicPartition] = frozenset()
        self._handing_over: frozenset[TopicPartition] = frozenset()  # revoked, their last ranges not committed
        self._changes = 0  # revocations + assignments seen
        #: Set by the planner: handover(revoked) is True once every range planned
        #: for ``revoked`` is committed (called while the client holds the rebalance).
        self.handover: Callable[[set[TopicPartition]], bool] | None = None
        self._joined = threading.Event()  # first assignment (possibly empty) received
        self._started = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client: KafkaClient | None = None  # created and used on the member's thread only
        self.failure: BaseException | None = None
        self._hold = HandoverHold(
            self.name,
            self._commits,
            lambda: self.handover,
            self._stop.is_set,
            self._handover_ended,
            self._handover_failed,
        )

    @property
    def handover_ms(self) -> list[float]:
        """How long each handover held its rebalance."""
        return self._hold.held_ms

    # -- owner thread ----------------------------------------------------------------
    @property
    def _kafka(self) -> KafkaClient:
        """The member's client: created at the start of its thread, used on that thread
        (and in the rebalance callbacks, inside its polls) only."""
        if self._client is None:
            raise MemberFailed(f"{self.name}: the client is used before the member's thread created it")
        return self._client

    def on_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        """The client's rebalance callback: ``partitions`` are revoked; the hold follows (step 4)."""
        with self._lock:
            self._assigned = self._assigned - partitions
            self._handing_over = partitions
            self._changes += 1
        self._hold.begin()
        log.info("crkafka %s: revoked %s", self.name, partition_names(partitions))

    def on_lost(self, partitions: frozenset[TopicPartition]) -> None:
        """The client's rebalance callback: ``partitions`` are lost; handled as revoked."""
        self.on_revoked(partitions)

    def on_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        """The client's rebalance callback: ``partitions`` are now held (paused at once)."""
        self._kafka.pause(partitions)  # never fetch: executors read the records
        with self._lock:
            self._assigned = self._assigned | partitions
            self._changes += 1
        self._joined.set()
        log.info("crkafka %s: assigned %s", self.name, partition_names(partitions))

    def _handover_ended(self) -> None:
        with self._lock:
            self._handing_over = frozenset()

    def _handover_failed(self, exc: BaseException) -> None:
        """The client drops an exception of its rebalance hold: kept as the failure."""
        self.failure = exc
        log.error("crkafka %s: %s", self.name, exc)

    def _run(self) -> None:
        try:
            self._client = client = make_client(ClientKind.KAFKA_PYTHON, self._properties)
            if self.options.assign:  # fixed partitions: no group assignment; the group only takes commits
                tps = [TopicPartition(t, p) for t, p in self.options.assign] if self.index_holds_assign else []
                client.assign(tps)
                self.on_assigned(frozenset(tps))
            elif self.options.pattern is not None:
                client.subscribe(pattern=self.options.pattern, listener=self, hold=self._hold)
            else:
                client.subscribe(list(self.options.topics), listener=self, hold=self._hold)
        except BaseException as exc:  # kept as the failure, raised by every later call
            self.failure = exc
            self._started.set()
            log.exception("crkafka %s: the client could not start", self.name)
            return
        self._started.set()
        try:
            while not self._stop.is_set():
                serve_commits(client, self._commits, self.name)
                serve_calls(client, self._calls)
                records = client.poll(POLL_MS if self._joined.is_set() else JOIN_POLL_MS, POLL_MAX_RECORDS)
                if records:  # a paused partition never returns records: a broken invariant
                    raise MemberFailed(f"{self.name}: the membership client fetched records of {list(records)}")
        except BaseException as exc:  # kept as the failure, raised by every later call
            self.failure = exc
            log.exception("crkafka %s: the membership thread failed", self.name)
        finally:
            fail_all(self._calls, f"{self.name} stopped: {self.failure!r}")
            fail_all(self._commits, f"{self.name} stopped: {self.failure!r}")
            try:
                client.close(LEAVE_TIMEOUT_MS)
            except Exception:  # closing after a failure; logged, the thread ends anyway
                log.exception("crkafka %s: closing the client failed", self.name)

    # -- callers (the runner's main thread) ----------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"crkafka-member-{self.name}", daemon=True)
        self._thread.start()
        if not self._started.wait(START_TIMEOUT_S):
            raise MemberFailed(f"{self.name}: the client did not start within {START_TIMEOUT_S}s")
        self.check()

    def check(self) -> None:
        if self.failure is not None:
            raise MemberFailed(f"member {self.name} failed: {self.failure!r}") from self.failure

    def wait_joined(self, timeout_s: float) -> bool:
        return self._joined.wait(timeout_s)

    def assignment(self) -> tuple[frozenset[TopicPartition], int]:
        """(partitions held now, count of assignment changes so far)."""
        with self._lock:
            return self._assigned, self._changes

    def committable(self) -> frozenset[TopicPartition]:
        """Partitions this member commits: those held, and those being handed over."""
        with self._lock:
            return self._assigned | self._handing_over

    def call(self, fn: Callable[[KafkaClient], R], timeout_s: float, what: str) -> R:
        """Run ``fn(client)`` on the member's thread; bounded by ``timeout_s``."""
        self.check()
        fut: Future[object] = Future()
        self._calls.put((fn, fut))
        try:
            result = cast(R, fut.result(timeout_s))  # the future carries fn's result
        except TimeoutError:
            fut.cancel()
            raise CallTimedOut(f"{self.name}: {what} did not complete within {timeout_s}s") from None
        return result

    def submit_commit(self, offsets: Mapping[TopicPartition, int]) -> Future[None] | None:
        """Queue a commit of ``offsets`` for the member's thread (None: nothing to commit);
        :meth:`wait_commit` waits for it. The planner queues every member's commit before
        waiting for any, so the members commit side by side."""
        if not offsets:
            return None
        self.check()
        fut: Future[None] = Future()
        self._commits.put((dict(offsets), fut))
        return fut

    def wait_commit(self, fut: Future[None] | None, timeout_s: float = COMMIT_TIMEOUT_S + CALL_MARGIN_S) -> None:
        """Wait for a commit :meth:`submit_commit` queued; CommitTimedOut past ``timeout_s``."""
        if fut is None:
            return
        try:
            fut.result(timeout_s)
        except TimeoutError:
            fut.cancel()
            raise CommitTimedOut(f"{self.name}: a batch commit did not complete within {timeout_s:.1f}s") from None

    def committed(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets of ``tps`` (absent: never committed)."""

        def lookup(client: KafkaClient) -> dict[TopicPartition, int]:
            found = client.committed(tps, int(COMMIT_TIMEOUT_S * 1000) * max(1, len(tps)))
            return {tp: off for tp, off in found.items() if off is not None}

        return self.call(lookup, COMMIT_TIMEOUT_S * max(1, len(tps)) + CALL_MARGIN_S, "a committed-offset lookup")

    def close(self) -> None:
        """Stop the thread; the client leaves the group. Safe to call twice."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(CLOSE_TIMEOUT_S)
            if self._thread.is_alive():
                log.warning("crkafka %s: the membership thread did not stop within %ss", self.name, CLOSE_TIMEOUT_S)


__all__ = ["GroupMember"]
