"""The coordinator namespace of one Spark query: its group key is ``group.id`` + query id.

A Spark query numbers its micro-batches (the offsets' ``epoch``, used as the
checkpoint id of every merge and retirement) from 0 in its checkpoint
location. The coordinator's merge service keeps, per group, the highest
retired checkpoint id for its lifetime and refuses merges at or below it
(``RETIRED``). So a new query (a new checkpoint location) that reuses the
``group.id`` of an earlier one would be refused at its first reset until the
coordinator restarts; and it would also inherit the earlier query's control
variables (start positions) instead of applying its own ``startPosition``.

Therefore each query has its own coordinator group:

1. The first ``read`` of a query from an empty checkpoint location (a start
   offset without a query id) draws a query id (:func:`new_query_id`); every
   end offset handed to Spark carries it, so the checkpoint location records
   it and every restart from that location uses it again.
2. The members register, merge, retire, keep control variables and the
   reset-pending flag under :func:`coordinator_group` (``<group.id>#q<id>``)
   through :class:`QueryControl`; the Kafka consumer group stays ``group.id``
   (committed offsets, lag tools, group membership are unchanged).
3. An offset written by an earlier build (no query id, but positions) keeps
   the plain ``group.id`` as its coordinator group, as it had.

A query that never planned a batch leaves no id behind; its next start draws
a new one, with nothing to lose: no offset of the old id was persisted.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from pathlib import Path

from coordinator.client import CoordinatorClient


def new_query_id() -> str:
    return uuid.uuid4().hex[:16]


def coordinator_group(group_id: str, query: str) -> str:
    """The coordinator group of a query (``group_id`` itself without a query id)."""
    return f"{group_id}#q{query}" if query else group_id


def query_of_checkpoint(checkpoint_location: str | Path) -> str | None:
    """The query id in a checkpoint location's newest offset log entry.

    Spark writes ``offsets/<batch>``: a version line, a metadata line, then one
    line per source with its offset JSON. None when no batch is planned yet or
    the entry has no crkafka query id. Use it to find a query's coordinator
    group (``coordinator_group(group_id, query)``), e.g. for ``/status``.
    """
    log_dir = Path(checkpoint_location) / "offsets"
    entries = sorted((int(f.name), f) for f in log_dir.glob("[0-9]*") if f.name.isdigit()) if log_dir.is_dir() else []
    if not entries:
        return None
    for line in entries[-1][1].read_text().splitlines()[2:]:
        try:
            offset = json.loads(line)
        except ValueError:
            continue
        if isinstance(offset, dict) and isinstance(offset.get("query"), str):
            return offset["query"]
    return None


class QueryControl:
    """One member's coordinator client, with every group name mapped to the query's.

    The subset of :class:`~coordinator.client.CoordinatorClient` the consumer
    operator calls; the operator passes its Kafka ``group.id``.
    """

    def __init__(self, client: CoordinatorClient, group_id: str, query: str) -> None:
        self._client = client
        self._group_id = group_id
        self.group = coordinator_group(group_id, query)

    def _scoped(self, group_id: str) -> str:
        if group_id != self._group_id:
            raise ValueError(f"this control serves group {self._group_id!r}, not {group_id!r}")
        return self.group

    def register(self, group_id: str, region_index: int, operator_name: str) -> list[str]:
        return self._client.register(self._scoped(group_id), region_index, operator_name)

    def unregister(self, group_id: str, operator_name: str) -> list[str]:
        return self._client.unregister(self._scoped(group_id), operator_name)

    def members(self, group_id: str) -> list[str]:
        return self._client.members(self._scoped(group_id))

    def put_initial_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        return self._client.put_initial_offsets(self._scoped(group_id), offsets)

    def get_initial_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        return self._client.get_initial_offsets(self._scoped(group_id))

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
        return self._client.merge_checkpoint(
            self._scoped(group_id), seq, attempt, n_contributors, operator_name, offsets, timeout
        )

    def retire_checkpoint(self, group_id: str, seq: int) -> int:
        return self._client.retire_checkpoint(self._scoped(group_id), seq)

    def set_reset_pending(self, group_id: str, value: bool) -> bool:
        return self._client.set_reset_pending(self._scoped(group_id), value)

    def close(self) -> None:
        self._client.close()


__all__ = ["QueryControl", "coordinator_group", "new_query_id", "query_of_checkpoint"]
