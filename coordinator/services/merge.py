"""Checkpoint merge: the members of a group combine their offset maps when the region resets.

Protocol (``merge_checkpoint`` / ``retire_checkpoint``; all on the loop thread):

1. A member sends ``merge_checkpoint {group, seq, attempt, n_contributors,
   operator, offsets, timeout_ms}``. The operator must be registered in the
   group (else ``NOT_REGISTERED``); ``seq`` must be above the group's retired
   id (else ``RETIRED``).
2. The merge is keyed by ``(group, seq, attempt)``: two reset attempts never
   mix. The first contribution fixes N; a contribution with another N gets
   ``INVALID``. When the registry holds the member list fixed for ``seq``
   (``members`` with ``seq``, see registry.py), N must be its length and the
   operator one of its names (else ``INVALID``): the merge then completes
   only with every recorded member's map, never with an outsider counted in
   place of a recorded member (whose partitions would be missing).
3. Contributions are keyed by operator name: a second one from the same name
   (a client retry or a re-send after a coordinator restart) replaces the
   first and never counts twice; the waiting request becomes the newest one.
4. The reply is withheld until N distinct names have contributed; then EVERY
   waiting contributor gets the merged map as the reply to its own request
   (pushed, not polled). A sole contributor (N = 1) is answered at once.
5. Each waiting contributor has its own deadline (``timeout_ms`` from when its
   request arrived): when it passes, that contributor gets ``TIMEOUT``. A
   pending merge whose contributors have all timed out is dropped.
6. A completed merge is kept (at most ``COMPLETED_KEEP``) so that a retry of a
   contribution whose reply was lost gets the same merged map again. A
   contribution from a name that is NOT among its contributors gets
   ``MERGE_CLOSED``: the merged map does not cover its partitions, so answering
   with it would reset them to offsets nobody checkpointed; the member fails
   its reset and the region resets again with a new attempt (a new merge).
7. ``retire_checkpoint {group, seq}`` drops every merge of the group with
   sequence id <= seq, pending or completed; waiting contributors of a
   dropped merge get ``RETIRED``, and later contributions to it too. For a
   group that is not registered it does nothing (``dropped`` 0): no merge of
   it can exist, and no watermark is kept for names nobody registered.

Bounds (every one checked before anything is stored: ``LIMIT_EXCEEDED`` or
``INVALID``, nothing changed; the numbers in docs/protocol.md,
``merge_checkpoint``): ``timeout_ms``, ``n_contributors``, the pending merges
and the bytes they hold (``limits``); the retired watermark is kept only for
registered groups. Merging is the union of the maps; a (topic, partition)
two members report keeps the MINIMUM offset (it can only replay records,
never skip them) and logs a warning. Merges are in memory: after a
coordinator restart the clients' re-sends (step 3) complete them.
"""

from __future__ import annotations

import collections
import logging
import time

import attrs

from coordinator.protocol.wire import fields, protocol
from coordinator.protocol.wire.errors import Invalid, MergeClosed, MergeRetired, MergeTimeout
from coordinator.protocol.wire.status import CoordinatorStatus, MergeStatus, PendingMerge
from coordinator.server.api import DEFERRED, Reply, Request, ServerApi, Service, Timer
from coordinator.server.limits import MERGE_ENTRY_BYTES
from coordinator.server.metrics import CoordinatorMetrics
from coordinator.services.registry import RegistryService

log = logging.getLogger(__name__)

#: Completed merges remembered for retries; bounds memory when nobody retires.
COMPLETED_KEEP = 1024

MergeKey = tuple[str, int, int]


@attrs.define
class _Pending:
    key: MergeKey
    n: int
    created: float
    contributions: dict[str, fields.OffsetMap] = attrs.field(factory=dict)
    waiters: dict[str, tuple[Request, Timer]] = attrs.field(factory=dict)
    sizes: dict[str, int] = attrs.field(factory=dict)  # estimated bytes per contribution


def contribution_bytes(offsets: fields.OffsetMap) -> int:
    """Estimated memory of one contribution held by a pending merge."""
    return MERGE_ENTRY_BYTES * len(offsets) + sum([len(t) for t, _ in offsets])


