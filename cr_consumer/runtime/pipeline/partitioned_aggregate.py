"""A keyed aggregate whose state follows its input partition: ``update(state, record)`` per key
within one table per input partition, kept on a Kafka changelog and restored by whichever member
owns the partition (``partitioned_tables.py``: how the tables are stored, checkpointed and
restored).

Per record: its partition's table (restored first if it is not in memory; a record without the
input's provenance fails the batch), the user's key and update (``operators.Fold``), the key's
change remembered with the record's offset for the checkpoint. An ``update`` that returns None
deletes the key (its next record starts from ``initial``), in memory as in the changelog. Under
the dead-letter policy a record whose key or update raises is rejected and changes nothing.

The input must be partitioned by the aggregate's key (the producer's default partitioner on the
key) for each table to hold a key's complete state; otherwise each input partition's table is a
partial state of the keys it saw (``docs/pipelines.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Unpack

from cr_consumer.runtime.pipeline.operators import Fold, Reject, raise_error
from cr_consumer.runtime.pipeline.partitioned_tables import PartitionedOperator, TablesArgs
from cr_consumer.state.changelog import key_of


class PartitionedAggregate(PartitionedOperator):
    """``update(state, record)`` per key within each input partition's table (module docstring)."""

    kind = "partitioned_aggregate"

    def __init__(
        self,
        key_fn: Callable[[Any], Any],
        update: Callable[[Any, Any], Any],
        initial: Callable[[], Any] | Any = None,
        *,
        emit: bool = True,
        output: Callable[[Any, Any, Any], Any] | None = None,
        name: str | None = None,
        **tables: Unpack[TablesArgs],
    ) -> None:
        super().__init__(name, **tables)
        self.fold = Fold(key_fn, update, initial if callable(initial) else (lambda: initial), emit, output, key_of)

    # -- data -------------------------------------------------------------------------------
    def process_batch(self, records: list[Any]) -> list[Any]:
        return self.process_isolated(records, raise_error)

    def process_isolated(self, records: list[Any], reject: Reject) -> list[Any]:
        apply, emit, table_of, changed = self.fold.apply, self.fold.emit, self.store.table_of, self.store.changed
        self.store.begin()
        out: list[Any] = []
        for r in records:
            table = table_of(r)  # outside the try: a record without provenance fails the batch
            try:
                k, emitted = apply(table, r)
            except Exception as exc:  # noqa: BLE001 - to reject: the dead-letter sink, or re-raised
                reject(r, exc)
                continue
            if table[k] is None:  # a state of None is a delete, as the changelog stores it
                del table[k]
            changed(r.partition, k, r.offset)
            if emit:
                out.append(emitted)
        return out


__all__ = ["PartitionedAggregate"]
