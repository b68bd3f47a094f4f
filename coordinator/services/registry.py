"""Group registry and control variables: the services that answer from the state store.

docs/protocol.md is the reference of their messages (``register``,
``unregister``, ``members``, "Registry liveness", ``set_reset_pending``,
``put_initial_offsets``, ``get_initial_offsets``). What this module keeps to
give those answers:

1. ``RegistryService``, the reference's MXBean made durable: the group and its
   names in the store (durable before the reply); a lease per registered
   name, renewed by each request naming it, a name silent for
   ``limits.member_lease_s`` unregistered (durably); the member list fixed by
   the first ``members`` call naming a checkpoint, kept for the last
   ``SEQ_LISTS_KEPT`` checkpoints of a group and dropped by
   ``retire_checkpoint``.
2. The reset-pending flag in memory only (a restart clears it: at worst one
   more, harmless, reset); the answer of each ``set_reset_pending`` request id
   remembered for the last ``DEDUP_ENTRIES`` requests and at most
   ``DEDUP_BYTES`` of group names and ids, so a retry gets the first answer.
3. ``ControlVariablesService``: (group, topic, partition) -> initial offset,
   put-if-absent (the first writer wins), durable before the reply.

Both services run on the server's loop thread (see `coordinator.server.loop`), so they use
the store without locks.
"""

from __future__ import annotations

import collections
import logging
import time

import attrs

from coordinator.protocol.wire import protocol
from coordinator.protocol.wire.envelope import RequestId
from coordinator.protocol.wire.errors import CrIndexMismatch, Invalid, NotRegistered
from coordinator.protocol.wire.status import CoordinatorStatus, GroupStatus, RegistryStatus
from coordinator.server.api import Request, ServerApi, Service, ServiceStore
from coordinator.store.state_store import RegionIndexMismatch

log = logging.getLogger(__name__)

#: Remembered answers of set_reset_pending, for retries of the same request id;
#: bounds the cache's memory under a stream of distinct ids.
DEDUP_ENTRIES = 4096
#: Bound of the same cache in bytes (group name + id + ~100 bytes of overhead each).
DEDUP_BYTES = 4 * 1024 * 1024
#: Member lists fixed per checkpoint id (``members`` with ``seq``), kept per group:
#: bounds a group's memory; members ask only about the checkpoints in flight.
SEQ_LISTS_KEPT = 16
#: Expired leases handled per loop iteration at most, so a mass expiry does not
#: delay the loop (each is one log record).
LEASE_EXPIRIES_PER_TICK = 256
#: Groups listed in a status reply at most (the rest are counted).
STATUS_MAX_GROUPS = 1000
#: Member names listed per group in a status reply at most (the rest are counted),
#: so a status reply stays small whatever the limits allow.
STATUS_MAX_MEMBERS = 100


