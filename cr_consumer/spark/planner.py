"""The driver side of the partitioned reader: plans offset ranges, commits, touches no rows.

:class:`QueryPlanner` lives in Spark's long-lived source runner process (never
pickled) and is driven by the reader's ``latestOffset`` and ``commit`` on the
runner's main thread. It owns the query's group members
(:class:`~cr_consumer.spark.membership.GroupMember`: they hold the assignment
and commit, they fetch nothing), a :class:`~cr_consumer.spark.watermarks.WatermarkProbe`
for end offsets, and the coordinator client of the query's control variables.

Planning batch N+1 from ``start`` (= end[N]), :meth:`QueryPlanner.latest_offset`:

1. First call of this runner: draw or reuse the query id (``start``'s, or a
   new one from an empty checkpoint location: :mod:`cr_consumer.spark.control`),
   register the members in the query's coordinator group, start them and
   wait (bounded by :data:`JOIN_TIMEOUT_S`) until each has its first
   assignment.
2. Retry a commit that failed earlier (kept pending).
3. The partitions planned are the union of the members' assignments. Each
   starts at ``start``'s position; a partition absent from ``start`` starts at
   its control variable in the coordinator, put once (first writer wins):
   the configured start position (``startingOffsets`` ...) while the query's
   control variables are empty (its first start), otherwise its earliest
   offset (a partition that appeared later: a new topic on a pattern), as
   in Spark. Such a partition gets a ``from`` entry in the end offset.
4. End offsets: the high watermark of every planned partition, capped by
   the read limit (:func:`~cr_consumer.spark.ranges.capped_ends`). A high
   watermark below the partition's start is data loss, as in Spark's Kafka
   source (the topic was deleted and created again, or ``startingOffsets``
   named an offset past the end): with ``failOnDataLoss=true`` the query fails
   (:class:`DataLossInPlan`, naming the partition and the option); otherwise a
   warning is logged and the partition goes on from the high watermark (the
   offsets in between are skipped: an empty range ends there).
5. Nothing new: hand back ``start``, or once, when ``start``'s positions are
   neither committed to Kafka nor pending, ``start`` with ``epoch + 1`` so
   that Spark runs one empty batch and then delivers ``commit(start)``
   (Spark commits a batch only after planning the next).

``partitions(start, end)`` is pure (:func:`batch_ranges`): the per-partition
ranges ``[start, end)`` split by ``minPartitions``; Spark calls it for a new
batch and for a batch replayed from its offset log alike.

``commit(end)`` (:meth:`QueryPlanner.commit`): idempotent by epoch (Spark
re-delivers commits after a restart); each member commits the positions of
the partitions it holds now (a partition this query no longer holds is left
to its new owner), all members side by side (every commit is queued before
any is waited for), bounded by ``member_requests.COMMIT_TIMEOUT_S``. A failed
commit is logged, kept and retried at the next ``latestOffset``/``commit``;
Spark's offset log stays authoritative either way.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from kafka import TopicPartition

from cr_consumer.operator.metrics import MetricsEndpoint
from cr_consumer.spark.control import coordinator_group, new_query_id
from cr_consumer.spark.member_requests import CALL_MARGIN_S, COMMIT_TIMEOUT_S, MemberFailed
from cr_consumer.spark.membership import GroupMember
from cr_consumer.spark.metrics import MemberOffsets, runner_registry
from cr_consumer.spark.offsets import SourceOffset, TopicPartitionKey
from cr_consumer.spark.options import SourceOptions, StartKind
from cr_consumer.spark.positions import start_offsets
from cr_consumer.spark.ranges import OffsetRange, capped_ends, split_ranges
from cr_consumer.spark.watermarks import WatermarkProbe

if TYPE_CHECKING:
    from coordinator.client import CoordinatorClient

log = logging.getLogger(__name__)

#: Bound on the members' first join at start (a group join takes about half
#: the session timeout on tansu; a rebalance with other members longer).
JOIN_TIMEOUT_S = 60.0
#: Timeout of each coordinator request.
COORDINATOR_TIMEOUT_S = 10.0


class PlanningFailed(RuntimeError):
    """A member failed or the planner could not complete a step; the query must fail."""


class DataLossInPlan(PlanningFailed):
    """A partition's end went below its start and failOnDataLoss is true."""


