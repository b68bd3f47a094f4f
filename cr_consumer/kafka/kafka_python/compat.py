"""Work-arounds for four kafka-python 3.0.12 defects, one missing public call and one per-poll cost.

1. pause()/resume() (:func:`unstick_parked_fetches`)

The defect (kafka-python 3.0.12): when a partition is
paused while the fetcher holds parsed records for it, the fetcher parks them
(``_paused_partition_records``) and excludes that partition from every fetch
request until they are restored. ``Fetcher.fetched_records`` restores parked
records only when its in-line slot ``_next_partition_records`` is ``None``,
but a fully consumed slot keeps a drained (empty, falsy) object instead of
``None``. So once something was consumed after the pause, a resumed partition
is never fetched again: it silently stops. The same happens to a partition
that was parked when it was revoked and is assigned again later.

The fix: before each poll, if the in-line slot holds a drained object, set it
to ``None`` (what the fetcher itself does after it parks records). That is
exactly the state the restore code expects; the next ``fetched_records`` call
then restores one parked partition per poll, and records whose offset no longer
matches the position are discarded by the fetcher's own position check.

This touches a private attribute, so it is guarded: it does nothing unless the
attributes look exactly as in the affected versions, and the behaviour is
covered by the operator's backpressure test (``tests/operator/test_operator_backpressure.py``:
fill the queue, pause, resume, and get every record), which fails if a future version changes it.

2. A group join whose result is never used (:func:`keep_completed_joins`)

kafka-python 3.0.12 runs one JoinGroup -> SyncGroup round trip as a task on
its IO thread (``coordinator._join_task``); ``poll()`` waits for it only up to
its own timeout and leaves it in flight, meaning to await it again on the
next poll. Two code paths lose its result:

a. The next poll awaits it only if ``need_rejoin()`` is still True. But a
   rejoin triggered by a subscription change (a pattern subscription that
   now matches a new topic: ``_joined_subscription != subscription``) or by
   a metadata change seen by the leader (``_assignment_snapshot``) does not
   set ``rejoin_needed``; building the JoinGroup request updates
   ``_joined_subscription`` (and the revocation clears the snapshot), so
   ``need_rejoin()`` turns False as soon as the JoinGroup is sent. If the
   first wait times out (on tansu a JoinGroup takes ~session_timeout/2),
   nobody ever awaits the task again: the SyncGroup succeeds in the
   background, its assignment is dropped, the member stays REBALANCING for
   good (no partitions; every commit refused with "not part of an active
   group" / RebalanceInProgressError; its log stops at "Successfully joined
   group"), and the group's other members wait for it.
b. ``join_group_async`` starts a NEW JoinGroup whenever the task ``is_done``,
   also when it finished successfully while no poll was waiting for it
   (pattern subscriptions make this likely: a poll that needs a rejoin first
   waits for a metadata refresh and returns early when that exceeds its
   timeout). The assignment is dropped and the member re-joins, again and
   again on tansu, until one completion happens to land inside a poll.

Neither path is tansu-specific: a real Kafka answers a JoinGroup only when
every member has joined, so a poll timeout shorter than the rebalance hits
(a) there as well.

The fix, installed on the consumer's coordinator instance (so every caller
goes through it; the library's code is otherwise unchanged):

1. ``need_rejoin()`` is also True while a join task exists whose outcome has
   not been consumed (``_join_task is not None``: the library clears it when
   it consumes the outcome) and the member is still REBALANCING (not left,
   reset or closed since), so polls keep driving the join (fixes a).
2. ``join_group_async`` first completes a join task that finished
   successfully while the member is still REBALANCING for it, exactly as the
   library completes an awaited one (rejoining/rejoin_needed cleared, state
   STABLE, heartbeat enabled, ``_on_join_complete_async`` with the received
   assignment, which calls the rebalance listener); then the library's code
   runs: it returns at once, or rejoins if a rejoin is still needed (e.g.
   the metadata changed again during the join) (fixes b). A failed task is
   left to the library, which retries.

Guarded like (1): installed only when the private attributes exist (a
warning is logged otherwise); covered by
``tests/operator/test_operator_start.py::test_pattern_subscription_picks_up_a_new_topic``
and the new-topic drill (``tests/drill/test_drill_scenarios.py``).

3. No public "rejoin now" (:func:`request_rejoin`)

The region's rejoin hint (a member joined or left the region, so a group
rebalance is coming) wants the consumer to rejoin at once; kafka-python has no
public call for it, so the coordinator's own ``request_rejoin()`` is used, on
the event thread, guarded like the others.

4. No fetching during a cooperative rebalance (:func:`fetch_during_cooperative_joins`)

Under the cooperative protocol (KIP-429) a member keeps its partitions through
a rebalance and the Java client keeps fetching them while the join is in
flight. kafka-python 3.0.12's ``KafkaConsumer._poll_once`` returns no records
whenever ``coordinator.poll()`` has not finished the join within the poll's
timeout, so a member fetches nothing for the whole join phase (10 s on tansu
with a 20 s session timeout), exactly as under the eager protocol.

The fix, installed on the coordinator instance when the consumer's assignors
are cooperative: while the member is REBALANCING and still owns partitions,
``coordinator.poll()`` drives the join for at most
:data:`COOPERATIVE_JOIN_WAIT_MS` (the join task runs on the IO thread and
work-around 2 keeps a join that completes between polls) and then lets the
consumer fetch. Revocations still arrive through the rebalance listener when
the join completes (the operator's rebalancer then resets the region if it
fetched, see ``cr_consumer/operator/rebalance.py``); a member whose
generation was lost has no partitions left (kafka-python clears them before
rejoining), so it fetches nothing. Guarded like the others; covered by the
cooperative drills (``tests/drill/test_drill_cooperative.py``).

5. A thread hand-off per poll for a known coordinator (:func:`skip_known_coordinator_hop`)

Every ``KafkaConsumer.poll`` of a group member calls
``coordinator.ensure_coordinator_ready()`` once per internal poll round (1.5-1.8
per ``poll`` here); in kafka-python 3.0.12 that always runs a coroutine on the IO
thread and waits for it (``NetworkSelector.run``: a wake-up write, a thread
switch each way, the GIL handed over twice), ~25 us of CPU, even when the
coroutine only finds the coordinator known and returns True at once. A member
polling ~450 records at a time paid ~0.08 us per record for it.

The fix, installed on the coordinator instance: when the coordinator is known
and its connection is up (``coordinator_id`` set, the connection manager's
connection for it connected: two reads of IO-thread state, atomic in CPython),
return True without the hand-off, the answer the coroutine gives in that case;
in any other case (unknown, disconnected: the coroutine looks it up, marks it
dead or waits) call the library as before. A stale read costs nothing: the
coordinator's death is still found by the heartbeat and by the next poll.
Guarded like the others.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

# kafka-python is untyped: its consumer, coordinator and their attributes are Any here.


def _coordinator(consumer: Any, needed: tuple[str, ...], what: str) -> Any:
    """The consumer's group coordinator when it has every attribute in ``needed``
    (the layout a work-around was written for), else None, logged: ``what`` is not
    installed."""
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None or not all(hasattr(coordinator, a) for a in needed):
        log.warning("kafka-python coordinator has an unknown layout: %s not installed", what)
        return None
    return coordinator


def unstick_parked_fetches(consumer: Any) -> bool:
    """Apply the work-around; True if there were parked records to release."""
    fetcher = getattr(consumer, "_fetcher", None)
    if fetcher is None or not getattr(fetcher, "_paused_partition_records", None):
        return False
    slot = getattr(fetcher, "_next_partition_records", None)
    if slot is not None and not slot:  # drained: holds no records
        fetcher._next_partition_records = None
    return True


def keep_completed_joins(consumer: Any) -> bool:
    """Install work-around (2) on ``consumer``; True if installed."""
    needed = (
        "_join_task",
        "join_group_async",
        "need_rejoin",
        "_on_join_complete_async",
        "_enable_heartbeat",
        "_generation",
        "_lock",
        "state",
        "rejoining",
        "rejoin_needed",
    )
    coordinator = _coordinator(consumer, needed, "completed-join work-around")
    if coordinator is None:
        return False
    if getattr(coordinator, "_cr_keeps_completed_joins", False):
        return True
    try:
        from kafka.structs import MemberState
    except ImportError:
        log.warning("kafka.structs.MemberState missing: completed-join work-around not installed")
        return False
    original_join = coordinator.join_group_async
    original_need_rejoin = coordinator.need_rejoin

    async def join_group_async(timeout_ms: int | None = None) -> Any:
        await _finish_completed_join(coordinator, MemberState)
        return await original_join(timeout_ms=timeout_ms)

    def need_rejoin() -> bool:
        # A join attempt whose outcome was not consumed yet is still a rejoin
        # (REBALANCING: not left, reset or closed since it started).
        return original_need_rejoin() or (
            coordinator._join_task is not None and coordinator.state is MemberState.REBALANCING
        )

    coordinator.join_group_async = join_group_async
    coordinator.need_rejoin = need_rejoin
    coordinator._cr_keeps_completed_joins = True
    return True


async def _finish_completed_join(coordinator: Any, member_state: Any) -> None:
    """Complete a successful join task nobody awaited (runs on the IO thread)."""
    task = coordinator._join_task
    if task is None or not task.is_done or not task.succeeded():
        return
    with coordinator._lock:
        if coordinator.state is not member_state.REBALANCING:
            return  # the group was left or reset since: the library decides
        coordinator._join_task = None
        coordinator.rejoining = False
        coordinator.rejoin_needed = False
        coordinator.state = member_state.STABLE
        coordinator._enable_heartbeat()
        generation = coordinator._generation
    log.info("group %s: completing a join that finished between polls (%s)", coordinator.group_id, generation)
    await coordinator._on_join_complete_async(
        generation.generation_id, generation.member_id, generation.protocol, task.value
    )


#: Longest wait for a cooperative join inside one poll before the consumer
#: fetches its kept partitions (work-around 4): long enough for the IO thread to
#: hand over a join that is complete, short enough that the owned partitions'
#: records keep flowing at the poll rate during a join that lasts seconds.
COOPERATIVE_JOIN_WAIT_MS = 20


def fetch_during_cooperative_joins(consumer: Any) -> bool:
    """Install work-around (4) on ``consumer``; True if installed (cooperative assignors only)."""
    needed = ("poll", "state", "_rebalance_protocol", "_subscription")
    coordinator = _coordinator(consumer, needed, "cooperative fetching work-around")
    if coordinator is None:
        return False
    try:
        from kafka.coordinator.assignors.abstract import RebalanceProtocol
        from kafka.structs import MemberState
    except ImportError:
        log.warning("kafka-python has no RebalanceProtocol/MemberState: cooperative fetching work-around not installed")
        return False
    if coordinator._rebalance_protocol != RebalanceProtocol.COOPERATIVE:
        return False
    if getattr(coordinator, "_cr_fetches_during_joins", False):
        return True
    original_poll = coordinator.poll

    def poll(timeout_ms: int | None = None) -> Any:
        if coordinator.state is MemberState.REBALANCING and coordinator._subscription.assigned_partitions():
            wait = COOPERATIVE_JOIN_WAIT_MS if timeout_ms is None else min(timeout_ms, COOPERATIVE_JOIN_WAIT_MS)
            original_poll(timeout_ms=wait)
            return True  # the owned partitions keep fetching while the join goes on
        return original_poll(timeout_ms=timeout_ms)

    coordinator.poll = poll
    coordinator._cr_fetches_during_joins = True
    return True


def skip_known_coordinator_hop(consumer: Any) -> bool:
    """Install work-around (5) on ``consumer``; True if installed."""
    coordinator = getattr(consumer, "_coordinator", None)
    client = getattr(coordinator, "_client", None)
    conns = getattr(getattr(client, "_manager", None), "_conns", None)  # node id -> connection, one dict for good
    if (
        coordinator is None
        or not hasattr(coordinator, "coordinator_id")
        or not callable(getattr(coordinator, "ensure_coordinator_ready", None))
        or not isinstance(conns, dict)
    ):
        log.warning("kafka-python coordinator has an unknown layout: known-coordinator fast path not installed")
        return False
    if getattr(coordinator, "_cr_skips_known_coordinator_hop", False):
        return True
    original = coordinator.ensure_coordinator_ready

    def ensure_coordinator_ready(timeout_ms: int | None = None) -> Any:
        node = coordinator.coordinator_id
        if node is not None:
            conn = conns.get(node)
            if conn is not None and conn.connected:
                return True  # what the library's coroutine answers for a known, connected coordinator
        return original(timeout_ms=timeout_ms)

    coordinator.ensure_coordinator_ready = ensure_coordinator_ready
    coordinator._cr_skips_known_coordinator_hop = True
    return True


def request_rejoin(consumer: Any) -> bool:
    """3. Ask the consumer to rejoin its group at its next poll.

    kafka-python 3.0.12 has no public call for it (the Java client's
    ``enforceRebalance``); this sets the coordinator's ``rejoin_needed`` flag
    through its own ``request_rejoin()``. Call it on the event thread. False
    (logged) when the coordinator has no such method."""
    coordinator = getattr(consumer, "_coordinator", None)
    if coordinator is None or not callable(getattr(coordinator, "request_rejoin", None)):
        log.warning("kafka-python coordinator has no request_rejoin(): the rejoin hint is ignored")
        return False
    coordinator.request_rejoin()
    return True


__all__ = [
    "fetch_during_cooperative_joins",
    "keep_completed_joins",
    "request_rejoin",
    "skip_known_coordinator_hop",
    "unstick_parked_fetches",
]
