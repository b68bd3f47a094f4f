"""The drain's Kafka commit, and its deferral under cooperative rebalancing.

Owned by the operator's region handlers (``cr_consumer/operator/handlers.py``,
``RegionHandlers.drain`` step 2d); every method runs on the event thread (the
drain's commit, the reset's seek, the after-poll retry and the close all run
there), so the deferred offsets need no lock.

1. Eager rebalancing: the drain commits its offsets in one synchronous commit
   (:meth:`DrainCommit.commit`); a failure fails the drain (DrainError).
2. Cooperative rebalancing: the commit waits for a stable group generation,
   and a refused one does not fail the drain (:meth:`DrainCommit.commit`'s
   steps): the checkpoint holds the offsets.
3. A deferred commit is done after a poll once the group is stable
   (:meth:`DrainCommit.after_poll`), bounded at a graceful close
   (:meth:`DrainCommit.at_close`), dropped by a reset (:meth:`DrainCommit.drop`:
   the region rewound below it) and replaced by the next drain's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Protocol

from coordinator.protocol.common.partitions import offsets_text
from cr_consumer.kafka.client import GroupMembership, KafkaClient, MemberFenced, TopicPartition
from cr_consumer.operator.metrics import OperatorMetrics
from cr_consumer.operator.region import DrainError

log = logging.getLogger(__name__)

#: Bound on the drain's synchronous commit (and the drain timeout, if lower):
#: kafka-python retries a commit during a rebalance until its timeout, on the
#: event thread, while the rebalance itself needs that thread to poll; so a
#: commit that cannot complete (group rebalancing, broker gone) fails the drain
#: after this long instead of freezing the group join for the drain timeout.
COMMIT_TIMEOUT_S = 5.0
#: Poll timeout while a closing cooperative operator waits for its group's
#: rebalance to end (:meth:`DrainCommit.at_close`): short, so the wait ends soon
#: after the group is stable.
CLOSE_POLL_MS = 50


class AssignmentWait(Protocol):
    """Whether this member waits for an assignment (``rebalance.Rebalancer``)."""

    joining: bool


def commit_deferred(group: GroupMembership | None, joining: bool) -> str | None:
    """Why a cooperative drain must not commit to Kafka now (see
    ``DrainCommit.commit``), else None. ``group``: the client's ``group()``
    (or None); ``joining``: waiting for an assignment (rebalance.py)."""
    if group is None:
        return "no group membership yet"
    if group.rebalancing:
        return "the group is rebalancing"
    if joining:
        return "waiting for an assignment"
    return None


class DrainCommit:
    """One operator's drain commits (see the module docstring); event thread only."""

    #: Cooperative: the last drain's offsets whose Kafka commit waits for a
    #: stable group (None: nothing waits). Event thread only.
    _deferred: dict[TopicPartition, int] | None

    def __init__(self, name: str, *, cooperative: bool, rebalancer: AssignmentWait, stats: OperatorMetrics) -> None:
        self._name = name
        self._cooperative = cooperative
        self._rebalancer = rebalancer
        self._stats = stats
        self._deferred = None

    def commit(self, consumer: KafkaClient, offsets: dict[TopicPartition, int], timeout_ms: int) -> None:
        """The drain's Kafka commit of ``offsets`` (steps 1 and 2).

        Eager: one synchronous commit; a failure raises DrainError.

        Cooperative: the region's consistent offsets are the coordinator's
        checkpoint (the members' checkpoint answers; resets and later
        assignments seek to them); the committed offsets in Kafka only serve
        the lag monitoring and a job's very first start. So a drain goes on
        while the group rebalances (the survivors keep processing, and their
        output must be published), and:

        1. while this consumer is not in a stable generation, it does not
           commit at all: a commit during a join is refused and makes the
           consumer rejoin (on tansu, joins then never finished); the next
           drain in a stable generation commits the newer offsets;
           When it becomes stable, the deferred offsets (of the partitions
           still assigned) are committed after a poll (:meth:`after_poll`),
           unless a reset came first;
        2. otherwise it commits; a refusal (a rebalance the broker began
           since, a coordinator moving, a timeout) is logged with the offsets
           and does not fail the drain: the checkpoint still holds them, and
           the next drain commits again;
        3. except when the consumer is no longer the group's member: a commit
           answered :class:`MemberFenced` (unknown member, stale generation),
           or a client that reports a membership without a member id, fails
           the drain (DrainError: the region resets). Such a consumer was
           away longer than the session timeout (a paused process, a long
           stall): the broker may have given its partitions to another member,
           which processed them from the checkpoint too, while this one still
           holds its records; its checkpoint answer would publish them twice.
           Its rebalance listener reports the partitions lost at its next
           poll; the reset keeps this cycle's output out meanwhile.
        """
        if not self._cooperative:
            try:
                consumer.commit(offsets, timeout_ms)
            except Exception as exc:
                raise DrainError(f"{self._name}: committing offsets {offsets_text(offsets)} failed: {exc!r}") from exc
            self._stats.set_committed(offsets)
            return
        group = consumer.group()
        if group is not None and group.member_id is None:
            raise DrainError(
                f"{self._name}: the Kafka consumer is not a member of its group (left or fenced) while "
                f"it holds offsets {offsets_text(offsets)}; this drain must not count"
            )
        why = commit_deferred(group, self._rebalancer.joining)
        if why is not None:
            log.info(
                "%s: Kafka commit of %s deferred until the group is stable (%s); the checkpoint holds them",
                self._name,
                offsets_text(offsets),
                why,
            )
            self._deferred = dict(offsets)
            return
        self._deferred = None
        try:
            self._commit_now(consumer, offsets, timeout_ms, fenced_fails=True)
        except MemberFenced as exc:
            raise DrainError(
                f"{self._name}: the group no longer knows this consumer ({exc}); its partitions may be "
                f"another member's now, so this drain of {offsets_text(offsets)} must not count"
            ) from exc

    def _commit_now(
        self, consumer: KafkaClient, offsets: Mapping[TopicPartition, int], timeout_ms: int, fenced_fails: bool = False
    ) -> None:
        """Commit; a failure is logged (the checkpoint holds the offsets), except
        MemberFenced, which is raised when ``fenced_fails`` (a drain's commit)."""
        try:
            consumer.commit(offsets, timeout_ms)
        except MemberFenced:
            if fenced_fails:
                raise
            log.warning(
                "%s: Kafka commit of %s refused: this consumer is no longer the group's member (its "
                "rebalance listener reports its partitions lost)",
                self._name,
                offsets_text(offsets),
            )
            return
        except Exception as exc:  # noqa: BLE001 - logged with the reason; the checkpoint is the source of truth
            log.warning(
                "%s: Kafka commit of %s failed (%r); the checkpoint holds these offsets, the next drain commits again",
                self._name,
                offsets_text(offsets),
                exc,
            )
            return
        self._stats.set_committed(offsets)

    @property
    def pending(self) -> bool:
        """A drain's Kafka commit still waits for a stable group (read on any thread)."""
        return self._deferred is not None

    def drop(self) -> None:
        """Step 3: a reset rewinds the region below the drain that deferred its commit."""
        self._deferred = None

    def at_close(self, consumer: KafkaClient, wait_s: float) -> None:
        """Step 3, at a graceful close (cooperative): the deferred commit
        waits at most ``wait_s`` for the group's rebalance to end, polling to
        drive it (the operator is CLOSED: nothing polled is submitted), then
        commits as after a poll. Without this a region stopped during a
        rebalance leaves Kafka's committed offsets behind its last checkpoint."""
        deadline = time.monotonic() + wait_s
        while (
            self._deferred is not None
            and time.monotonic() < deadline
            and commit_deferred(consumer.group(), self._rebalancer.joining) is not None
        ):
            consumer.poll(CLOSE_POLL_MS, 1)
        if self._deferred is not None:
            if commit_deferred(consumer.group(), self._rebalancer.joining) is not None:
                log.warning(
                    "%s: closing during a group rebalance: the Kafka commit of %s is not done (the "
                    "checkpoint holds these offsets)",
                    self._name,
                    offsets_text(self._deferred),
                )
                return
            self.after_poll(consumer)

    def after_poll(self, consumer: KafkaClient) -> None:
        """Step 3, after each poll (cooperative): the drain's commit that
        waited for a stable group, once it is stable, for the partitions still
        assigned. A failure is logged and not retried (the next drain commits
        again)."""
        offsets = self._deferred
        if offsets is None or commit_deferred(consumer.group(), self._rebalancer.joining) is not None:
            return
        self._deferred = None
        assigned = consumer.assignment()
        offsets = {tp: off for tp, off in offsets.items() if tp in assigned}
        if offsets:
            self._commit_now(consumer, offsets, int(COMMIT_TIMEOUT_S * 1000))
            log.info("%s: deferred Kafka commit of %s done", self._name, offsets_text(offsets))


__all__ = ["CLOSE_POLL_MS", "COMMIT_TIMEOUT_S", "AssignmentWait", "DrainCommit", "commit_deferred"]
