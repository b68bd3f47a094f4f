"""What a query commits to its consumer group, and when (:class:`GroupCommits`).

The planner's two threads commit: the runner's main thread (``latestOffset``,
``commit``, close) and the sink-commit notices' receiver; the members' threads
ask whether a revoked partition is handed over. The rules are
:mod:`cr_consumer.spark.ownership`'s steps 1, 2 and 5:

1. :meth:`GroupCommits.sink_committed`: Spark committed the batch ending at
   ``end`` (the next ``latestOffset``'s start, ``commit(end)``, a notice, or
   Spark's commit log read at close: :meth:`GroupCommits.newest_in_commit_log`).
   It is committed unless a newer end is; a failed commit is kept pending and
   retried with the next end, and at close (:meth:`GroupCommits.retry_pending`).
2. A commit goes through the member holding each partition, among those the
   planner adopted (their floors known) and held or being handed over, all
   members side by side, bounded by ``COMMIT_TIMEOUT_S``; never below a
   partition's floor.
3. Floors: the group's committed offset of each partition as this query knows
   it, raised by the planner's adoptions (:meth:`GroupCommits.raise_floors`)
   and by its own commits. :meth:`GroupCommits.handed_over` (a member's thread)
   says whether every range planned for revoked partitions is below them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import urlparse

from cr_consumer.kafka.client import TopicPartition
from cr_consumer.spark import ownership
from cr_consumer.spark.control import last_committed_end
from cr_consumer.spark.member_requests import CALL_MARGIN_S, COMMIT_TIMEOUT_S, MemberFailed
from cr_consumer.spark.membership import GroupMember
from cr_consumer.spark.offsets import SourceOffset, TopicPartitionKey, partition_key

log = logging.getLogger(__name__)


class GroupCommits:
    def __init__(self, members: Sequence[GroupMember], stats: dict[str, int]) -> None:
        self._members = members  # the planner's list, filled at its start
        self._stats = stats
        self._lock = threading.RLock()  # the main thread's and the notice receiver's commits
        self._committed_epoch = -1  # the newest sink-committed end committed to the group
        self._pending: SourceOffset | None = None  # a sink-committed end not committed yet
        self._floors_lock = threading.Lock()  # the floors are also read by the members' threads
        self._floors: dict[TopicPartitionKey, int] = {}
        #: member name -> its last commits (read by the metrics endpoint's thread: replaced as a whole)
        self.committed_by: dict[str, dict[TopicPartitionKey, int]] = {}
        #: the query's checkpoint location (a URI), from the sink-commit notices
        self.checkpoint: str | None = None

    # -- floors ------------------------------------------------------------------------------
    def raise_floors(self, committed: Mapping[TopicPartitionKey, int]) -> None:
        with self._floors_lock:
            for key, off in committed.items():
                self._floors[key] = max(off, self._floors.get(key, -1))

    def floors(self) -> dict[TopicPartitionKey, int]:
        with self._floors_lock:
            return dict(self._floors)

    def handed_over(self, revoked: Iterable[TopicPartitionKey], planned: Mapping[TopicPartitionKey, int]) -> bool:
        """Step 3: every range planned for ``revoked`` is committed."""
        with self._floors_lock:
            return ownership.handed_over(revoked, planned, self._floors)

    # -- commits -----------------------------------------------------------------------------
    def sink_committed(self, end: SourceOffset, adopted: frozenset[TopicPartition]) -> None:
        """Step 1: ``end`` is in Spark's commit log: commit it unless a newer one is."""
        with self._lock:
            newest = self._pending.epoch if self._pending is not None else self._committed_epoch
            if end.positions and end.epoch > newest:
                self._pending = end
            if self._pending is not None:
                self._commit(self._pending, adopted)

    def retry_pending(self, adopted: frozenset[TopicPartition]) -> None:
        """Step 1 at close: a commit that failed earlier, once more."""
        with self._lock:
            if self._pending is not None:
                self._commit(self._pending, adopted)

    def newest_in_commit_log(self, query: str) -> SourceOffset | None:
        """Step 1 at close: the end of the newest batch of Spark's commit log, which a stop
        may have let finish without a progress event (the caller commits it). Only a
        checkpoint location on a local file system is read."""
        location = self.checkpoint
        if location is None:
            return None
        url = urlparse(location)
        if url.scheme not in ("", "file"):
            log.info("crkafka: the checkpoint location %s is not local: its commit log is not read at close", location)
            return None
        found = last_committed_end(url.path, query)
        return SourceOffset.from_json(found) if found is not None else None

    def _commit(self, end: SourceOffset, adopted: frozenset[TopicPartition]) -> None:
        """Step 2 (the caller holds ``_lock``); a failure keeps ``end`` pending."""
        owners = {partition_key(tp): member for member in self._members for tp in member.committable() if tp in adopted}
        with self._floors_lock:
            offsets = ownership.commit_positions(end.positions, owners, self._floors)
        parts: dict[str, dict[TopicPartition, int]] = {}
        for key, off in offsets.items():
            parts.setdefault(owners[key].name, {})[TopicPartition(*key)] = off
        try:
            # every member's commit queued first, then waited for: side by side, one shared deadline
            queued = [(member, member.submit_commit(parts.get(member.name, {}))) for member in self._members]
            deadline = time.monotonic() + COMMIT_TIMEOUT_S + CALL_MARGIN_S
            for member, fut in queued:
                member.wait_commit(fut, max(0.0, deadline - time.monotonic()))
        except MemberFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - kept pending and retried (step 1)
            self._stats["commit_failures"] += 1
            log.warning(
                "crkafka: committing epoch %d to Kafka failed (%r); retried at the next trigger", end.epoch, exc
            )
            return
        self._pending = None
        self._committed_epoch = max(self._committed_epoch, end.epoch)
        committed_by = {name: dict(sent) for name, sent in self.committed_by.items()}
        for name, sent in parts.items():
            committed_by.setdefault(name, {}).update({partition_key(tp): off for tp, off in sent.items()})
        self.committed_by = committed_by
        self.raise_floors(offsets)
        if offsets:
            self._stats["commits"] += 1


__all__ = ["GroupCommits"]
