"""The control plane an operator talks to: the coordinator's group services.

Two implementations: ``coordinator.client.CoordinatorClient`` (a group of
members, over ZeroMQ) and :class:`LocalControl` (one member, in memory). The operator calls them from the thread that runs
the step that needs them:

1. ``register`` at ``start()`` and ``unregister`` at ``close()`` (the caller's
   thread);
2. ``get_initial_offsets`` / ``put_initial_offsets`` when a partition without
   a known target is seeked (the event thread);
3. ``set_reset_pending`` after a revocation (event thread) and at the end of
   a reset (the handler caller's thread);
4. ``members``, ``merge_checkpoint`` and ``retire_checkpoint`` from the region
   handlers (the handler caller's thread).

Every call either answers or raises (the coordinator client after its request
timeout); the operator turns a raise into a handler error (DrainError,
ResetError) or, on the event thread, a failed operator.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Protocol

from cr_consumer.operator.config import OperatorConfig

#: Offsets keyed by (topic, partition), as they cross the wire.
WireOffsets = Mapping[tuple[str, int], int]


class ControlPlane(Protocol):
    def register(self, group_id: str, region_index: int, operator_name: str) -> list[str]:
        """Add ``operator_name`` to the group; return every registered name."""
        ...

    def unregister(self, group_id: str, operator_name: str) -> list[str]:
        """Remove ``operator_name`` from the group; return the names left."""
        ...

    def members(self, group_id: str, operator: str | None = None, seq: int | None = None) -> list[str]:
        """Registered names; with ``seq``, the list fixed for checkpoint ``seq`` (the
        same for every member that asks), and ``operator`` renews the caller's lease."""
        ...

    def put_initial_offsets(self, group_id: str, offsets: WireOffsets) -> dict[tuple[str, int], int]:
        """Put-if-absent each control variable; return the effective value of each."""
        ...

    def get_initial_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        """Every control variable of the group."""
        ...

    def merge_checkpoint(
        self,
        group_id: str,
        seq: int,
        attempt: int,
        n_contributors: int,
        operator_name: str,
        offsets: WireOffsets,
        timeout: float,
    ) -> dict[tuple[str, int], int]:
        """Contribute ``offsets`` to the merge of (``seq``, ``attempt``); block until all
        ``n_contributors`` contributed (at most ``timeout`` s) and return the union."""
        ...

    def retire_checkpoint(self, group_id: str, seq: int) -> int:
        """Drop every merge with sequence id <= ``seq``; return how many."""
        ...

    def set_reset_pending(self, group_id: str, value: bool) -> bool:
        """Atomically set the group's reset-pending flag; return the previous value."""
        ...

    def close(self) -> None:
        """Release the connection (the operator closes only a control plane it made)."""
        ...


class LocalControl(ControlPlane):
    """The control plane of one member, in this process's memory, for an operator
    run without a coordinator: first writer wins for the initial offsets, a merge
    of one contributor returns its own offsets, and a merge that needs other
    members fails (nobody else can contribute). Thread-safe: the event thread and
    the handler caller use it at once (``_lock``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._members: dict[str, list[str]] = {}
        self._initial: dict[str, dict[tuple[str, int], int]] = {}
        self._reset_pending: dict[str, bool] = {}

    def register(self, group_id: str, region_index: int, operator_name: str) -> list[str]:
        with self._lock:
            names = self._members.setdefault(group_id, [])
            if operator_name not in names:
                names.append(operator_name)
            return list(names)

    def unregister(self, group_id: str, operator_name: str) -> list[str]:
        with self._lock:
            names = self._members.setdefault(group_id, [])
            if operator_name in names:
                names.remove(operator_name)
            return list(names)

    def members(self, group_id: str, operator: str | None = None, seq: int | None = None) -> list[str]:
        with self._lock:
            return list(self._members.get(group_id, []))

    def put_initial_offsets(self, group_id: str, offsets: WireOffsets) -> dict[tuple[str, int], int]:
        with self._lock:
            table = self._initial.setdefault(group_id, {})
            return {(t, p): table.setdefault((t, p), int(v)) for (t, p), v in offsets.items()}

    def get_initial_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        with self._lock:
            return dict(self._initial.get(group_id, {}))

    def merge_checkpoint(
        self,
        group_id: str,
        seq: int,
        attempt: int,
        n_contributors: int,
        operator_name: str,
        offsets: WireOffsets,
        timeout: float,
    ) -> dict[tuple[str, int], int]:
        if n_contributors > 1:
            raise RuntimeError(
                f"checkpoint {seq} has {n_contributors} members: merging needs the coordinator "
                "(set OperatorConfig.coordinator)"
            )
        return {(t, p): int(v) for (t, p), v in offsets.items()}

    def retire_checkpoint(self, group_id: str, seq: int) -> int:
        return 0

    def set_reset_pending(self, group_id: str, value: bool) -> bool:
        with self._lock:
            previous = self._reset_pending.get(group_id, False)
            self._reset_pending[group_id] = bool(value)
            return previous

    def close(self) -> None:
        pass


def control_plane_for(config: OperatorConfig) -> ControlPlane:
    """The control plane an operator given none makes (and closes at its close):
    a coordinator client when ``config.coordinator`` names one, else a :class:`LocalControl`."""
    if config.coordinator:
        from coordinator.client import CoordinatorClient  # lazily: only an operator with a coordinator needs it

        return CoordinatorClient(config.coordinator, timeout=config.coordinator_timeout_s)
    return LocalControl()


__all__ = ["ControlPlane", "LocalControl", "WireOffsets", "control_plane_for"]
