"""Pipeline operators: the base class, the stateless transformations and the keyed aggregate.

Every operator is a region state handler (``cr_consumer.operator.region.StateHandler``)
plus one data method, ``process_batch(records) -> list``, called on the
source's process thread with a whole batch (never record by record across
threads). A batch is a ``list[Any]``: its records are ``records.Record``, the
source's own records or whatever a user's function made of them. The member
runtime calls the state-handler methods in pipeline order (source first) for
drain and checkpoint, and in reverse order for resets, always while it holds
the region permit, so no batch is in flight during those calls.

Under a pipeline's dead-letter policy (``dead_letter.py``) the pipeline calls
``process_isolated(records, reject)`` instead: an operator that calls a function
per record hands each record whose function raises to ``reject(record, error)``
and leaves it out of its output; the base class works on the whole batch (it
calls ``process_batch``, so an exception fails the batch).

Stateless operators (map, filter, flat_map) have nothing to checkpoint: their
checkpoint is an empty versioned JSON document and their reset does nothing.
Write your own operator by subclassing :class:`RecordOperator` (one record in,
any number out; dead-lettered record by record) or :class:`Operator` (overriding
``process_batch``), and, if it keeps state, the state-handler methods (see
:class:`KeyedAggregate` for a stateful example and ``docs/pipelines.md``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from cr_consumer.runtime.pipeline.records import decode_json_value, json_value, replace

#: Version of the checkpoint document of stateless operators.
STATELESS_CHECKPOINT_VERSION = 1

#: ``reject(record, error)``: what a stage calls for a record it leaves out because of ``error``.
Reject = Callable[[Any, Exception], None]


def raise_error(record: Any, error: Exception) -> None:
    """The *fail* policy's reject: the stage's exception fails the batch."""
    raise error


class Operator:
    """Base class: a no-op state handler that passes batches through."""

    #: Default name, used in the operator id ("<index>-<name>") of the checkpoint store.
    kind = "operator"

    def __init__(self, name: str | None = None) -> None:
        self.name = name or self.kind

    # -- data -----------------------------------------------------------------
    def process_batch(self, records: list[Any]) -> list[Any]:
        return records

    def process_isolated(self, records: list[Any], reject: Reject) -> list[Any]:
        """``process_batch`` under the dead-letter policy: a record whose processing raises goes
        to ``reject`` and not to the output. This base works on the whole batch: an exception
        fails it."""
        return self.process_batch(records)

    # -- region state handler -------------------------------------------------
    def drain(self) -> None:
        """Finish in-flight work. Stateless operators hold none."""

    def checkpoint(self, seq: int) -> bytes:
        return json.dumps({"version": STATELESS_CHECKPOINT_VERSION, "kind": self.kind}).encode()

    def reset(self, seq: int, data: bytes, attempt: int = 0) -> None:
        """Go back to checkpoint ``seq``. Stateless operators only check the document."""
        if data:
            doc = json.loads(data)
            if doc.get("version") != STATELESS_CHECKPOINT_VERSION:
                raise ValueError(f"operator {self.name!r}: unsupported checkpoint version {doc.get('version')!r}")

    def reset_to_initial_state(self, attempt: int = 0) -> None:
        pass

    def retire_checkpoint(self, seq: int) -> None:
        pass

    def notify_checkpoint_complete(self, seq: int) -> None:
        """Checkpoint ``seq`` is the region's last consistent checkpoint (all
        members stored it): make side effects of that interval visible."""

    def close(self) -> None:
        """Release files and other resources (called once, at member shutdown)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class Map(Operator):
    """``fn(record) -> record``: use ``records.replace(r, value=...)`` to keep provenance."""

    kind = "map"

    def __init__(self, fn: Callable[[Any], Any], name: str | None = None) -> None:
        super().__init__(name)
        self.fn = fn

    def process_batch(self, records: list[Any]) -> list[Any]:
        fn = self.fn
        return [fn(r) for r in records]

    def process_isolated(self, records: list[Any], reject: Reject) -> list[Any]:
        fn = self.fn
        out: list[Any] = []
        append = out.append
        for r in records:
            try:
                append(fn(r))
            except Exception as exc:  # noqa: BLE001 - to reject: the dead-letter sink
                reject(r, exc)
        return out


class Filter(Operator):
    """Keeps the records for which ``predicate(record)`` is true."""

    kind = "filter"

    def __init__(self, predicate: Callable[[Any], bool], name: str | None = None) -> None:
        super().__init__(name)
        self.predicate = predicate

    def process_batch(self, records: list[Any]) -> list[Any]:
        pred = self.predicate
        return [r for r in records if pred(r)]

    def process_isolated(self, records: list[Any], reject: Reject) -> list[Any]:
        pred = self.predicate
        out: list[Any] = []
        for r in records:
            try:
                keep = pred(r)
            except Exception as exc:  # noqa: BLE001 - to reject: the dead-letter sink
                reject(r, exc)
                continue
            if keep:
                out.append(r)
        return out


class RecordOperator(Operator):
    """An operator that works record by record: override :meth:`process_record`. Under the
    dead-letter policy a record whose ``process_record`` raises is rejected alone, and nothing
    it would have emitted is output."""

    kind = "record_operator"

    def process_record(self, record: Any) -> Iterable[Any]:
        """The records one input record becomes (zero, one or many)."""
        raise NotImplementedError(f"{type(self).__name__} must override process_record(record)")

    def process_batch(self, records: list[Any]) -> list[Any]:
        return self.process_isolated(records, raise_error)

    def process_isolated(self, records: list[Any], reject: Reject) -> list[Any]:
        process = self.process_record
        out: list[Any] = []
        extend = out.extend
        for r in records:
            try:
                # a list first: an iterator that raises halfway emits nothing
                extend(list(process(r)))
            except Exception as exc:  # noqa: BLE001 - to reject: the dead-letter sink, or re-raised
                reject(r, exc)
        return out