def batch_ranges(start: SourceOffset, end: SourceOffset, min_partitions: int | None, *,
                 skip_backwards: bool = False) -> list[OffsetRange]:
    """The Spark input partitions of the batch ``(start, end]`` (pure, deterministic).
    A partition whose end is below its start was skipped for data loss when the
    batch was planned with ``failOnDataLoss=false`` (``skip_backwards``): it has no
    range; otherwise such a pair of offsets is refused (ValueError)."""
    ranges = []
    for (topic, partition), until in sorted(end.positions.items()):
        begin = end.start_of((topic, partition), start)
        if until >= begin or not skip_backwards:
            ranges.append(OffsetRange(topic, partition, begin, until))
    return split_ranges(ranges, min_partitions)


def _key(tp: TopicPartition) -> TopicPartitionKey:
    return (tp.topic, tp.partition)


class QueryPlanner:
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.members: list[GroupMember] = []
        self.probe = WatermarkProbe(options)
        self._client: CoordinatorClient | None = None  # created at start
        self._query: str | None = None
        self._committed: SourceOffset | None = None
        self._pending_commit: SourceOffset | None = None
        self._closed = False
        self.stats = {"batches": 0, "planned_rows": 0, "idle_bumps": 0, "commit_failures": 0, "commits": 0,
                      "data_loss_skips": 0}
        self.metrics_endpoint: MetricsEndpoint | None = None  # /metrics (metricsPort), owned here
        # shared with the members' threads (handover checks): the last end handed to Spark, the last committed
        self._handover_lock = threading.Lock()
        self._last_end: SourceOffset | None = None
        self._held: set[TopicPartition] | None = None  # partitions planned at the last trigger (None: none yet)
        # read by the metrics endpoint's thread: replaced as a whole, never mutated
        self._latest: dict[TopicPartitionKey, int] = {}  # high watermarks probed at the last trigger
        self._committed_by: dict[str, dict[TopicPartitionKey, int]] = {}  # member name -> its last commits

    # -- lifecycle ----------------------------------------------------------------------------
    @property
    def query(self) -> str:
        """The query id ("" for an offset of an earlier build), known from the first trigger on."""
        if self._query is None:
            raise PlanningFailed("the crkafka planner has no query id before its first trigger")
        return self._query

    @property
    def client(self) -> CoordinatorClient:
        """The coordinator client of the query's control variables, created at the first trigger."""
        if self._client is None:
            raise PlanningFailed("the crkafka planner has no coordinator client before its first trigger")
        return self._client

    @property
    def group(self) -> str:
        """The consumer group (kafka.group.id, or groupIdPrefix + the query id)."""
        return self.options.group_for(self.query)

    @property
    def coordinator_group(self) -> str:
        return coordinator_group(self.group, self.query)

    def _start_for(self, offset: SourceOffset) -> None:
        from coordinator.client import CoordinatorClient

        if offset.query:
            self._query = offset.query
        elif offset.positions:
            self._query = ""  # an offset of an earlier build: the plain group.id
        else:
            self._query = new_query_id()
        if self.options.metrics_port is not None:  # first: a port in use fails before anyone joins the group
            endpoint = MetricsEndpoint(runner_registry(lambda: dict(self.stats), self.member_offsets),
                                       self.options.metrics_port, self.options.metrics_host)
            endpoint.start()
            self.metrics_endpoint = endpoint
        client = self._client = CoordinatorClient(self.options.coordinator, timeout=COORDINATOR_TIMEOUT_S)
        self.members = [GroupMember(self.options, self.group, i) for i in range(self.options.members)]
        for member in self.members:
            client.register(self.coordinator_group, self.options.region_index, member.name)
            member.handover = self._handed_over
            member.start()
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        for member in self.members:
            if not member.wait_joined(max(0.0, deadline - time.monotonic())):
                member.check()
                raise PlanningFailed(f"{member.name} got no assignment from group {self.group!r} "
                                     f"within {JOIN_TIMEOUT_S}s")
        log.info("crkafka: %d members joined group %s, coordinator group %s (%s)", len(self.members),
                 self.group, self.coordinator_group, self.options.describe_subscription())

    def member_offsets(self) -> list[MemberOffsets]:
        """Each member's assignment and offsets (the endpoint's thread asks at every scrape)."""
        with self._handover_lock:
            planned = self._last_end.positions if self._last_end is not None else {}
        latest, committed_by = self._latest, self._committed_by
        out = []
        for member in list(self.members):
            held = frozenset(_key(tp) for tp in member.assignment()[0])
            out.append(MemberOffsets(
                name=member.name, assigned=held,
                position={tp: off for tp, off in planned.items() if tp in held},
                end_offset={tp: off for tp, off in latest.items() if tp in held},
                committed_offset=committed_by.get(member.name, {})))
        return out

    def _own(self, offset: SourceOffset) -> SourceOffset:
        if offset.query == self._query:
            return offset
        if offset.query:
            raise PlanningFailed(f"offset of query {offset.query!r} handed to the runner of query {self._query!r}")
        return offset.with_query(self.query)

    def _ensure_started(self, offset: SourceOffset) -> SourceOffset:
        if self._closed:
            raise PlanningFailed("the crkafka planner is closed")
        if not self.members:
            self._start_for(offset)
        for member in self.members:
            member.check()
        return self._own(offset)

    def close(self) -> None:
        """Close the members (they leave the group) and unregister; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._commit_last_planned()
        for member in self.members:
            member.close()
        if self._client is not None:
            for member in self.members:
                try:
                    self._client.unregister(self.coordinator_group, member.name)
                except Exception:  # closing: logged with its traceback, the rest goes on
                    log.exception("crkafka: unregistering %s failed", member.name)
            self._client.close()
        self.probe.close()
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.stop()
        log.info("crkafka: planner closed (%s)", self.stats)

    def _commit_last_planned(self) -> None:
        """At close, commit the last end handed to Spark, so that the group's next owner
        of these partitions starts after it: Spark's offset log holds that batch and a
        restart from the checkpoint location replays it (Spark delivers no commit for
        the batch in flight at a stop). Best effort: a failure is logged."""
        with self._handover_lock:
            last, committed = self._last_end, self._committed
        if last is None or not self.members or (committed is not None and committed.epoch >= last.epoch):
            return
        try:
            self._commit_now(last)
        except Exception:  # closing: logged with its traceback, the members still leave
            log.exception("crkafka: committing the last planned end at close failed")

    # -- planning ----------------------------------------------------------------------------
    def assigned(self) -> dict[TopicPartition, GroupMember]:
        owners = {}
        for member in self.members:
            tps, _ = member.assignment()
            owners.update({tp: member for tp in tps})
        return owners

    def latest_offset(self, start: SourceOffset, limit: int | None) -> SourceOffset:
        start = self._ensure_started(start)
        if self._pending_commit is not None:
            self._commit_now(self._pending_commit)
        owned = sorted(self.assigned())
        begins = {_key(tp): start.positions[_key(tp)] for tp in owned if _key(tp) in start.positions}
        first = self._start_positions(start, [tp for tp in owned if _key(tp) not in start.positions])
        begins.update(first)
        moved_in = [tp for tp in owned if self._held is not None and tp not in self._held]
        for tp, committed in self._committed_of(moved_in).items():
            if committed > begins[_key(tp)]:  # another consumer of the group read up to its commit
                log.info("crkafka: %s[%d] handed over at the group's commit %d (this query was at %d)",
                         tp.topic, tp.partition, committed, begins[_key(tp)])
                begins[_key(tp)] = first[_key(tp)] = committed
        self._held = set(owned)
        latest = {_key(tp): end for tp, end in self.probe.ends(owned).items()}
        self._latest = latest
        self._check_data_loss(begins, latest)
        ends = capped_ends(begins, latest, limit)
        positions = {**start.positions, **ends}
        if positions == start.positions and not first:
            end = self._idle_end(start)
        else:
            end = SourceOffset(epoch=start.epoch + 1, positions=positions, first=first, query=start.query)
            self.stats["batches"] += 1
            self.stats["planned_rows"] += sum(ends[tp] - begins[tp] for tp in ends)
        with self._handover_lock:
            self._last_end = end
        return end

    def _check_data_loss(self, begins: dict[TopicPartitionKey, int], latest: dict[TopicPartitionKey, int]) -> None:
        """Partitions whose end is below their start (step 4 of the module doc): fail,
        or move their start to the end (``begins`` is changed in place)."""
        for key, begin in sorted(begins.items()):
            end = latest.get(key)
            if end is None or end >= begin:
                continue
            topic, partition = key
            if self.options.fail_on_data_loss:
                raise DataLossInPlan(
                    f"crkafka: {topic}:{partition}'s offset went from {begin} back to {end} (the end of its log): "
                    f"some data may have been lost (the topic was deleted and created again, or startingOffsets "
                    f"names an offset past the end). Set the source option failOnDataLoss=false to go on from {end}")
            self.stats["data_loss_skips"] += 1
            log.warning("crkafka: %s:%d's offset went from %d back to %d (the end of its log): some data may have "
                        "been lost; going on from %d (failOnDataLoss=false)", topic, partition, begin, end, end)
            begins[key] = end

    def _committed_of(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets of partitions moved to this query by a rebalance."""
        return self.members[0].committed(tps) if tps else {}

    def _handed_over(self, revoked: set[TopicPartition]) -> bool:
        """True once every range planned for ``revoked`` is committed (a member's thread asks)."""
        with self._handover_lock:
            planned = self._last_end.positions if self._last_end is not None else {}
            committed = self._committed.positions if self._committed is not None else {}
        return all(committed.get(_key(tp), -1) >= planned[_key(tp)] for tp in revoked if _key(tp) in planned)

    def _idle_end(self, start: SourceOffset) -> SourceOffset:
        if not start.positions:
            return start
        if self._committed is not None and self._committed.same_positions(start):
            return start
        if self._pending_commit is not None and self._pending_commit.same_positions(start):
            return start  # Spark delivered this commit already: it is retried here
        self.stats["idle_bumps"] += 1
        return SourceOffset(epoch=start.epoch + 1, positions=start.positions, query=start.query)

    def _start_positions(self, start: SourceOffset, tps: list[TopicPartition]) -> dict[TopicPartitionKey, int]:
        """Control variables of partitions absent from ``start`` (put once, first writer wins)."""
        if not tps:
            return {}
        known = self.client.get_initial_offsets(self.coordinator_group)
        missing = [tp for tp in tps if _key(tp) not in known]
        if missing:
            first_start = not known and not start.positions
            computed = self._configured(missing) if first_start else self.probe.beginning(missing)
            if not first_start:
                log.info("crkafka: partitions first seen after the query's first start begin at earliest: %s",
                         sorted(map(str, missing)))
            known.update(self.client.put_initial_offsets(self.coordinator_group,
                                                          {_key(tp): off for tp, off in computed.items()}))
        return {_key(tp): known[_key(tp)] for tp in tps}

    def _configured(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The configured start position of ``tps`` at the query's first start (startingOffsets ...)."""
        return start_offsets(self.options.starting_or(StartKind.LATEST), tps, self.probe, self.members[0].committed)

    # -- commit ------------------------------------------------------------------------------
    def commit(self, end: SourceOffset) -> None:
        end = self._ensure_started(end)
        newest = self._pending_commit or self._committed
        if newest is not None and end.epoch <= newest.epoch:
            return  # re-delivered after a restart, or older than what is committed
        self._commit_now(end)

    def _commit_now(self, end: SourceOffset) -> None:
        owners = {tp: member for member in self.members for tp in member.committable()}
        parts: dict[str, dict[TopicPartition, int]] = {}
        for (topic, partition), off in end.positions.items():
            owner = owners.get(TopicPartition(topic, partition))
            if owner is not None:  # a partition held by another member of the group now is its own to commit
                parts.setdefault(owner.name, {})[TopicPartition(topic, partition)] = off
        try:
            # every member's commit queued first, then waited for: side by side, one shared deadline
            queued = [(member, member.submit_commit(parts.get(member.name, {}))) for member in self.members]
            deadline = time.monotonic() + COMMIT_TIMEOUT_S + CALL_MARGIN_S
            for member, fut in queued:
                member.wait_commit(fut, max(0.0, deadline - time.monotonic()))
        except MemberFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - kept pending and retried (see the module doc)
            self.stats["commit_failures"] += 1
            self._pending_commit = end
            log.warning("crkafka: committing epoch %d to Kafka failed (%r); retried at the next trigger",
                        end.epoch, exc)
            return
        self._pending_commit = None
        committed_by = {name: dict(offsets) for name, offsets in self._committed_by.items()}
        for name, offsets in parts.items():
            committed_by.setdefault(name, {}).update({_key(tp): off for tp, off in offsets.items()})
        self._committed_by = committed_by
        with self._handover_lock:
            self._committed = end
        self.stats["commits"] += 1


__all__ = ["JOIN_TIMEOUT_S", "PlanningFailed", "QueryPlanner", "batch_ranges"]
