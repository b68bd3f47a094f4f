"""A user's stateful function over keyed state that follows its input partition:
``fn(record, state) -> iterable of records``, ``state`` a get/set/delete view of the record's
partition's table (``partitioned_tables.py``: how the tables are stored on a Kafka changelog,
checkpointed with the region and restored by whichever member owns the partition).

Per record:

1. The record's partition's table (restored first if it is not in memory; a record without the
   input's provenance fails the batch, naming the operator).
2. ``fn(record, state)`` runs; what it returns is listed (an iterator that raises halfway emits
   nothing). ``state.set(key, value)`` and ``state.delete(key)`` change the table at once, so a
   later ``get`` of the same record sees them; each changed key is written to the changelog at
   the next checkpoint with its state then, and the record's offset.
3. If ``fn`` raises, every change it made to the state is undone before the exception fails the
   batch or, under the dead-letter policy, the record is rejected: a rejected record leaves no
   trace in the state.

Keys are JSON scalars or arrays (arrays are kept as tuples); values must be JSON (objects with
string keys), checked when the checkpoint writes them: a value that is not fails the
checkpoint naming its key. A value is never None (``set(key, None)`` is a ``delete``), and the
state a restore gives back is the JSON's: lists where tuples were set. Treat values as
immutable: change a copy and ``set`` it, or the undo of step 3 cannot restore the old one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Unpack

from cr_consumer.runtime.pipeline.operators import Reject, raise_error
from cr_consumer.runtime.pipeline.partitioned_tables import PartitionedOperator, TablesArgs
from cr_consumer.state.changelog import JsonKey, key_of

_MISSING = object()


class PartitionState:
    """The state ``fn`` sees for one record: its input partition's keys (module docstring)."""

    __slots__ = ("_changed", "_offset", "_partition", "_table", "_undo")

    def __init__(self, changed: Callable[[int, JsonKey, int], None]) -> None:
        self._changed = changed
        self._table: dict[Any, Any] = {}
        self._partition = 0
        self._offset = 0
        #: key -> its value before this record's first change (``_MISSING``: it had none).
        self._undo: dict[Any, Any] = {}

    @property
    def partition(self) -> int:
        """The input partition whose keys this is."""
        return self._partition

    def get(self, key: Any, default: Any = None) -> Any:
        return self._table.get(key_of(key), default)

    def __contains__(self, key: object) -> bool:
        return key_of(key) in self._table

    def set(self, key: Any, value: Any) -> None:
        """``key``'s state becomes ``value`` (None deletes it)."""
        if value is None:
            self.delete(key)
            return
        k = key_of(key)
        self._remember(k)
        self._table[k] = value
        self._changed(self._partition, k, self._offset)

    def delete(self, key: Any) -> None:
        """``key`` has no state any more (a key without one is left alone)."""
        k = key_of(key)
        if k in self._table:
            self._remember(k)
            del self._table[k]
            self._changed(self._partition, k, self._offset)

    # -- called by the operator, per record ------------------------------------------------
    def bind(self, table: dict[Any, Any], partition: int, offset: int) -> None:
        self._table, self._partition, self._offset = table, partition, offset
        self._undo.clear()

    def _remember(self, key: Any) -> None:
        if key not in self._undo:
            self._undo[key] = self._table.get(key, _MISSING)

    def rollback(self) -> None:
        for key, value in self._undo.items():
            if value is _MISSING:
                self._table.pop(key, None)
            else:
                self._table[key] = value
        self._undo.clear()


class KeyedState(PartitionedOperator):
    """``fn(record, state)`` with partition-scoped keyed state on a changelog (module docstring)."""

    kind = "keyed_state"

    def __init__(
        self,
        fn: Callable[[Any, PartitionState], Iterable[Any]],
        *,
        name: str | None = None,
        **tables: Unpack[TablesArgs],
    ) -> None:
        super().__init__(name, **tables)
        self.fn = fn
        self._state = PartitionState(self.store.changed)

    # -- data -------------------------------------------------------------------------------
    def process_batch(self, records: list[Any]) -> list[Any]:
        return self.process_isolated(records, raise_error)

    def process_isolated(self, records: list[Any], reject: Reject) -> list[Any]:
        fn, state, table_of = self.fn, self._state, self.store.table_of
        self.store.begin()
        out: list[Any] = []
        for r in records:
            table = table_of(r)  # outside the try: a record without provenance fails the batch
            state.bind(table, r.partition, r.offset)
            try:
                emitted = list(fn(r, state))
            except Exception as exc:  # noqa: BLE001 - to reject: the dead-letter sink, or re-raised
                state.rollback()
                reject(r, exc)
                continue
            out.extend(emitted)
        return out


__all__ = ["KeyedState", "PartitionState"]
