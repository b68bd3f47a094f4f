"""The coordinator namespace of one Spark query: its group key is ``group.id`` + query id.

A query's control variables (its start positions, put once, first writer
wins) belong to it alone: a new query (a new checkpoint location) that reuses
the ``group.id`` of an earlier one applies its own ``startingOffsets``. So
each query has its own coordinator group:

1. The first ``latestOffset`` of a query from an empty checkpoint location (a
   start offset without a query id) draws a query id (:func:`new_query_id`);
   every end offset handed to Spark carries it, so the checkpoint location
   records it and every restart from that location uses it again.
2. The members register and keep the control variables under
   :func:`coordinator_group` (``<group.id>#q<id>``); the Kafka consumer group
   stays ``group.id`` (committed offsets, lag tools, group membership are
   unchanged).

A query that never planned a batch leaves no id behind; its next start draws
a new one, with nothing to lose: no offset of the old id was persisted.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any


def new_query_id() -> str:
    return uuid.uuid4().hex[:16]


def coordinator_group(group_id: str, query: str) -> str:
    """The coordinator group of the query with id ``query``."""
    return f"{group_id}#q{query}"


def _log_entries(checkpoint: Path, log: str) -> list[tuple[int, Path]]:
    """Spark's ``offsets/`` or ``commits/`` entries by batch id (ascending)."""
    log_dir = checkpoint / log
    if not log_dir.is_dir():
        return []
    return sorted((int(f.name), f) for f in log_dir.glob("[0-9]*") if f.name.isdigit())


def _source_offsets(entry: Path) -> list[dict[str, Any]]:
    """The source offsets of one offset log entry: a version line, a metadata line,
    then one line per source with its offset JSON (``-`` for none); decoded, not
    validated (:meth:`~cr_consumer.spark.offsets.SourceOffset.from_json` does)."""
    out = []
    for line in entry.read_text().splitlines()[2:]:
        try:
            offset = json.loads(line)
        except ValueError:
            continue
        if isinstance(offset, dict):
            out.append(offset)
    return out


def query_of_checkpoint(checkpoint_location: str | Path) -> str | None:
    """The query id in a checkpoint location's newest offset log entry.

    None when no batch is planned yet or the entry has no crkafka query id.
    Use it to find a query's coordinator group (``coordinator_group(group_id,
    query)``), e.g. for ``/status``.
    """
    entries = _log_entries(Path(checkpoint_location), "offsets")
    if not entries:
        return None
    for offset in _source_offsets(entries[-1][1]):
        query = offset.get("query")
        if isinstance(query, str):
            return query
    return None


def last_committed_end(checkpoint_location: str | Path, query: str) -> dict[str, Any] | None:
    """The end offset (JSON) of query ``query``'s source in the newest batch of
    Spark's commit log, read from the batch's offset log entry; None when no
    batch is committed or the entry holds no offset of that query."""
    root = Path(checkpoint_location)
    committed = _log_entries(root, "commits")
    if not committed:
        return None
    entry = root / "offsets" / str(committed[-1][0])
    if not entry.is_file():
        return None
    for offset in _source_offsets(entry):
        if offset.get("query") == query:
            return offset
    return None


__all__ = ["coordinator_group", "last_committed_end", "new_query_id", "query_of_checkpoint"]
