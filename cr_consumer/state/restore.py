"""Rebuilding a partition's keyed table at a checkpoint from its changelog (``changelog.py``).

Input partition p's table at checkpoint S is rebuilt from changelog partition p:

1. The region's checkpoint S gives, for p: ``base`` (where the changelog's last materialization
   of p starts; 0 until there is one), ``end`` (the end offset the owner's flush returned at the
   last checkpoint <= S that wrote p), the source offset p stood at, and the region's
   ``aborted_seqs`` (seqs allocated but never completed).
2. :func:`read_changelog` reads changelog partition p from ``base`` up to ``end`` with raw Fetch
   requests, never a ``ListOffsets`` (its "latest" answer is wrong on the test broker), bounded by
   ``deadline_s``; every record is checked (``decode_record``: a malformed one raises naming its
   partition and offset).
3. :func:`restore_table` starts from an empty table and applies, in log order, every record with
   ``seq <= S`` whose seq is not aborted: the state replaces the key's, a delete removes the key.
   Records of failed checkpoint attempts and of zombies carry aborted seqs (or lie after
   ``end``) and change nothing.
4. Invariants checked on every applied record, each a bug elsewhere that raises
   :class:`RestoreError` instead of restoring a wrong table: its source offset is below p's
   source offset at S (else the table would reflect input the checkpoint did not consume, for
   instance an aborted seq missing from ``aborted_seqs``); applied seqs never decrease in log
   order (the owner at S+1 writes only after S completed); offsets increase.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any

from coordinator.kafka.raw_batches import PartitionReader
from coordinator.kafka.raw_requests import RawClient
from cr_consumer.state.changelog import ChangelogRecord, JsonKey, JsonValue, decode_record


class RestoreError(RuntimeError):
    """The changelog contradicts the checkpoint it is restored to (step 4)."""


def restore_table(
    records: Iterable[tuple[int, ChangelogRecord]],
    upto_seq: int,
    aborted_seqs: Collection[int],
    source_offset: int,
    *,
    where: str = "changelog",
) -> dict[JsonKey, JsonValue]:
    """Steps 3-4 over ``(changelog offset, record)`` pairs in log order; ``where`` names the
    partition in errors."""
    aborted = frozenset(aborted_seqs)
    table: dict[JsonKey, JsonValue] = {}
    last_offset = -1
    last_seq = -1
    for offset, record in records:
        if offset <= last_offset:
            raise RestoreError(f"{where}: offset {offset} after offset {last_offset}: records out of log order")
        last_offset = offset
        seq = record.seq
        if seq > upto_seq or seq in aborted:
            continue
        if record.src >= source_offset:
            raise RestoreError(
                f"{where} offset {offset}: key {record.key!r} of seq {seq} was changed by source offset {record.src},"
                f" but checkpoint {upto_seq} consumed the source only below {source_offset}"
            )
        if seq < last_seq:
            raise RestoreError(
                f"{where} offset {offset}: seq {seq} after seq {last_seq}: completed checkpoints' writes out of order"
            )
        last_seq = seq
        if record.value is None:
            table.pop(record.key, None)
        else:
            table[record.key] = record.value
    return table


def read_changelog(
    settings: Mapping[str, Any], topic: str, partition: int, start: int, end: int, deadline_s: float
) -> Iterator[tuple[int, ChangelogRecord]]:
    """Step 2: ``(offset, record)`` for every record of ``topic``/``partition`` in
    ``[start, end)``; ``settings`` from ``admin.admin_settings``. Fewer records than ``end``
    stored, or the deadline passed, raises ``RawReadError``."""
    if not 0 <= start <= end:
        raise ValueError(f"{topic}:{partition}: read [{start}, {end}) is not a range of offsets")
    if start == end:
        return
    with RawClient(settings, time.monotonic() + deadline_s) as client:
        for batch in PartitionReader(client, topic, partition).batches(start, end):
            if batch.control is not None:
                continue  # a transaction marker holds no change
            for record in batch.records:
                if start <= record.offset < end:
                    yield (
                        record.offset,
                        decode_record(partition, record.offset, record.key, record.value, record.headers, topic=topic),
                    )


def restore_partition(
    settings: Mapping[str, Any],
    topic: str,
    partition: int,
    base: int,
    end: int,
    upto_seq: int,
    aborted_seqs: Collection[int],
    source_offset: int,
    deadline_s: float,
) -> dict[JsonKey, JsonValue]:
    """Steps 1-4: input partition ``partition``'s table at checkpoint ``upto_seq``."""
    records = read_changelog(settings, topic, partition, base, end, deadline_s)
    return restore_table(records, upto_seq, aborted_seqs, source_offset, where=f"{topic} partition {partition}")


__all__ = ["RestoreError", "read_changelog", "restore_partition", "restore_table"]