def merge_maps(contributions: dict[str, fields.OffsetMap]) -> tuple[fields.OffsetMap, int]:
    """Union of the maps; on a conflict the minimum offset. Returns (merged, conflicts)."""
    merged: fields.OffsetMap = {}
    conflicts = 0
    for offsets in contributions.values():
        for tp, off in offsets.items():
            prev = merged.get(tp)
            if prev is None:
                merged[tp] = off
            else:
                conflicts += 1
                if off < prev:
                    merged[tp] = off
    return merged, conflicts


class MergeService(Service):
    def __init__(self, registry: RegistryService) -> None:
        self._registry = registry
        self._pending: dict[MergeKey, _Pending] = {}
        self._completed: collections.OrderedDict[MergeKey, protocol.MergeReply] = collections.OrderedDict()
        self._retired: dict[str, int] = {}
        self._pending_bytes = 0
        self.completed_total = 0
        self.timeouts_total = 0

    def attach(self, server: ServerApi) -> None:
        self._server = server
        server.add_handler(protocol.MergeCheckpoint.TYPE, protocol.MergeCheckpoint, self._on_merge)
        server.add_handler(protocol.RetireCheckpoint.TYPE, protocol.RetireCheckpoint, self._on_retire)

    # ------------------------------------------------------------------ handlers

    def _on_merge(self, req: Request, msg: protocol.MergeCheckpoint) -> Reply:
        server = self.server
        self._registry.require_member(msg.group, msg.operator)
        server.store.touch(msg.group)  # retention activity
        retired = self._retired.get(msg.group)
        if retired is not None and msg.seq <= retired:
            raise MergeRetired(f"checkpoint {msg.seq} of group {msg.group!r} is retired (retired up to {retired})")
        key: MergeKey = (msg.group, msg.seq, msg.attempt)
        done = self._completed.get(key)
        if done is not None:
            if msg.operator not in done.contributors:
                raise MergeClosed(
                    f"merge {key} completed with contributors {done.contributors[:20]} without {msg.operator!r}; "
                    f"its map does not cover this member's partitions: reset again with a new attempt"
                )
            return done
        self._check_contributors(msg)
        pending = self._pending.get(key)
        size, replaced = self._check_room(key, msg, pending)
        # Everything is checked: from here on the merge changes.
        if pending is None:
            pending = _Pending(key=key, n=msg.n_contributors, created=time.monotonic())
            self._pending[key] = pending
        pending.contributions[msg.operator] = msg.offsets
        pending.sizes[msg.operator] = size
        self._pending_bytes += size - replaced
        old = pending.waiters.pop(msg.operator, None)
        if old is not None:
            old[1].cancel()
        if len(pending.contributions) >= pending.n:
            self._complete(pending, req)
            return DEFERRED
        timer = server.schedule(msg.timeout_ms / 1000.0, lambda: self._on_timeout(key, msg.operator, req))
        pending.waiters[msg.operator] = (req, timer)
        return DEFERRED

    def _check_contributors(self, msg: protocol.MergeCheckpoint) -> None:
        """``n_contributors`` within the limit and, when the checkpoint's members are
        recorded, this operator among them and their number."""
        limits = self.server.limits
        if msg.n_contributors > limits.max_members_per_group:
            raise Invalid(
                f"n_contributors {msg.n_contributors} exceeds the members-per-group limit "
                f"{limits.max_members_per_group}"
            )
        fixed = self._registry.fixed_members(msg.group, msg.seq)
        if fixed is not None:
            if msg.operator not in fixed:
                raise Invalid(
                    f"operator {msg.operator!r} is not among the {len(fixed)} members recorded for "
                    f"checkpoint {msg.seq} of group {msg.group!r}: it has no share in that checkpoint"
                )
            if msg.n_contributors != len(fixed):
                raise Invalid(
                    f"n_contributors {msg.n_contributors} from {msg.operator!r} differs from the "
                    f"{len(fixed)} members recorded for checkpoint {msg.seq} of group {msg.group!r}"
                )

    def _check_room(self, key: MergeKey, msg: protocol.MergeCheckpoint, pending: _Pending | None) -> tuple[int, int]:
        """The pending-merge limits (count, bytes) and the first contributor's count;
        (this contribution's size, the size of the one it replaces)."""
        server = self.server
        limits = server.limits
        if pending is None:
            if len(self._pending) >= limits.max_pending_merges:
                raise server.limit_counter.exceeded(
                    "max_pending_merges", f"{len(self._pending)} merges are pending (limit {limits.max_pending_merges})"
                )
        elif pending.n != msg.n_contributors:
            raise Invalid(
                f"merge {key}: n_contributors {msg.n_contributors} from {msg.operator!r} differs from "
                f"{pending.n} given by the first contributor"
            )
        size = contribution_bytes(msg.offsets)
        replaced = pending.sizes.get(msg.operator, 0) if pending is not None else 0
        if self._pending_bytes - replaced + size > limits.max_pending_merge_bytes:
            raise server.limit_counter.exceeded(
                "max_pending_merge_bytes",
                f"pending merges hold ~{self._pending_bytes} bytes; this contribution (~{size}) would exceed "
                f"the limit of {limits.max_pending_merge_bytes}",
            )
        return size, replaced

    def _drop_pending(self, key: MergeKey) -> _Pending:
        pending = self._pending.pop(key)
        self._pending_bytes -= sum(pending.sizes.values())
        return pending

    def _complete(self, pending: _Pending, last: Request) -> None:
        server = self.server
        merged, conflicts = merge_maps(pending.contributions)
        names = sorted(pending.contributions)
        if conflicts:
            log.warning(
                "merge %s: %d partitions reported by several members; kept the minimum offset", pending.key, conflicts
            )
        reply = protocol.MergeReply(merged, names)
        for _, timer in pending.waiters.values():
            timer.cancel()
        server.reply_many([req for req, _ in pending.waiters.values()] + [last], reply)
        self._drop_pending(pending.key)
        self._completed[pending.key] = reply
        if len(self._completed) > COMPLETED_KEEP:
            self._completed.popitem(last=False)
        self.completed_total += 1
        if server.metrics is not None:
            server.metrics.merges_completed.inc()
        log.info("merge %s complete: %d members, %d partitions", pending.key, len(names), len(merged))

    def _on_timeout(self, key: MergeKey, operator: str, req: Request) -> None:
        pending = self._pending.get(key)
        if pending is None:
            return
        waiter = pending.waiters.get(operator)
        if waiter is None or waiter[0] is not req:
            return
        del pending.waiters[operator]
        self.timeouts_total += 1
        have = sorted(pending.contributions)
        self.server.reply_error(
            req,
            MergeTimeout(
                f"merge {key} timed out for {operator!r}: {len(have)} of {pending.n} contributions ({', '.join(have)})"
            ),
        )
        if not pending.waiters:
            self._drop_pending(key)
            log.warning("merge %s dropped: every contributor timed out (%d of %d)", key, len(have), pending.n)

    def _on_retire(self, req: Request, msg: protocol.RetireCheckpoint) -> protocol.RetireReply:
        # Only registered groups keep a watermark (a merge needs a registered member
        # anyway), so the map holds at most one entry per group.
        if self._registry.store.region_index(msg.group) is None:
            return protocol.RetireReply(0)
        self.server.store.touch(msg.group)  # retention activity
        self._retired[msg.group] = max(msg.seq, self._retired.get(msg.group, -1))
        if len(self._retired) > self.server.limits.max_groups:
            for group in [g for g in self._retired if self._registry.store.region_index(g) is None]:
                del self._retired[group]
        self._registry.retire(msg.group, msg.seq)
        dropped = 0
        for key in [k for k in self._pending if k[0] == msg.group and k[1] <= msg.seq]:
            pending = self._drop_pending(key)
            for wreq, timer in pending.waiters.values():
                timer.cancel()
                self.server.reply_error(wreq, MergeRetired(f"merge {key} was retired (checkpoint {msg.seq})"))
            dropped += 1
        for key in [k for k in self._completed if k[0] == msg.group and k[1] <= msg.seq]:
            del self._completed[key]
            dropped += 1
        return protocol.RetireReply(dropped)

    # ------------------------------------------------------------------ observability

    def add_status(self, status: CoordinatorStatus) -> CoordinatorStatus:
        now = time.monotonic()
        pending = tuple(
            PendingMerge(
                group=p.key[0],
                seq=p.key[1],
                attempt=p.key[2],
                n_contributors=p.n,
                contributors=tuple(sorted(p.contributions)),
                waiting=tuple(sorted(p.waiters)),
                age_s=round(max(0.0, now - p.created), 3),
            )
            for p in self._pending.values()
        )
        part = MergeStatus(pending, self._pending_bytes, self.completed_total, self.timeouts_total)
        return attrs.evolve(status, merge=part)

    def update_metrics(self, metrics: CoordinatorMetrics) -> None:
        metrics.merges_pending.set(len(self._pending))
