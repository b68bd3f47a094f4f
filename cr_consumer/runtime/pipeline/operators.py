"""Pipeline operators: the base class and the stateless transformations.

Every operator is a region state handler (``cr_consumer.operator.region.StateHandler``)
plus one data method, ``process_batch(records) -> list``, called on the
source's process thread with a whole batch (never record by record across
threads). A batch is a ``list[Any]``: its records are ``records.Record``, the
source's own records or whatever a user's function made of them. The member
runtime calls the state-handler methods in pipeline order (source first) for
drain and checkpoint, and in reverse order for resets, always while it holds
the region permit, so no batch is in flight during those calls.

Stateless operators (map, filter, flat_map) have nothing to checkpoint: their
checkpoint is an empty versioned JSON document and their reset does nothing.
Write your own operator by subclassing :class:`Operator` and overriding
``process_batch`` and, if it keeps state, the state-handler methods (see
``aggregate.py`` for a stateful example and ``docs/pipelines.md``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

#: Version of the checkpoint document of stateless operators.
STATELESS_CHECKPOINT_VERSION = 1


class Operator:
    """Base class: a no-op state handler that passes batches through."""

    #: Default name, used in the operator id ("<index>-<name>") of the checkpoint store.
    kind = "operator"

    def __init__(self, name: str | None = None) -> None:
        self.name = name or self.kind

    # -- data -----------------------------------------------------------------
    def process_batch(self, records: list[Any]) -> list[Any]:
        return records

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


class Filter(Operator):
    """Keeps the records for which ``predicate(record)`` is true."""

    kind = "filter"

    def __init__(self, predicate: Callable[[Any], bool], name: str | None = None) -> None:
        super().__init__(name)
        self.predicate = predicate

    def process_batch(self, records: list[Any]) -> list[Any]:
        pred = self.predicate
        return [r for r in records if pred(r)]


class FlatMap(Operator):
    """``fn(record) -> iterable of records`` (zero, one or many per input)."""

    kind = "flat_map"

    def __init__(self, fn: Callable[[Any], Iterable[Any]], name: str | None = None) -> None:
        super().__init__(name)
        self.fn = fn

    def process_batch(self, records: list[Any]) -> list[Any]:
        fn = self.fn
        out: list[Any] = []
        extend = out.extend
        for r in records:
            extend(fn(r))
        return out
