"""The source's consistent region: one Spark micro-batch = one consistent cut of the group.

:class:`SourceGroup` lives in Spark's long-lived source runner process (never
pickled). It owns the members (consumer operators), their permits, and the
:class:`~cr_consumer.spark.buffer.BatchBuffer` they submit to, and is driven by
the reader's ``read(start)`` and ``commit(end)`` on the runner's main thread.

Producing batch N+1 from ``start`` (= end[N]), :meth:`SourceGroup.next_batch`:

1. Start the members on the first call of this runner, in the query's own
   coordinator group (``start``'s query id, or a new one when the checkpoint
   location is empty: :mod:`cr_consumer.spark.control`); every end handed
   out carries the query id. If ``start`` carries positions (a restart from
   the checkpoint location), reset the members to them (step 6) before
   anything is handed out.
2. If ``start`` is not the end this runner handed out last, or a member asked
   for a reset (a rebalance after records were fetched), reset to ``start``.
3. Idle (nothing submitted since the last cut): return ``start`` unchanged, or
   once, when ``start``'s positions are neither committed to Kafka nor held as
   a pending (failed, to be retried) commit, ``start`` with a bumped epoch, so
   Spark runs one empty batch and delivers the pending ``commit`` (Spark
   commits a batch only after planning the next).
4. Cut: hold off capped submitters; block every member's permit (each
   in-flight batch finishes: its records are in the buffer and its offsets in
   the member's offset manager); snapshot every member's offsets; take the
   buffer as Arrow batches; unblock. The end offset is ``start``'s positions
   updated by the union of the snapshots (assignments are disjoint); a
   partition that first appears gets a ``from`` entry (its first record in
   the batch) so the batch can be replayed by offset range.
   The members' own ``drain()`` is not used: it commits to Kafka, which would
   put the group's committed offsets one batch ahead of Spark's completed
   batches. Members keep polling during the cut (into their bounded queues).
5. If a member entered CR_RESET_PENDING or asked for a reset during the cut,
   the cut is abandoned (its records will be fetched again): reset to
   ``start`` and hand out nothing this time.
6. Reset to ``start``: hold off submitters; block every permit; every member
   ``reset(seq=start.epoch, <start's positions as its checkpoint>, attempt)``
   concurrently (they merge through the coordinator: each contributes the full
   map, so the merged map is ``start``'s positions; partitions absent from it
   go to their control variable), or ``reset_to_initial_state`` when
   ``start`` has no positions; clear the buffer; unblock.

``commit(end)`` (:meth:`SourceGroup.commit`): idempotent by epoch (an end not
newer than the last committed one is ignored, as Spark re-delivers commits
after a restart); splits ``end``'s positions by owner and commits each part
synchronously through its member's event thread, leaving out partitions
whose topic no longer exists, bounded by ``members.COMMIT_TIMEOUT_S``
(kafka-python would otherwise retry on the event thread for as long as the
broker answers with a retriable error); then retires older
checkpoints (never the one of the last reset, whose merged offsets still
decide where a newly assigned partition starts). A commit that fails (a
rebalance is in progress) is logged, kept pending and retried at the next
read or commit; Spark's offset log stays authoritative either way.

Failure: a failed member (``operator.failure``) fails the next read/commit
with :class:`SourceFailed`, which fails the query.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc
from kafka import TopicPartition
from prometheus_client import CollectorRegistry

from cr_consumer.operator.checkpoint import OperatorCheckpoint
from cr_consumer.operator.metrics import MetricsEndpoint, StatsCollector, merged_registry
from cr_consumer.operator.region import RegionPermit
from cr_consumer.operator.states import ClientState
from cr_consumer.spark.buffer import BatchBuffer
from cr_consumer.spark.control import QueryControl, coordinator_group, new_query_id
from cr_consumer.spark.members import (
    COMMIT_EVENT_MARGIN_S,
    COMMIT_TIMEOUT_S,
    commit_plan,
    commit_through,
    member_configs,
)
from cr_consumer.spark.offsets import SourceOffset
from cr_consumer.spark.options import SourceOptions

log = logging.getLogger(__name__)

#: Bound on waiting for every member's in-flight batch at a cut (one submit
#: of one poll's records); a wedged member fails the read instead of hanging it.
CUT_TIMEOUT_S = 30.0
#: Bound on a whole reset of all members (merge through the coordinator plus
#: seeks); the operator's own merge timeout is shorter.
RESET_TIMEOUT_S = 60.0
#: Bound on closing the members (each closes its consumer: leaves the group).
CLOSE_TIMEOUT_S = 30.0


class SourceFailed(RuntimeError):
    """A member failed or a region step could not complete; the query must fail."""


#: The group's counters (``self.stats`` keys) as ``crkafka_spark_<key>_total``.
SPARK_COUNTERS = {
    "batches": "Micro-batches handed to Spark with records",
    "rows": "Rows handed to Spark",
    "resets": "Resets of the members to a batch's start",
    "idle_bumps": "Empty batches handed out so that Spark delivers a pending commit",
    "commit_failures": "Offset commits to Kafka that failed (retried at the next read or commit)",
}


class SourceGroup:
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.configs = member_configs(options)
        self.buffer = BatchBuffer(options.max_records_per_batch)
        self.permits = [RegionPermit() for _ in self.configs]
        self.members: list = []
        self._controls: list[QueryControl] = []
        self._query: str | None = None  # set when the members start
        self._pool = ThreadPoolExecutor(max_workers=max(2, len(self.configs)), thread_name_prefix="crkafka-region")
        self._lock = threading.Lock()
        self._reset_reason: str | None = None
        self._last_end: SourceOffset | None = None
        self._committed: SourceOffset | None = None  # last end committed to Kafka
        self._pending_commit: SourceOffset | None = None
        self._attempt = int(time.time()) % (1 << 30)  # unique across runner restarts
        self._last_reset_seq = 0
        self._retired = -1
        self._gone: set[TopicPartition] = set()  # left out of the last commit: their topic is gone
        self._closed = False
        self.stats = {"batches": 0, "rows": 0, "resets": 0, "idle_bumps": 0, "commit_failures": 0}
        self.metrics_endpoint: MetricsEndpoint | None = None  # /metrics (metricsPort), owned here

    # -- the region interface the members call -------------------------------------
    def request_reset(self, *, force: bool, reason: str) -> None:
        log.info("crkafka: reset requested (force=%s): %s", force, reason)
        with self._lock:
            self._reset_reason = reason

    def request_drain(self, *, reason: str) -> None:  # periodic mode: never called
        log.debug("crkafka: drain request ignored (%s): batches are cut by Spark's reads", reason)

    # -- lifecycle -----------------------------------------------------------------------
    def start(self, query: str) -> None:
        """Start the members in the coordinator group of ``query`` (see control.py)."""
        from coordinator.client import CoordinatorClient
        from cr_consumer.operator.consumer import ConsumerOperator

        self._query = query
        if self.options.metrics_port is not None:  # first: a port in use fails before anyone joins the group
            endpoint = MetricsEndpoint(self.metrics_registry(), self.options.metrics_port, self.options.metrics_host)
            endpoint.start()
            self.metrics_endpoint = endpoint
        for config, permit in zip(self.configs, self.permits):
            client = CoordinatorClient(config.coordinator, timeout=config.coordinator_timeout_s)
            control = QueryControl(client, config.group_id, query)
            self._controls.append(control)
            op = ConsumerOperator(config, submit_batch=self.buffer.submit_batch, permit=permit, region=self,
                                  control=control)
            self.members.append(op)
            op.start()
        log.info("crkafka: %d members started in group %s, coordinator group %s (%s)", len(self.members),
                 self.options.group_id, coordinator_group(self.options.group_id, query),
                 self.options.describe_subscription())

    def metrics_registry(self) -> CollectorRegistry:
        """Every member's ``crkafka_consumer_*`` plus the group's ``crkafka_spark_*`` counters."""
        registry = merged_registry(lambda: [op.prometheus_registry for op in list(self.members)])
        registry.register(StatsCollector("crkafka_spark_", lambda: dict(self.stats), SPARK_COUNTERS))
        return registry

    def _start_for(self, offset: SourceOffset) -> None:
        """Start the members for the query of ``offset``: its query id; none and
        positions: an offset of an earlier build (the plain group.id); none and
        no positions: a query starting from an empty checkpoint location."""
        if offset.query:
            query = offset.query
        elif offset.positions:
            query = ""
        else:
            query = new_query_id()
        self.start(query)

    def _own(self, offset: SourceOffset) -> SourceOffset:
        """``offset`` with this runner's query id (Spark's initial offset has none)."""
        if offset.query == self._query:
            return offset
        if offset.query:
            raise SourceFailed(f"offset of query {offset.query!r} handed to the source runner of query {self._query!r}")
        return offset.with_query(self._query)

    def close(self) -> None:
        """Close every member (each leaves the group); safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self.buffer.close()
        for permit in self.permits:
            permit.unblock()
        try:
            futures = [self._pool.submit(op.close) for op in self.members]
        except RuntimeError:  # at interpreter exit (atexit) the pool takes no work: one by one
            futures = []
            for op in self.members:
                try:
                    op.close()
                except Exception:  # keep closing the others; logged with its traceback
                    log.exception("crkafka: closing member %s failed", op.name)
        for fut in futures:
            try:
                fut.result(CLOSE_TIMEOUT_S)
            except Exception:  # keep closing the others; logged with its traceback
                log.exception("crkafka: closing a member failed")
        for control in self._controls:  # after the members: they unregister through it
            control.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.stop()
        log.info("crkafka: members closed (%s)", self.stats)

    # -- read ------------------------------------------------------------------------------
    def next_batch(self, start: SourceOffset) -> tuple[list[pa.RecordBatch], SourceOffset]:
        self._check_members()
        if not self.members:
            self._start_for(start)
            start = self._own(start)
            if start.positions:
                self._reset(start, "restart from Spark's checkpoint")
            self._last_end = start
        start = self._own(start)
        with self._lock:
            reason, self._reset_reason = self._reset_reason, None
        if reason is None and any(op.state is ClientState.CR_RESET_PENDING for op in self.members):
            reason = "a member is waiting for a reset after a rebalance"
        if start != self._last_end:
            reason = f"Spark resumed from epoch {start.epoch}, not from the last end {self._last_end.epoch}"
        if reason is not None:
            self._reset(start, reason)
            self._last_end = start
        if self._pending_commit is not None:
            self._commit_now(self._pending_commit)
        if self.buffer.rows == 0:
            end = self._idle_end(start)
            self._last_end = end
            return [], end
        cut = self._cut(start)
        if cut is None:
            self._reset(start, "a rebalance interrupted the batch cut")
            self._last_end = start
            return [], start
        batches, end = cut
        self._last_end = end
        rows = sum(b.num_rows for b in batches)
        self.stats["batches"] += 1
        self.stats["rows"] += rows
        log.debug("crkafka: batch epoch %d: %d rows", end.epoch, rows)
        return batches, end

    def _idle_end(self, start: SourceOffset) -> SourceOffset:
        if not start.positions:
            return start
        if self._committed is not None and self._committed.same_positions(start):
            return start
        if self._pending_commit is not None and self._pending_commit.same_positions(start):
            return start  # Spark already delivered this commit: it is retried here, no empty batch needed
        self.stats["idle_bumps"] += 1
        return SourceOffset(epoch=start.epoch + 1, positions=start.positions, query=start.query)

    def _cut(self, start: SourceOffset) -> tuple[list[pa.RecordBatch], SourceOffset] | None:
        with self._members_held():
            snapshots = [op.offsets.snapshot() for op in self.members]
            if self._reset_wanted():
                return None
            batches = self.buffer.cut()
        positions = dict(start.positions)
        for snap in snapshots:
            positions.update({(tp.topic, tp.partition): off for tp, off in snap.items()})
        new = [tp for tp in positions if tp not in start.positions]
        return batches, SourceOffset(epoch=start.epoch + 1, positions=positions, first=_first_offsets(batches, new),
                                     query=start.query)

    @contextlib.contextmanager
    def _members_held(self):
        """Hold every member's permit (no member is mid-batch), released on exit.

        The buffer stops taking new rows first, so a cut or reset sees a
        consistent (offsets, buffered rows) pair across all members.
        """
        self.buffer.hold_off()
        blocked = []
        try:
            for permit in self.permits:
                blocked.append(permit)
                if not permit.block(CUT_TIMEOUT_S):
                    raise SourceFailed(f"a member's in-flight batch did not finish within {CUT_TIMEOUT_S}s")
            yield
        finally:
            for permit in blocked:
                permit.unblock()

    def _reset_wanted(self) -> bool:
        with self._lock:
            if self._reset_reason is not None:
                return True
        return any(op.state is ClientState.CR_RESET_PENDING for op in self.members)

    # -- reset ------------------------------------------------------------------------------
    def _reset(self, start: SourceOffset, reason: str) -> None:
        t0 = time.monotonic()
        self._attempt += 1
        attempt = self._attempt
        names = tuple(op.name for op in self.members)
        offsets = {TopicPartition(t, p): o for (t, p), o in start.positions.items()}
        with self._members_held():
            with self._lock:
                self._reset_reason = None
            if start.positions:
                futures = [
                    self._pool.submit(op.reset, start.epoch, OperatorCheckpoint(op.name, names, offsets).encode(), attempt)
                    for op in self.members
                ]
            else:
                futures = [self._pool.submit(op.reset_to_initial_state, attempt) for op in self.members]
            errors = []
            for op, fut in zip(self.members, futures):
                try:
                    fut.result(RESET_TIMEOUT_S)
                except Exception as exc:  # noqa: BLE001 - collected and raised below
                    errors.append(f"{op.name}: {exc!r}")
            if errors:
                raise SourceFailed(f"reset to epoch {start.epoch} (attempt {attempt}) failed: {'; '.join(errors)}")
            dropped = self.buffer.clear()
        self._last_reset_seq = start.epoch
        self.stats["resets"] += 1
        log.info("crkafka: reset to epoch %d (%s) in %.0f ms, %d buffered rows dropped",
                 start.epoch, reason, (time.monotonic() - t0) * 1000, dropped)

    # -- commit -----------------------------------------------------------------------------
    def commit(self, end: SourceOffset) -> None:
        self._check_members()
        if not self.members:  # a commit before any read in this runner: start and commit
            self._start_for(end)
        end = self._own(end)
        newest = self._pending_commit or self._committed
        if newest is not None and end.epoch <= newest.epoch:
            return  # re-delivered after a restart, or older than what is already committed
        self._commit_now(end)

    def _commit_now(self, end: SourceOffset) -> None:
        plan = commit_plan(end.positions, [op.offsets.assigned() for op in self.members])
        futures = [self._pool.submit(commit_through, op, part) for op, part in zip(self.members, plan) if part]
        gone: set[TopicPartition] = set()
        deadline = time.monotonic() + COMMIT_TIMEOUT_S + COMMIT_EVENT_MARGIN_S + 1.0
        try:
            for fut in futures:  # concurrent: bounded together like one
                gone |= fut.result(max(0.0, deadline - time.monotonic()))
        except Exception as exc:  # noqa: BLE001 - kept pending and retried (see the module doc)
            self.stats["commit_failures"] += 1
            self._pending_commit = end
            log.warning("crkafka: committing epoch %d to Kafka failed (%r); retried at the next read or commit",
                        end.epoch, exc)
            return
        if gone - self._gone:
            log.warning("crkafka: partitions whose topic no longer exists are left out of the Kafka commits: %s",
                        sorted(f"{tp.topic}[{tp.partition}]" for tp in gone - self._gone))
        self._gone = gone
        self._pending_commit = None
        self._committed = end
        retire = min(end.epoch - 1, self._last_reset_seq - 1)
        if retire > self._retired:
            for op in self.members:
                op.retire_checkpoint(retire)
            self._retired = retire

    def _check_members(self) -> None:
        for op in self.members:
            if op.failure is not None:
                raise SourceFailed(f"member {op.name} failed: {op.failure!r}") from op.failure


def _first_offsets(batches: list[pa.RecordBatch], tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """For partitions new in this batch: the offset of their first record in it."""
    first: dict[tuple[str, int], int] = {}
    for batch in batches if tps else ():
        for topic, partition in tps:
            mask = pc.and_(pc.equal(batch.column("topic"), topic), pc.equal(batch.column("partition"), partition))
            low = pc.min(pc.filter(batch.column("offset"), mask)).as_py()
            if low is None:
                continue
            key = (topic, partition)
            first[key] = min(low, first.get(key, low))
    return first
