"""The driver side of the partitioned reader: plans offset ranges, commits, touches no rows.

:class:`QueryPlanner` lives in Spark's long-lived source runner process (never
pickled) and is driven by the reader's ``latestOffset``, ``partitions`` and
``commit`` on the runner's main thread. It owns the query's group members
(:class:`~cr_consumer.spark.membership.GroupMember`: they hold the assignment
and commit, they fetch nothing), a :class:`~cr_consumer.spark.watermarks.WatermarkProbe`
for end offsets, and the coordinator client of the query's control variables.
What it commits and which ranges it reads follow the ownership rules of
:mod:`cr_consumer.spark.ownership` (several queries may share the group).

Planning batch N+1 from ``start`` (= end[N]), :meth:`QueryPlanner.latest_offset`:

1. First call of this runner: draw or reuse the query id (``start``'s, or a
   new one from an empty checkpoint location: :mod:`cr_consumer.spark.control`),
   register the members in the query's coordinator group, start them and
   wait (bounded by :func:`~cr_consumer.spark.query_members.join_timeout_s`)
   until each has its first assignment.
2. Partitions held now that were not held at the last trigger (all of them
   after a restart) are *adopted*: the group's committed offset of each is
   read, and becomes its floor (ownership step 3).
3. ``start`` is in Spark's commit log (Spark plans the next batch only after
   the sink committed the last one), so ``start`` is committed to the group
   now (ownership steps 1-2); a failure is logged, kept and retried at the
   next trigger and at close.
4. The partitions planned are the union of the members' assignments. Each
   starts at ``start``'s position, or at its adopted commit when that is
   ahead; a partition absent from ``start`` starts at its control variable in
   the coordinator, put once (first writer wins): the configured start
   position (``startingOffsets`` ...) while the query's control variables are
   empty (its first start), otherwise its earliest offset (a partition that
   appeared later: a new topic on a pattern), as in Spark. A partition whose
   range does not start at ``start``'s position gets a ``from`` entry in the end
   offset, so a replay reads the same range.
5. End offsets: the high watermark of every planned partition, capped by
   the AvailableNow target when the run has one (below), then by the read
   limit (:func:`~cr_consumer.spark.ranges.capped_ends`). A high
   watermark below the partition's start is data loss, as in Spark's Kafka
   source (the topic was deleted and created again, or ``startingOffsets``
   named an offset past the end): with ``failOnDataLoss=true`` the query fails
   (:class:`~cr_consumer.spark.data_loss.DataLossInPlan`, naming the partition
   and the option); otherwise a warning is logged and the partition goes on
   from the high watermark (the offsets in between are skipped: an empty range
   ends there).
6. Nothing new: hand back ``start`` (Spark runs no batch).

``trigger(availableNow=True)``: Spark calls :meth:`QueryPlanner.prepare_available_now`
once, before the run's first ``latestOffset``; it records the *target*, the high
watermark of every partition the subscription covers at that moment
(:func:`~cr_consumer.spark.positions.subscribed_partitions`, read by the
watermark probe). Every end of the run is capped by it (step 5): a partition
ends at its target, and one that has none (it appeared after the target was
taken) gets no records in this run. So the run plans batches under the read
limit until every held partition is at its target, and then hands back
``start`` (step 6), which ends the run. The end of the run's last batch is
committed by that last ``latestOffset`` (step 3), the one that finds nothing
new. A later run takes a new target and reads what arrived since.

``partitions(start, end)`` (:meth:`QueryPlanner.ranges`): for a batch this
runner planned, the ranges ``[start, end)`` split by ``minPartitions``
(:func:`~cr_consumer.spark.ranges.batch_ranges`). For a batch replayed
from Spark's offset log (planned by an earlier run of the query), the members
join first and only the part still the query's own is read (ownership step 4,
:class:`~cr_consumer.spark.replays.Replays`); asked again for the same batch,
the same ranges are handed back.

``commit(end)`` (:meth:`QueryPlanner.commit`): Spark's late word that ``end``
is in its commit log; already committed at the next ``latestOffset`` in the
normal case, so usually nothing is left to do (idempotent by epoch). How a
commit is made, and the floors it never goes below:
:class:`~cr_consumer.spark.group_commits.GroupCommits`.

``close()`` (query stop, SIGTERM, the JVM gone): the newest batch in Spark's
commit log is committed (a stop may let a batch finish without a progress
event: ``sink_notices.py`` step 4), a commit still pending is retried, then
the members leave the group. A batch in flight is *not* committed: whoever
holds its partitions next reads it (ownership step 1).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from cr_consumer.kafka.client import TopicPartition
from cr_consumer.operator.metrics import MetricsEndpoint
from cr_consumer.spark import ownership
from cr_consumer.spark.control import coordinator_group, new_query_id
from cr_consumer.spark.data_loss import skip_lost
from cr_consumer.spark.group_commits import GroupCommits
from cr_consumer.spark.handed_ends import HandedEnds
from cr_consumer.spark.initial_positions import initial_positions
from cr_consumer.spark.membership import GroupMember
from cr_consumer.spark.metrics import MemberOffsets, runner_registry
from cr_consumer.spark.offsets import SourceOffset, TopicPartitionKey, partition_key
from cr_consumer.spark.options import SourceOptions
from cr_consumer.spark.planning_failed import PlanningFailed
from cr_consumer.spark.positions import subscribed_partitions
from cr_consumer.spark.query_members import leave, start_members, wait_joined
from cr_consumer.spark.ranges import OffsetRange, batch_ranges, capped_ends
from cr_consumer.spark.replays import Replays
from cr_consumer.spark.sink_notices import NoticeReceiver, SinkNotice
from cr_consumer.spark.watermarks import WatermarkProbe

if TYPE_CHECKING:
    from coordinator.client import CoordinatorClient

log = logging.getLogger(__name__)

#: Timeout of each coordinator request.
COORDINATOR_TIMEOUT_S = 10.0


class QueryPlanner:
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.members: list[GroupMember] = []
        self.probe = WatermarkProbe(options)
        self._client: CoordinatorClient | None = None  # created at start
        self._query: str | None = None
        self._closed = False
        self.stats = {
            "batches": 0,
            "planned_rows": 0,
            "commit_failures": 0,
            "commits": 0,
            "data_loss_skips": 0,
            "replayed_batches": 0,
            "replay_rows_given_up": 0,
        }
        self.metrics_endpoint: MetricsEndpoint | None = None  # /metrics (metricsPort), owned here
        #: partitions adopted (their floors known) and held or being handed over (None: no adoption yet);
        #: replaced as a whole (the notice thread reads it)
        self._held: frozenset[TopicPartition] | None = None
        self._notices: NoticeReceiver | None = None
        self.commits = GroupCommits(self.members, self.stats)
        self._adopted: dict[TopicPartitionKey, int] = {}  # group commits of newly held partitions, for the next plan
        self._replays = Replays(self.stats)  # batches replayed from Spark's offset log (ownership step 4)
        #: trigger(availableNow=True): each partition's end for this run (None: no such trigger)
        self._target: dict[TopicPartitionKey, int] | None = None
        #: the ends handed to Spark (planned or replayed): shared with the members' threads (handover
        #: checks), the notice thread and the metrics endpoint's
        self._handed = HandedEnds()
        # read by the metrics endpoint's thread: replaced as a whole, never mutated
        self._latest: dict[TopicPartitionKey, int] = {}  # high watermarks probed at the last trigger

    # -- lifecycle ----------------------------------------------------------------------------
    @property
    def query(self) -> str:
        """The query id, known from the first trigger on."""
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

        self._query = offset.query or new_query_id()  # none: the initial offset of a new query
        if self.options.metrics_port is not None:  # first: a port in use fails before anyone joins the group
            endpoint = MetricsEndpoint(
                runner_registry(lambda: dict(self.stats), self.member_offsets),
                self.options.metrics_port,
                self.options.metrics_host,
            )
            endpoint.start()
            self.metrics_endpoint = endpoint
        client = self._client = CoordinatorClient(self.options.coordinator_endpoint(), timeout=COORDINATOR_TIMEOUT_S)
        self.members.extend(GroupMember(self.options, self.group, i) for i in range(self.options.members))
        start_members(self.members, client, self.coordinator_group, self.options.region_index, self._handed_over)
        self._notices = NoticeReceiver(self._query, self.sink_notice)
        self._notices.start()
        wait_joined(self.members, self.options, self.group)
        log.info(
            "crkafka: %d members joined group %s, coordinator group %s (%s)",
            len(self.members),
            self.group,
            self.coordinator_group,
            self.options.describe_subscription(),
        )

    def member_offsets(self) -> list[MemberOffsets]:
        """Each member's assignment and offsets (the endpoint's thread asks at every scrape)."""
        planned = self._handed.planned()
        latest, committed_by = self._latest, self.commits.committed_by
        out = []
        for member in list(self.members):
            held = frozenset(partition_key(tp) for tp in member.assignment()[0])
            out.append(
                MemberOffsets(
                    name=member.name,
                    assigned=held,
                    position={tp: off for tp, off in planned.items() if tp in held},
                    end_offset={tp: off for tp, off in latest.items() if tp in held},
                    committed_offset=committed_by.get(member.name, {}),
                )
            )
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
        """Retry a pending commit, close the members (they leave the group) and unregister;
        safe to call twice. The batch in flight stays uncommitted (module doc)."""
        if self._closed:
            return
        self._closed = True
        if self._notices is not None:
            self._notices.stop()
        if self._held is not None and self.members:
            try:
                found = self.commits.newest_in_commit_log(self.query)
                if found is not None and self._handed.was_handed(found):
                    self.commits.sink_committed(found, self._held)
                self.commits.retry_pending(self._held)
            except Exception:  # closing: logged with its traceback, the members still leave
                log.exception("crkafka: committing the last completed batch at close failed")
        if self._client is not None:  # none: no member was created either
            leave(self.members, self._client, self.coordinator_group)
        self.probe.close()
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.stop()
        log.info("crkafka: planner closed (%s)", self.stats)

    # -- holding partitions -------------------------------------------------------------------
    def assigned(self) -> dict[TopicPartition, GroupMember]:
        owners = {}
        for member in self.members:
            tps, _ = member.assignment()
            owners.update({tp: member for tp in tps})
        return owners

    def _adopt_new(self) -> list[TopicPartition]:
        """Step 2: the partitions held now; those newly held get the group's commit as
        their floor, kept for the next plan (ownership step 3)."""
        owned = sorted(self.assigned())
        previous = self._held or frozenset()
        new = [tp for tp in owned if self._held is None or tp not in previous]
        committed = {partition_key(tp): off for tp, off in self._committed_of(new).items()}
        self.commits.raise_floors(committed)
        self._adopted.update(committed)
        handing_over = {tp for member in self.members for tp in member.committable()} - set(owned)
        self._held = frozenset(owned) | (previous & handing_over)
        return owned

    def _committed_of(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The group's committed offsets of ``tps`` (absent: never committed)."""
        return self.members[0].committed(tps) if tps else {}

    def _handed_over(self, revoked: set[TopicPartition]) -> bool:
        """True once every range planned for ``revoked`` is committed (a member's thread asks)."""
        return self.commits.handed_over([partition_key(tp) for tp in revoked], self._handed.planned())

    # -- planning ----------------------------------------------------------------------------
    def latest_offset(self, start: SourceOffset, limit: int | None) -> SourceOffset:
        start = self._ensure_started(start)
        owned = self._adopt_new()
        self.commits.sink_committed(start, self._held or frozenset())
        begins = {
            partition_key(tp): start.positions[partition_key(tp)]
            for tp in owned
            if partition_key(tp) in start.positions
        }
        first = initial_positions(
            self.client,
            self.coordinator_group,
            self.options,
            self.probe,
            self.members[0].committed,
            start,
            [tp for tp in owned if partition_key(tp) not in start.positions],
        )
        begins.update(first)
        resumed = self._replays.resume(begins)
        for key, resume in resumed.items():  # back after a replay gave it up (ownership step 4)
            if resume != begins[key]:
                begins[key] = first[key] = resume
        if start.positions:  # not the query's first start: the group's commit may be ahead (ownership step 3)
            for key, committed in sorted(self._adopted.items()):
                if key in begins and ownership.begin_after_adoption(begins[key], committed) != begins[key]:
                    log.info(
                        "crkafka: %s[%d] taken over at the group's commit %d (this query was at %d)",
                        key[0],
                        key[1],
                        committed,
                        begins[key],
                    )
                    begins[key] = first[key] = committed
        self._adopted.clear()
        latest = {partition_key(tp): end for tp, end in self.probe.ends(owned).items()}
        self._latest = latest
        self.stats["data_loss_skips"] += skip_lost(begins, latest, self.options.fail_on_data_loss)
        if self._target is not None:  # nothing past the run's target; capped_ends keeps end >= begin
            latest = {key: min(end, self._target.get(key, begins[key])) for key, end in latest.items()}
        ends = capped_ends(begins, latest, limit)
        with self._handed.handing() as hand:
            # Ownership step 5 needs the plan and a revocation ordered: a member records a
            # revocation, then asks _handed_over, which reads the plan under this lock. A
            # partition revoked since ``owned`` was read is left out of this batch (its
            # handover saw the previous end, so its next owner starts there); one revoked
            # after this read waits for this batch's commit.
            held_now = {partition_key(tp) for tp in self.assigned()}
            for key in sorted(set(ends) - held_now):
                del ends[key]
                first.pop(key, None)
                if key in resumed:
                    self._replays.give_back(key, resumed[key])
            positions = {**start.positions, **ends}
            if positions == start.positions and not first:
                end = start
            else:
                end = SourceOffset(epoch=start.epoch + 1, positions=positions, first=first, query=start.query)
                self.stats["batches"] += 1
                self.stats["planned_rows"] += sum(ends[tp] - begins[tp] for tp in ends)
            hand(end)
        return end

    def prepare_available_now(self) -> None:
        """trigger(availableNow=True): take the run's target (module doc). Joins no group:
        the target covers every partition subscribed now, whichever member gets it."""
        tps = subscribed_partitions(self.options, self.probe, topics_must_exist=False)
        self._target = {partition_key(tp): end for tp, end in self.probe.ends(tps).items()}
        log.info("crkafka: availableNow: the run ends at the high watermarks of %d partitions now", len(self._target))

    def ranges(self, start: SourceOffset, end: SourceOffset) -> list[OffsetRange]:
        """The Spark tasks of the batch ``(start, end]`` (``partitions()``; module doc)."""
        skip = not self.options.fail_on_data_loss
        replayed = self._replays.cached(start, end)
        if replayed is not None:
            return replayed
        if self._handed.is_last(end):
            return batch_ranges(start, end, self.options.min_partitions, skip_backwards=skip)
        asked = (start, end)
        end = self._ensure_started(end)
        owned = self._adopt_new()
        holding = [partition_key(tp) for tp in owned]
        out = self._replays.replay(asked, end, holding, self.commits.floors(), self.options.min_partitions, skip)
        with self._handed.handing() as hand:
            hand(end)
        return out

    # -- commit ------------------------------------------------------------------------------
    def commit(self, end: SourceOffset) -> None:
        """Spark's ``commit(end)``: ``end`` is in its commit log (usually committed already)."""
        end = self._ensure_started(end)
        if self._held is None:
            self._adopt_new()  # floors first: never commit below another owner's commit
        self.commits.sink_committed(end, self._held or frozenset())

    def sink_notice(self, notice: SinkNotice) -> None:
        """A sink-commit notice (``sink_notices.py``, on the receiver's thread): commit its end
        now rather than at the next trigger. Nothing before the first adoption, and nothing
        but an end this runner handed to Spark (any local process can reach the socket)."""
        if not self._handed.was_handed(notice.end):
            log.warning(
                "crkafka: dropped a sink-commit notice of epoch %d: not an end this query handed to Spark",
                notice.end.epoch,
            )
            return
        if notice.checkpoint is not None:
            self.commits.checkpoint = notice.checkpoint
        held = self._held
        if held is not None and not self._closed:
            self.commits.sink_committed(notice.end, held)


__all__ = ["QueryPlanner"]
