"""Group registry and control variables: the services that answer from the state store.

Group registry (``RegistryService``), the reference's MXBean made durable:

* ``register {group, region_index, operator}``: the first member creates the
  group with its consistent-region index; later members must give the same
  index or get ``CR_INDEX_MISMATCH``. Registering twice is harmless (a client
  retry). Durable before the reply. Replies the registered names.
* ``unregister {group, operator}``, ``members {group}``: ``NOT_REGISTERED``
  when the group does not exist.
* ``set_reset_pending {group, value}``: atomic get-and-set of the group-wide
  "reset pending" flag (so one rebalance causes one region reset, not one per
  member); replies ``{"previous": bool}``. The flag is held in memory only: a
  coordinator restart clears it, which at worst lets a second member request
  one more (harmless) reset. A retry of the same request (same request id)
  gets the answer of the first attempt, never ``previous = value`` from its
  own earlier write; answers are remembered for the last ``DEDUP_ENTRIES``
  requests.

Control variables (``ControlVariablesService``), (group, topic, partition) ->
initial offset:

* ``put_initial_offsets {group, offsets}``: put-if-absent per entry (the first
  writer wins), durable before the reply; replies the effective value of every
  requested entry. No registration is needed.
* ``get_initial_offsets {group}``: every entry of the group (may be empty).

Both services run on the server's loop thread (see server.py), so they use
the store without locks.
"""

from __future__ import annotations

import collections
from typing import Any

from coordinator import protocol
from coordinator.errors import CrIndexMismatch, Invalid, NotRegistered
from coordinator.server import CoordinatorServer
from coordinator.service_api import Request
from coordinator.state_store import RegionIndexMismatch

#: Remembered answers of set_reset_pending, for retries of the same request id.
DEDUP_ENTRIES = 4096
#: Groups listed in a status reply at most (the rest are counted).
STATUS_MAX_GROUPS = 1000


class RegistryService:
    def __init__(self) -> None:
        self._server: CoordinatorServer | None = None
        self._reset_pending: dict[str, bool] = {}
        self._answers: collections.OrderedDict[tuple[str, Any], bool] = collections.OrderedDict()

    def attach(self, server: CoordinatorServer) -> None:
        self._server = server
        server.add_handler(protocol.Register.TYPE, protocol.Register, self._on_register)
        server.add_handler(protocol.Unregister.TYPE, protocol.Unregister, self._on_unregister)
        server.add_handler(protocol.Members.TYPE, protocol.Members, self._on_members)
        server.add_handler(protocol.SetResetPending.TYPE, protocol.SetResetPending, self._on_set_reset_pending)

    @property
    def store(self) -> Any:
        assert self._server is not None
        return self._server.store

    def require_group(self, group: str) -> int:
        index = self.store.region_index(group)
        if index is None:
            raise NotRegistered(f"group {group!r} is not registered (no member has called register)")
        return index

    def require_member(self, group: str, operator: str) -> None:
        self.require_group(group)
        if operator not in self.store.members(group):
            raise NotRegistered(f"operator {operator!r} is not registered in group {group!r}")

    def _on_register(self, req: Request, msg: protocol.Register) -> dict[str, Any]:
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
        self._server.mark_dirty()
        return protocol.members_reply(names, msg.region_index)

    def _on_unregister(self, req: Request, msg: protocol.Unregister) -> dict[str, Any]:
        index = self.require_group(msg.group)
        names = self.store.unregister_member(msg.group, msg.operator)
        self._server.mark_dirty()
        return protocol.members_reply(names, index)

    def _on_members(self, req: Request, msg: protocol.Members) -> dict[str, Any]:
        index = self.require_group(msg.group)
        return protocol.members_reply(self.store.members(msg.group), index)

    def _on_set_reset_pending(self, req: Request, msg: protocol.SetResetPending) -> dict[str, Any]:
        key = (msg.group, req.id)
        if req.id is not None and key in self._answers:
            return {"previous": self._answers[key]}
        self.require_group(msg.group)
        previous = self._reset_pending.get(msg.group, False)
        self._reset_pending[msg.group] = msg.value
        if req.id is not None:
            self._answers[key] = previous
            if len(self._answers) > DEDUP_ENTRIES:
                self._answers.popitem(last=False)
        return {"previous": previous}

    def status(self) -> dict[str, Any]:
        groups = sorted(self.store.groups())
        out = {}
        for g in groups[:STATUS_MAX_GROUPS]:
            out[g] = {
                "region_index": self.store.region_index(g),
                "members": sorted(self.store.members(g)),
                "reset_pending": self._reset_pending.get(g, False),
                "control_variables": self.store.group_count(g),
            }
        return {"groups": out, "n_groups": len(groups)}


class ControlVariablesService:
    def __init__(self) -> None:
        self._server: CoordinatorServer | None = None

    def attach(self, server: CoordinatorServer) -> None:
        self._server = server
        server.add_handler(protocol.PutInitialOffsets.TYPE, protocol.PutInitialOffsets, self._on_put)
        server.add_handler(protocol.GetInitialOffsets.TYPE, protocol.GetInitialOffsets, self._on_get)

    def _on_put(self, req: Request, msg: protocol.PutInitialOffsets) -> dict[str, Any]:
        store = self._server.store
        try:
            effective = store.put_initial_offsets(msg.group, msg.offsets) if msg.offsets else {}
        except ValueError as exc:  # the store's own bounds (it changed nothing)
            raise Invalid(str(exc)) from None
        store.touch(msg.group)
        self._server.mark_dirty()
        return protocol.offsets_reply(effective)

    def _on_get(self, req: Request, msg: protocol.GetInitialOffsets) -> dict[str, Any]:
        store = self._server.store
        store.touch(msg.group)  # a read is activity too (retention counts idleness)
        return protocol.offsets_reply(store.get_initial_offsets(msg.group))