class RegistryService(Service):
    def __init__(self) -> None:
        self._reset_pending: dict[str, bool] = {}
        self._answers: collections.OrderedDict[tuple[str, RequestId], bool] = collections.OrderedDict()
        self._answers_bytes = 0
        # (group, operator) -> last renewal (monotonic), oldest first: the lease sweep
        # pops from the front, so it costs O(expired), not O(registered).
        self._leases: collections.OrderedDict[tuple[str, str], float] = collections.OrderedDict()
        # group -> {seq: member list fixed at the first `members` naming seq}
        self._seq_lists: dict[str, collections.OrderedDict[int, list[str]]] = {}

    def attach(self, server: ServerApi) -> None:
        self._server = server
        server.add_handler(protocol.Register.TYPE, protocol.Register, self._on_register)
        server.add_handler(protocol.Unregister.TYPE, protocol.Unregister, self._on_unregister)
        server.add_handler(protocol.Members.TYPE, protocol.Members, self._on_members)
        server.add_handler(protocol.SetResetPending.TYPE, protocol.SetResetPending, self._on_set_reset_pending)

    @property
    def store(self) -> ServiceStore:
        return self.server.store

    def require_group(self, group: str) -> int:
        index = self.store.region_index(group)
        if index is None:
            raise NotRegistered(f"group {group!r} is not registered (no member has called register)")
        return index

    def require_member(self, group: str, operator: str) -> None:
        self.require_group(group)
        if operator not in self.store.members(group):
            raise NotRegistered(f"operator {operator!r} is not registered in group {group!r}")
        self.renew(group, operator)

    # ------------------------------------------------------------------ leases

    def renew(self, group: str, operator: str, now: float | None = None) -> None:
        """The registered name was heard from: its lease starts again."""
        key = (group, operator)
        self._leases[key] = time.monotonic() if now is None else now
        self._leases.move_to_end(key)

    def on_loaded(self) -> None:
        now = time.monotonic()
        for group in self.store.groups():
            for operator in self.store.members(group):
                self.renew(group, operator, now)

    def on_tick(self, now: float) -> None:
        """Unregister names whose lease ran out (durable; at most LEASE_EXPIRIES_PER_TICK)."""
        if not self.server.loaded.is_set():
            return
        lease = self.server.limits.member_lease_s
        for _ in range(LEASE_EXPIRIES_PER_TICK):
            if not self._leases:
                return
            (group, operator), seen = next(iter(self._leases.items()))
            if now - seen < lease:
                return
            del self._leases[(group, operator)]
            if operator in self.store.members(group):
                log.warning(
                    "group %s: operator %s sent nothing naming it for %.0fs (lease %.0fs): unregistered",
                    group,
                    operator,
                    now - seen,
                    lease,
                )
                self.store.unregister_member(group, operator)
                self.server.mark_dirty()

    # ------------------------------------------------------------------ handlers

    def _group_exists(self, group: str) -> bool:
        return self.store.region_index(group) is not None or self.store.group_count(group) > 0

    def check_new_group(self, group: str) -> None:
        """LIMIT_EXCEEDED if ``group`` does not exist and the group limit is reached."""
        if self._group_exists(group):
            return
        limit = self.server.limits.max_groups
        held = self.store.stats().groups
        if held >= limit:
            raise self.server.limit_counter.exceeded(
                "max_groups", f"the coordinator holds {held} groups (limit {limit}); group {group!r} not created"
            )

    def _on_register(self, req: Request, msg: protocol.Register) -> protocol.MembersReply:
        members = self.store.members(msg.group)
        if msg.operator not in members:
            self.check_new_group(msg.group)
            limit = self.server.limits.max_members_per_group
            if len(members) >= limit:
                raise self.server.limit_counter.exceeded(
                    "max_members_per_group",
                    f"group {msg.group!r} has {len(members)} registered names (limit {limit}); "
                    f"{msg.operator!r} not registered",
                )
        try:
            names = self.store.register_member(msg.group, msg.region_index, msg.operator)
        except RegionIndexMismatch as exc:
            raise CrIndexMismatch(
                f"group {msg.group!r} belongs to consistent region {exc.expected}; "
                f"operator {msg.operator!r} registered with region index {exc.got}"
            ) from None
        except ValueError as exc:  # the store's own bounds (it changed nothing)
            raise Invalid(str(exc)) from None
        self.store.touch(msg.group)
        self.renew(msg.group, msg.operator)
        self.server.mark_dirty()
        return protocol.MembersReply(names, msg.region_index)

    def _on_unregister(self, req: Request, msg: protocol.Unregister) -> protocol.MembersReply:
        index = self.require_group(msg.group)
        names = self.store.unregister_member(msg.group, msg.operator)
        self._leases.pop((msg.group, msg.operator), None)
        self.server.mark_dirty()
        return protocol.MembersReply(names, index)

    def _on_members(self, req: Request, msg: protocol.Members) -> protocol.MembersReply:
        index = self.require_group(msg.group)
        names = self.store.members(msg.group)
        if msg.operator is not None and msg.operator in names:
            self.renew(msg.group, msg.operator)
        if msg.seq is not None:
            if msg.group not in self._seq_lists and len(self._seq_lists) >= self.server.limits.max_groups:
                # Groups expired by retention leave their lists behind: drop those.
                for g in [g for g in self._seq_lists if self.store.region_index(g) is None]:
                    del self._seq_lists[g]
            lists = self._seq_lists.setdefault(msg.group, collections.OrderedDict())
            fixed = lists.get(msg.seq)
            if fixed is None:
                fixed = lists[msg.seq] = list(names)
                while len(lists) > SEQ_LISTS_KEPT:
                    lists.popitem(last=False)
            names = fixed
        return protocol.MembersReply(names, index)

    def fixed_members(self, group: str, seq: int) -> list[str] | None:
        """The member list fixed for checkpoint ``seq`` (see ``members``), or None."""
        lists = self._seq_lists.get(group)
        return None if lists is None else lists.get(seq)

    def retire(self, group: str, seq: int) -> None:
        """Forget the member lists fixed for checkpoints <= seq (retire_checkpoint)."""
        lists = self._seq_lists.get(group)
        if lists is None:
            return
        for s in [s for s in lists if s <= seq]:
            del lists[s]
        if not lists:
            del self._seq_lists[group]

    def _on_set_reset_pending(self, req: Request, msg: protocol.SetResetPending) -> protocol.ResetPendingReply:
        key = (msg.group, req.id)
        if req.id is not None and key in self._answers:
            return protocol.ResetPendingReply(self._answers[key])
        self.require_group(msg.group)
        previous = self._reset_pending.get(msg.group, False)
        self._reset_pending[msg.group] = msg.value
        if len(self._reset_pending) > self.server.limits.max_groups:
            # Groups expired by retention leave their flag behind: drop those.
            for g in [g for g in self._reset_pending if self.store.region_index(g) is None]:
                del self._reset_pending[g]
        if req.id is not None:
            self._answers[key] = previous
            self._answers_bytes += _answer_bytes(key)
            while len(self._answers) > DEDUP_ENTRIES or self._answers_bytes > DEDUP_BYTES:
                old, _ = self._answers.popitem(last=False)
                self._answers_bytes -= _answer_bytes(old)
        return protocol.ResetPendingReply(previous)

    def add_status(self, status: CoordinatorStatus) -> CoordinatorStatus:
        groups = sorted(self.store.groups())
        out = {}
        for g in groups[:STATUS_MAX_GROUPS]:
            members = sorted(self.store.members(g))
            out[g] = GroupStatus(
                region_index=self.store.region_index(g),
                members=tuple(members[:STATUS_MAX_MEMBERS]),
                n_members=len(members),
                reset_pending=self._reset_pending.get(g, False),
                control_variables=self.store.group_count(g),
            )
        part = RegistryStatus(out, len(groups), dict(self.server.limit_counter.totals))
        return attrs.evolve(status, registry=part)