class FlatMap(RecordOperator):
    """``fn(record) -> iterable of records`` (zero, one or many per input)."""

    kind = "flat_map"

    def __init__(self, fn: Callable[[Any], Iterable[Any]], name: str | None = None) -> None:
        super().__init__(name)
        self.fn = fn

    def process_record(self, record: Any) -> Iterable[Any]:
        return self.fn(record)


AGGREGATE_CHECKPOINT_VERSION = 1


def _identity(key: Any) -> Any:
    return key


def _hashable(key: Any) -> Any:
    if isinstance(key, list):
        return tuple(_hashable(k) for k in key)
    if isinstance(key, dict):
        raise TypeError("aggregate keys must be hashable JSON values (not objects)")
    return key


@attrs.frozen
class Fold:
    """A keyed aggregate's user functions: ``state = update(state_or_initial, record)`` per key
    (``key(key_fn(record))``), and the record it emits (``output(key, state, record)``, or the
    record with the key and the new state; nothing when ``emit`` is off)."""

    key_fn: Callable[[Any], Any]
    update: Callable[[Any, Any], Any]
    initial: Callable[[], Any]
    emit: bool
    output: Callable[[Any, Any, Any], Any] | None
    key: Callable[[Any], Any] = _identity

    def apply(self, table: dict[Any, Any], record: Any) -> tuple[Any, Any]:
        """Fold ``record`` into ``table``: its key and the record it emits (None when ``emit`` is
        off). What the user's functions raise is raised with ``table`` unchanged."""
        k = self.key(self.key_fn(record))
        s = table.get(k)
        s = self.update(self.initial() if s is None and k not in table else s, record)
        emitted = (self.output(k, s, record) if self.output else replace(record, key=k, value=s)) if self.emit else None
        table[k] = s
        return k, emitted


class KeyedAggregate(Operator):
    """A keyed stateful aggregate whose state is checkpointed and restored with the region.

    ``KeyedAggregate(key_fn, update, initial)`` keeps one state per key:
    ``state = update(state_or_initial, record)`` for every record, and emits, per
    input record, a record with the same provenance (topic, partition, offset)
    whose key is the aggregate key and whose value is the new state (``emit=False``
    emits nothing; ``output=fn(key, state, record)`` builds the record yourself).

    State handling (called by the member runtime with the region permit held):

    1. ``drain()``: nothing in flight (batches are processed synchronously).
    2. ``checkpoint(seq)``: the whole table as versioned JSON,
       ``{"version": 1, "kind": "aggregate", "seq": seq, "entries": [[key, state], ...]}``.
       Keys and states must be JSON values (strings, numbers, lists, dicts, ...);
       bytes keys are stored with the base64 marker of ``records.json_value``.
    3. ``reset(seq, data)``: the table becomes exactly the checkpointed one.
    4. ``reset_to_initial_state()``: the table becomes empty.
    5. ``retire_checkpoint(seq)``: nothing to drop (the store holds the data).

    Under the dead-letter policy a record whose ``key_fn``, ``update`` or ``output`` raises is
    rejected and the table keeps the state it had before that record (``update`` must return
    the new state, not change the old one in place, for that to hold).

    In a region of several members each member aggregates the records of the
    partitions it is assigned, so a member's table holds *partial* states. After a
    rebalance a key's records may go to another member; the region's total for a
    key is therefore the combination of the members' partial states (a sum, for
    totals). Resets keep this exact: every member goes back to its own table at the
    checkpoint, and the sources replay every partition from the same checkpoint.
    """

    kind = "aggregate"

    def __init__(
        self,
        key_fn: Callable[[Any], Any],
        update: Callable[[Any, Any], Any],
        initial: Callable[[], Any] | Any = None,
        *,
        emit: bool = True,
        output: Callable[[Any, Any, Any], Any] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.fold = Fold(key_fn, update, initial if callable(initial) else (lambda: initial), emit, output)
        self.state: dict[Any, Any] = {}

    def process_batch(self, records: list[Any]) -> list[Any]:
        return self.process_isolated(records, raise_error)

    def process_isolated(self, records: list[Any], reject: Reject) -> list[Any]:
        state, apply, emit = self.state, self.fold.apply, self.fold.emit
        out: list[Any] = []
        for r in records:
            try:
                _, emitted = apply(state, r)
            except Exception as exc:  # noqa: BLE001 - to reject: the dead-letter sink, or re-raised
                reject(r, exc)
                continue
            if emit:
                out.append(emitted)
        return out

    def checkpoint(self, seq: int) -> bytes:
        entries = [[json_value(k), s] for k, s in self.state.items()]
        try:
            return json.dumps(
                {"version": AGGREGATE_CHECKPOINT_VERSION, "kind": self.kind, "seq": seq, "entries": entries},
                separators=(",", ":"),
            ).encode()
        except TypeError as exc:
            raise TypeError(f"aggregate {self.name!r}: state is not JSON serialisable: {exc}") from exc

    def reset(self, seq: int, data: bytes, attempt: int = 0) -> None:
        doc = json.loads(data)
        if doc.get("version") != AGGREGATE_CHECKPOINT_VERSION or doc.get("kind") != self.kind:
            raise ValueError(
                f"aggregate {self.name!r}: checkpoint {seq} has version {doc.get('version')!r} "
                f"kind {doc.get('kind')!r}; expected version {AGGREGATE_CHECKPOINT_VERSION} kind {self.kind!r}"
            )
        self.state = {_hashable(decode_json_value(k)): s for k, s in doc["entries"]}

    def reset_to_initial_state(self, attempt: int = 0) -> None:
        self.state = {}
