"""Independent verification of a drill's exactly-once output.

The verifier knows nothing about the pipeline or the region: it compares what
the drill *produced* (the manifest, written while producing, from the
producer's own acknowledgements) with what the sinks *published*, and with the
group's committed offsets as any Kafka tool sees them. What was published is
read into a :class:`~cr_consumer.drill.delivered.Delivered`, by input (topic, partition) and
offset: the file sinks' output by ``delivered.py``, the Kafka sinks' by ``verify_kafka.py``
(each module says how).

The manifest's format, and what records acknowledged without an offset mean:
:mod:`cr_consumer.drill.manifest`. Before the checks, each value acknowledged
without an offset is placed at the first delivered offset not produced
otherwise that carries it (values are unique per partition); one never
delivered is *missing*, and each poison record acknowledged without an offset
explains one hole of the range.

Checks (:func:`verify`), per (topic, partition), with ``first``/``last`` the
lowest/highest produced offset:

1. every offset in ``first..last`` that is not poison is delivered (else *missing*;
   this is the contiguity check: a hole anywhere in the range is missing);
2. no offset is delivered twice (*duplicates* counts the extra copies);
3. the delivered value equals the produced one (*wrong_values*);
4. nothing else is delivered: no poison record, no offset outside what was
   produced, no unknown topic/partition (*unexpected*);
5. the committed offsets are not behind the last completed checkpoint: for
   every partition in that checkpoint (the sources' offsets the members saved
   in their checkpoint stores, ``last_checkpoint_offsets``), committed >= the
   checkpoint's offset (the drain commits before the checkpoint completes),
   reported as *committed_behind*. Without a checkpoint (none completed, or a
   caller that has no stores) the check falls back to the output: committed >=
   highest published offset + 1. ``committed_basis`` says which was used.

With a dead-letter sink (the drill's ``dead_letter`` mode) its output is read the same way into
a second :class:`~cr_consumer.drill.delivered.Delivered`, by the input each dead-letter record
names in its ``crkafka.source.*`` headers, and checked by :func:`_check_dead_letters`:

6. every poison offset is in it exactly once (*dead_letter_missing*, *dead_letter_duplicates*
   counts the extra copies; a poison record acknowledged without its offset is matched by one
   dead-letter record at an offset not produced otherwise);
7. nothing else is in it: no good record, no offset that was not produced
   (*dead_letter_unexpected*). Checks 1-4 on the output stay as they are: a poison record there
   is *unexpected*.

A published record that does not name its input (a line that is not a JSON
object with topic, partition and offset; a Kafka record without valid
provenance headers) is a *malformed_lines* failure; so is a transaction left
open in the output topic (*open_transactions*); both count the dead-letter output's too.

With the drill's keyed state (``--state``, ``state.py``):

8. every delivered record that passes checks 2-3 carries the key its partition's state gives
   it: its state key and that key's count up to its offset (*wrong_states*).

The result is OK only when every count but ``aborted`` and ``dead_letters`` is zero.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from cr_consumer.drill.delivered import MAX_EXAMPLES, Conflict, Delivered
from cr_consumer.drill.manifest import Manifest
from cr_consumer.drill.state import expected_keys


@attrs.frozen
class PartitionResult:
    topic: str
    partition: int
    first: int | None
    last: int | None
    expected: int
    poison: int
    delivered: int
    missing: int
    duplicates: int
    wrong_values: int
    unexpected: int
    committed: int | None = None
    committed_behind: bool = False
    checkpointed: int | None = None


@attrs.frozen
class VerifyResult:
    produced: int
    poison: int
    expected: int
    delivered: int
    missing: int
    duplicates: int
    wrong_values: int
    unexpected: int
    malformed_lines: int
    committed_behind: int
    #: Files (file sink) or output partitions (Kafka sink) read.
    sources: int
    partitions: tuple[PartitionResult, ...]
    examples: dict[str, list[object]] = attrs.field(factory=dict)
    committed_basis: str | None = None
    #: Kafka sink: records of aborted transactions (a reset's replayed interval; not a failure).
    aborted: int = 0
    #: Kafka sink: transactions with records and no marker below the high watermark.
    open_transactions: int = 0
    #: Records in the dead-letter output (None: no dead-letter sink) and checks 6-7.
    dead_letters: int | None = None
    dead_letter_missing: int = 0
    dead_letter_duplicates: int = 0
    dead_letter_unexpected: int = 0
    #: Check 8 (None: the drill kept no keyed state).
    wrong_states: int | None = None

    @property
    def ok(self) -> bool:
        return not (
            self.dead_letter_missing
            or self.dead_letter_duplicates
            or self.dead_letter_unexpected
            or self.missing
            or self.duplicates
            or self.wrong_values
            or self.unexpected
            or self.malformed_lines
            or self.committed_behind
            or self.open_transactions
            or self.wrong_states
        )


def _placed(
    vals: dict[int, Any], poison: set[int], unplaced: list[Any], delivered: dict[int, Any]
) -> tuple[dict[int, Any], list[Any]]:
    """The partition's values with each value acknowledged without an offset
    placed at the first delivered offset not produced otherwise that carries it
    (module docstring), and the values never delivered."""
    if not unplaced:
        return vals, []
    wanted = Counter(unplaced)
    placed = dict(vals)
    for off in sorted(delivered):
        value = delivered[off]
        if off in vals or off in poison or not isinstance(value, str):
            continue  # produced at a known offset, a conflict, or not a drill value
        if wanted[value] > 0:
            wanted[value] -= 1
            placed[off] = value
    return placed, list(wanted.elements())


_Example = Callable[[str, object], None]


def _check_dead_letters(manifest: Manifest, dead_letters: Delivered, example: _Example) -> tuple[int, int, int]:
    """Checks 6-7 (module docstring): (missing, duplicates, unexpected) of the dead-letter output."""
    missing = dup = unexpected = 0
    for key in sorted(set(manifest.partitions()) | set(dead_letters.seen)):
        topic, part = key
        poison, vals = manifest.poison.get(key, set()), manifest.values.get(key, {})
        counts = dead_letters.seen.get(key, Counter())
        unplaced = manifest.unplaced_poison.get(key, 0)
        for off in sorted(poison | set(counts)):
            n = counts.get(off, 0)
            if off not in poison:
                if off in vals or not unplaced:
                    unexpected += 1
                    example("dead_letter_unexpected", [topic, part, off, "good" if off in vals else "not produced"])
                    continue
                unplaced -= 1  # a poison record acknowledged without its offset
            if n == 0:
                missing += 1
                example("dead_letter_missing", [topic, part, off])
            elif n > 1:
                dup += n - 1
                example("dead_letter_duplicates", [topic, part, off, n])
        for _ in range(unplaced):
            missing += 1
            example("dead_letter_missing", [topic, part, None])
    return missing, dup, unexpected


def _count_missing(
    key: tuple[str, int],
    never_delivered: list[Any],
    first: int | None,
    last: int | None,
    counts: Counter[int],
    poison: set[int],
    holes_for_poison: int,
    example: _Example,
) -> int:
    """Values never delivered, and offsets between the first and the last produced
    that nobody delivered (less one per poison record acknowledged without its offset)."""
    topic, part = key
    missing = 0
    for value in never_delivered:
        missing += 1
        example("missing", [topic, part, None, repr(value)[:80]])
    if first is not None and last is not None:
        for off in range(first, last + 1):
            if off not in counts and off not in poison:
                if holes_for_poison:
                    holes_for_poison -= 1  # a poison record acknowledged without its offset
                    continue
                missing += 1
                example("missing", [topic, part, off])
    return missing


def _count_bad_deliveries(
    key: tuple[str, int],
    counts: Counter[int],
    vals: dict[int, Any],
    got: dict[int, Any],
    poison: set[int],
    example: _Example,
) -> tuple[int, int, int]:
    """(duplicates, wrong values, unexpected offsets) among the delivered offsets."""
    topic, part = key
    dup = wrong = unexpected = 0
    for off, n in counts.items():
        if n > 1:
            dup += n - 1
            example("duplicates", [topic, part, off, n])
        if off in vals:
            value = got[off]
            if isinstance(value, Conflict) or value != vals[off]:
                wrong += 1
                example("wrong_values", [topic, part, off, repr(value)[:80], repr(vals[off])[:80]])
        else:
            unexpected += 1
            example("unexpected", [topic, part, off, "poison" if off in poison else "not produced"])
    return dup, wrong, unexpected


def _count_wrong_states(
    key: tuple[str, int], vals: dict[int, Any], got: dict[int, Any], got_keys: dict[int, Any], example: _Example
) -> int:
    """Check 8 for one partition: delivered records with the right value and the wrong key."""
    topic, part = key
    wrong = 0
    for offset, expected in expected_keys(vals).items():
        if got.get(offset) != vals[offset]:
            continue  # missing, duplicated with another value, or wrong: checks 1-3 count it
        if got_keys.get(offset) != expected:
            wrong += 1
            example("wrong_states", [topic, part, offset, repr(got_keys.get(offset))[:40], expected])
    return wrong


def _commit_check(
    key: tuple[str, int],
    counts: Counter[int],
    committed: dict[tuple[str, int], int | None] | None,
    ckpt_offsets: dict[tuple[str, int], int] | None,
    example: _Example,
) -> tuple[int | None, bool]:
    """(the committed offset, whether it is behind what must be committed: the
    checkpoint's offset, else the end of the output); (None, False) unchecked."""
    comm = None
    behind = False
    need = None
    if committed is not None and ckpt_offsets is not None:
        need = ckpt_offsets.get(key)
    elif committed is not None and counts:
        need = max(counts) + 1
    if need is not None and committed is not None:
        comm = committed.get(key)
        behind = (comm is None and need > 0) or (comm is not None and comm < need)
        if behind:
            example("committed_behind", [key[0], key[1], comm, need])
    return comm, behind


def verify(
    manifest: Manifest,
    output: Delivered,
    committed: dict[tuple[str, int], int | None] | None = None,
    checkpoint: tuple[int, dict[tuple[str, int], int]] | None = None,
    dead_letters: Delivered | None = None,
    *,
    state: bool = False,
) -> VerifyResult:
    """Check the published ``output`` against the manifest (see the module docstring).

    ``committed`` maps (topic, partition) to the group's committed offset
    (``None`` when nothing is committed); when it is None the commit check is skipped.
    ``checkpoint`` is ``(seq, {(topic, partition): offset})`` of the last completed
    checkpoint (:func:`last_checkpoint_offsets`); None: compare with the output.
    ``dead_letters``: the dead-letter output (checks 6-7); None: there is no dead-letter sink.
    ``state``: the drill kept its keyed state (check 8).
    """
    seen, got_value = output.seen, output.values
    examples: dict[str, list[object]] = defaultdict(list)
    for read in (output, dead_letters or Delivered()):
        for kind, items in read.examples.items():
            examples[kind].extend(items[: MAX_EXAMPLES - len(examples[kind])])

    def example(kind: str, item: object) -> None:
        if len(examples[kind]) < MAX_EXAMPLES:
            examples[kind].append(item)

    totals: Counter[str] = Counter()
    results = []
    ckpt_offsets = checkpoint[1] if checkpoint is not None else None
    basis = None
    if committed is not None:
        basis = f"checkpoint {checkpoint[0]}" if checkpoint is not None else "output"
    keys = set(manifest.partitions()) | set(seen) | set(ckpt_offsets or {})
    for key in sorted(keys):
        topic, part = key
        poison = manifest.poison.get(key, set())
        counts = seen.get(key, Counter())
        vals, never_delivered = _placed(
            manifest.values.get(key, {}), poison, manifest.unplaced.get(key, []), got_value.get(key, {})
        )
        produced_offsets = set(vals) | poison
        first = min(produced_offsets) if produced_offsets else None
        last = max(produced_offsets) if produced_offsets else None
        missing = _count_missing(
            key, never_delivered, first, last, counts, poison, manifest.unplaced_poison.get(key, 0), example
        )
        dup, wrong, unexpected = _count_bad_deliveries(key, counts, vals, got_value.get(key, {}), poison, example)
        if state:
            totals["wrong_states"] += _count_wrong_states(
                key, vals, got_value.get(key, {}), output.keys.get(key, {}), example
            )
        delivered = sum(counts.values())
        comm, behind = _commit_check(key, counts, committed, ckpt_offsets, example)
        results.append(
            PartitionResult(
                topic=topic,
                partition=part,
                first=first,
                last=last,
                expected=len(vals),
                poison=len(poison),
                delivered=delivered,
                missing=missing,
                duplicates=dup,
                wrong_values=wrong,
                unexpected=unexpected,
                committed=comm,
                committed_behind=behind,
                checkpointed=ckpt_offsets.get(key) if ckpt_offsets is not None else None,
            )
        )
        totals.update(
            missing=missing, duplicates=dup, wrong=wrong, unexpected=unexpected, delivered=delivered, behind=int(behind)
        )

    dl_missing = dl_dup = dl_unexpected = 0
    if dead_letters is not None:
        dl_missing, dl_dup, dl_unexpected = _check_dead_letters(manifest, dead_letters, example)
    extra = dead_letters or Delivered()
    return VerifyResult(
        produced=manifest.produced,
        poison=manifest.poison_count,
        expected=manifest.produced - manifest.poison_count,
        delivered=totals["delivered"],
        missing=totals["missing"],
        duplicates=totals["duplicates"],
        wrong_values=totals["wrong"],
        unexpected=totals["unexpected"],
        malformed_lines=output.malformed + extra.malformed,
        committed_behind=totals["behind"],
        sources=output.sources,
        partitions=tuple(results),
        examples=dict(examples),
        committed_basis=basis,
        aborted=output.aborted + extra.aborted,
        open_transactions=output.open_transactions + extra.open_transactions,
        dead_letters=sum(sum(c.values()) for c in dead_letters.seen.values()) if dead_letters is not None else None,
        wrong_states=totals["wrong_states"] if state else None,
        dead_letter_missing=dl_missing,
        dead_letter_duplicates=dl_dup,
        dead_letter_unexpected=dl_unexpected,
    )


class CheckpointMissing(RuntimeError):
    """The last completed checkpoint is in no member's checkpoint store."""


def last_checkpoint_offsets(
    state_dir: str | os.PathLike[str], seq: int, source_id: str = "00-source"
) -> dict[tuple[str, int], int]:
    """The sources' offsets in checkpoint ``seq``, from every member's checkpoint
    store under ``state_dir/checkpoints/<member>/`` (the runtime's layout).

    A partition in several members' checkpoints (it should not be) gets the
    lowest offset, as the region controller's union does. Raises
    CheckpointMissing when no store holds ``seq`` sealed."""
    from cr_consumer.operator.checkpoint import OperatorCheckpoint
    from cr_consumer.runtime.pipeline.checkpoint_store import DirectoryCheckpointStore

    root = Path(state_dir) / "checkpoints"
    out: dict[tuple[str, int], int] = {}
    found = []
    for member_dir in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        store = DirectoryCheckpointStore(member_dir)
        if not store.has(seq):
            continue
        found.append(member_dir.name)
        ckpt = OperatorCheckpoint.decode(store.load(seq, source_id))
        for tp, off in ckpt.offsets.items():
            key = (tp.topic, tp.partition)
            out[key] = off if key not in out else min(out[key], off)
    if not found:
        raise CheckpointMissing(f"checkpoint {seq} is sealed in no member's store under {root}")
    return out


__all__ = [
    "CheckpointMissing",
    "PartitionResult",
    "VerifyResult",
    "last_checkpoint_offsets",
    "verify",
]