def _answer_bytes(key: tuple[str, RequestId]) -> int:
    return len(key[0]) + len(str(key[1])) + 100


class ControlVariablesService(Service):
    def __init__(self, registry: RegistryService) -> None:
        self._registry = registry

    def attach(self, server: ServerApi) -> None:
        self._server = server
        server.add_handler(protocol.PutInitialOffsets.TYPE, protocol.PutInitialOffsets, self._on_put)
        server.add_handler(protocol.GetInitialOffsets.TYPE, protocol.GetInitialOffsets, self._on_get)

    def _on_put(self, req: Request, msg: protocol.PutInitialOffsets) -> protocol.OffsetsReply:
        store = self.server.store
        self._check_limits(msg)
        try:
            effective = store.put_initial_offsets(msg.group, msg.offsets) if msg.offsets else {}
        except ValueError as exc:  # the store's own bounds (it changed nothing)
            raise Invalid(str(exc)) from None
        store.touch(msg.group)
        self.server.mark_dirty()
        return protocol.OffsetsReply(effective)

    def _check_limits(self, msg: protocol.PutInitialOffsets) -> None:
        """LIMIT_EXCEEDED (nothing stored) for a new group beyond max_groups or a
        group beyond max_control_variables_per_group."""
        if not msg.offsets:
            return
        store = self.server.store
        self._registry.check_new_group(msg.group)
        limit = self.server.limits.max_control_variables_per_group
        held = store.group_count(msg.group)
        if held + len(msg.offsets) <= limit:
            return
        existing = store.get_initial_offsets(msg.group)
        new = sum(1 for key in msg.offsets if key not in existing)
        if held + new > limit:
            raise self.server.limit_counter.exceeded(
                "max_control_variables_per_group",
                f"group {msg.group!r} holds {held} control variables; {new} more would exceed the limit of {limit}",
            )

    def _on_get(self, req: Request, msg: protocol.GetInitialOffsets) -> protocol.OffsetsReply:
        store = self.server.store
        store.touch(msg.group)  # a read is activity too (retention counts idleness)
        return protocol.OffsetsReply(store.get_initial_offsets(msg.group))
