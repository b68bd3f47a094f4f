"""The drill's keyed state (``--state``): a count per key that follows its input partition, and
its independent check.

1. **Pipeline** (``pipeline.py``, ``--param state=true``): right before the sink, a
   ``ctx.keyed_state`` stage (``runtime/pipeline/keyed_state.py``: the state on a Kafka
   changelog, restored by whichever member owns the partition) counts each record under its
   state key, :func:`state_key` of its value (one of :data:`STATE_KEYS` per partition), and emits
   the record with its key set to ``"<state key>:<count>"``: the count of that state key in the
   record's partition up to and including the record. Bases every :data:`MATERIALIZE_AFTER`
   changes.
2. **Check** (``verify.py``, check 8): the manifest says which value was produced at which
   offset, so the expected key of every delivered record is the rank of its offset among the
   partition's good offsets of the same state key (:func:`expected_keys`). A delivered record
   whose key differs (a count restored from a wrong state: a lost or repeated change, a
   zombie's write, an aborted interval applied) is a *wrong state*. Only records that also pass
   checks 1-4 are compared; a poison record never reaches the stage (the source skips it, or
   the dead-letter map before the stage rejects it).
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from cr_consumer.runtime.pipeline.records import replace

if TYPE_CHECKING:  # the verifier imports this module without the Kafka runtime
    from cr_consumer.runtime.pipeline.keyed_state import PartitionState

#: State keys per partition: few enough that every key's count changes at every checkpoint, so
#: every checkpoint writes changes, and a wrong restore shows in the next record of each key.
STATE_KEYS = 16
#: The stage's ``materialize_after``: a checkpoint writes at most one change per state key (the
#: changes coalesce), so a partition writes a base (its whole table) every other checkpoint or
#: so; the faults also land on intervals that write one, and restores read from bases and
#: pointers (the default, 10,000, would give a drill none).
MATERIALIZE_AFTER = STATE_KEYS


def state_key(value: str) -> int:
    """The state key of a drill value (stable across processes: not ``hash``)."""
    return zlib.crc32(value.encode("utf-8")) % STATE_KEYS


def count_by_key(record: Any, state: PartitionState) -> Iterator[Any]:
    """Step 1's function."""
    k = state_key(record.value)
    n = state.get(k, 0) + 1
    state.set(k, n)
    yield replace(record, key=f"{k}:{n}")


def expected_keys(values: Mapping[int, Any]) -> dict[int, str]:
    """Step 2: the key each offset of ``values`` (one partition's good values) must carry."""
    counts: Counter[int] = Counter()
    out: dict[int, str] = {}
    for offset in sorted(values):
        value = values[offset]
        if not isinstance(value, str):
            continue  # not a drill value: checks 1-4 count it
        k = state_key(value)
        counts[k] += 1
        out[offset] = f"{k}:{counts[k]}"
    return out


__all__ = ["MATERIALIZE_AFTER", "STATE_KEYS", "count_by_key", "expected_keys", "state_key"]
