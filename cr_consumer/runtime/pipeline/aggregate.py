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

In a region of several members each member aggregates the records of the
partitions it is assigned, so a member's table holds *partial* states. After a
rebalance a key's records may go to another member; the region's total for a
key is therefore the combination of the members' partial states (a sum, for
totals). Resets keep this exact: every member goes back to its own table at the
checkpoint, and the sources replay every partition from the same checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from cr_consumer.runtime.pipeline.operators import Operator
from cr_consumer.runtime.pipeline.records import decode_json_value, json_value, replace

AGGREGATE_CHECKPOINT_VERSION = 1


def _hashable(key: Any) -> Any:
    if isinstance(key, list):
        return tuple(_hashable(k) for k in key)
    if isinstance(key, dict):
        raise TypeError("aggregate keys must be hashable JSON values (not objects)")
    return key


class KeyedAggregate(Operator):
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
        self.key_fn = key_fn
        self.update = update
        self._initial = initial if callable(initial) else (lambda: initial)
        self.emit = emit
        self.output = output
        self.state: dict[Any, Any] = {}

    def process_batch(self, records: list[Any]) -> list[Any]:
        state, key_fn, update, initial = self.state, self.key_fn, self.update, self._initial
        out: list[Any] = []
        for r in records:
            k = key_fn(r)
            s = state.get(k)
            s = update(initial() if s is None and k not in state else s, r)
            state[k] = s
            if self.emit:
                out.append(self.output(k, s, r) if self.output else replace(r, key=k, value=s))
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
