"""In-process control variables for an operator run without a coordinator.

The :class:`~cr_consumer.operator.control_plane.ControlPlane` of one member,
kept in this process's memory: first writer wins for the
initial offsets, a merge of one contributor returns its own offsets, and a
merge that needs other members fails, because without a coordinator nobody
else can contribute. Use it for a single member (standalone use, tests of one
member); a group of several members needs the coordinator.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping


class LocalControl:
    """Thread-safe: the event thread and the handler caller use it at once (``_lock``)."""

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

    def put_initial_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
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
        offsets: Mapping[tuple[str, int], int],
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


__all__ = ["LocalControl"]
