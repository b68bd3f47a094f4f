"""Model test of the restore rule (``cr_consumer/state/restore.py``, steps 3-4), no broker.

Hypothesis draws one changelog partition's history: checkpoint intervals with increasing seqs,
each consuming some input records and writing its dirty keys (states or deletes, each tagged
with the source offset of the key's last change). A completed interval's writes all reach the
log; a failed one's seq is aborted and any prefix of its writes reaches the log, at its place;
zombie writes (aborted seqs, any key, any source offset) land anywhere, after later completed
writes too. The table restored at any completed checkpoint (or the initial one) must equal a
direct sequential run: the completed intervals up to it, applied in order.
"""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from cr_consumer.state.changelog import ChangelogRecord, JsonKey, JsonValue
from cr_consumer.state.restore import RestoreError, restore_table

KEYS: list[JsonKey] = ["a", "b", 7, 2.5, None, ("x", 1), ("x", 2), ("x", ("y", False))]
STATES = st.one_of(
    st.integers(-3, 3),
    st.text(max_size=3),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.text(max_size=2), st.integers(0, 3), max_size=2),
)
CHANGES = st.one_of(st.none(), STATES)  # None: a delete


@attrs.frozen
class Interval:
    seq: int
    completed: bool
    writes: dict[JsonKey, JsonValue]
    #: The source offset after the interval (the checkpoint's, when completed).
    position: int


@attrs.frozen
class History:
    log: list[tuple[int, ChangelogRecord]]
    intervals: list[Interval]
    failed: list[int]


@st.composite
def histories(draw: st.DrawFn) -> History:
    seq = position = 0
    log: list[ChangelogRecord] = []
    intervals: list[Interval] = []
    for _ in range(draw(st.integers(0, 8))):
        seq += draw(st.integers(1, 3))  # seqs increase, with gaps (seqs of other regions' attempts)
        completed = draw(st.booleans())
        keys = draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=5))
        consumed = draw(st.integers(len(keys), len(keys) + 5))  # input records read in the interval
        writes: dict[JsonKey, JsonValue] = {k: draw(CHANGES) for k in keys}
        records = [ChangelogRecord(k, writes[k], seq, position + draw(st.integers(0, consumed - 1))) for k in keys]
        if completed:
            log.extend(records)  # flushed before the ack
            position += consumed
        else:
            log.extend(records[: draw(st.integers(0, len(records)))])  # any part flushed; replayed later
        intervals.append(Interval(seq, completed, writes, position))
    failed = [i.seq for i in intervals if not i.completed]
    if failed:
        for _ in range(draw(st.integers(0, 4))):  # zombies: aborted seqs, anywhere, any source offset
            zombie = ChangelogRecord(
                draw(st.sampled_from(KEYS)), draw(CHANGES), draw(st.sampled_from(failed)), draw(st.integers(0, 10**6))
            )
            log.insert(draw(st.integers(0, len(log))), zombie)
    base = draw(st.integers(0, 100))
    offsets, offset = [], base
    for _ in log:
        offsets.append(offset)
        offset += draw(st.integers(1, 2))  # offsets increase, with gaps (control records, other writers)
    return History(list(zip(offsets, log)), intervals, failed)


def direct_run(intervals: list[Interval], upto_seq: int) -> dict[JsonKey, JsonValue]:
    table: dict[JsonKey, JsonValue] = {}
    for interval in intervals:
        if interval.completed and interval.seq <= upto_seq:
            for key, value in interval.writes.items():
                if value is None:
                    table.pop(key, None)
                else:
                    table[key] = value
    return table


@settings(max_examples=400)
@given(history=histories(), data=st.data())
def test_restore_equals_the_direct_run_at_every_checkpoint(history: History, data: st.DataObject) -> None:
    checkpoints = [(0, 0)] + [(i.seq, i.position) for i in history.intervals if i.completed]
    upto_seq, source_offset = data.draw(st.sampled_from(checkpoints))
    # every failed seq up to the checkpoint is aborted; later ones may not be known yet
    aborted = {s for s in history.failed if s <= upto_seq or data.draw(st.booleans())}
    # seqs no record carries (allocated, never completed, nothing written) may be listed too
    aborted |= set(data.draw(st.lists(st.integers(1000, 1010), max_size=2)))
    # the log may be read past the checkpoint's end: later seqs are skipped by the seq rule
    assert restore_table(history.log, upto_seq, aborted, source_offset) == direct_run(history.intervals, upto_seq)


@given(history=histories())
def test_every_completed_checkpoint_restores_with_no_aborted_seq_when_nothing_failed(history: History) -> None:
    completed = [i for i in history.intervals if i.completed]
    log = [(o, r) for o, r in history.log if r.seq not in history.failed]
    for interval in completed:
        assert restore_table(log, interval.seq, (), interval.position) == direct_run(history.intervals, interval.seq)


def rec(key: JsonKey, value: JsonValue, seq: int, src: int) -> ChangelogRecord:
    return ChangelogRecord(key, value, seq, src)


def test_a_lost_aborted_seq_fails_the_restore_on_its_source_offset() -> None:
    log = [(0, rec("a", 1, 1, 0)), (1, rec("a", 5, 2, 3)), (2, rec("a", 2, 3, 1))]
    assert restore_table(log, 3, {2}, 2) == {"a": 2}
    with pytest.raises(RestoreError, match=r"offset 1: key 'a' of seq 2 was changed by source offset 3"):
        restore_table(log, 3, (), 2)


def test_completed_seqs_out_of_log_order_fail_the_restore() -> None:
    log = [(0, rec("a", 1, 2, 0)), (1, rec("b", 1, 1, 0))]
    with pytest.raises(RestoreError, match="seq 1 after seq 2"):
        restore_table(log, 2, (), 5, where="t partition 3")
    assert restore_table(log, 2, {1}, 5) == {"a": 1}


def test_offsets_out_of_order_fail_the_restore() -> None:
    with pytest.raises(RestoreError, match="offset 4 after offset 4"):
        restore_table([(4, rec("a", 1, 1, 0)), (4, rec("b", 1, 1, 0))], 1, (), 1)


def test_list_keys_become_tuples() -> None:
    record = ChangelogRecord(["x", [1, 2]], {"n": 1}, 1, 0)
    assert record.key == ("x", (1, 2))
    assert restore_table([(0, record)], 1, (), 1) == {("x", (1, 2)): {"n": 1}}


def test_compaction_would_lose_a_committed_state() -> None:
    """Why the changelog is never compacted: a cleaner keeps each key's last record, an aborted
    one included, and the committed older one is gone."""
    log = [(0, rec("a", 1, 1, 0)), (1, rec("a", 99, 2, 1))]  # seq 2 failed
    compacted = [(1, rec("a", 99, 2, 1))]
    assert restore_table(log, 1, {2}, 1) == {"a": 1}
    assert restore_table(compacted, 1, {2}, 1) == {}


class RegionOfOnePartition(RuleBasedStateMachine):
    """A partition's owner through checkpoints, failed attempts, resets and zombies: after every
    step, restoring at the last completed checkpoint gives the direct run's table."""

    @initialize()
    def start(self) -> None:
        self.log: list[tuple[int, ChangelogRecord]] = []
        self.next_seq = 1
        self.position = 0  # the source offset at the last completed checkpoint
        self.completed: list[tuple[int, int, dict[JsonKey, JsonValue]]] = []  # (seq, position, table)
        self.aborted: set[int] = set()
        self.table: dict[JsonKey, JsonValue] = {}  # the direct run at the last completed checkpoint
        self.zombie_seqs: list[int] = []

    def _append(self, record: ChangelogRecord) -> None:
        offset = self.log[-1][0] + 1 if self.log else 0
        self.log.append((offset, record))

    def _interval(self, data: st.DataObject) -> tuple[int, dict[JsonKey, JsonValue], list[ChangelogRecord], int]:
        seq = self.next_seq
        self.next_seq += 1
        keys = data.draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=4))
        consumed = data.draw(st.integers(len(keys), len(keys) + 3))
        writes: dict[JsonKey, JsonValue] = {k: data.draw(CHANGES) for k in keys}
        records = [
            ChangelogRecord(k, writes[k], seq, self.position + data.draw(st.integers(0, consumed - 1))) for k in keys
        ]
        return seq, writes, records, consumed

    @rule(data=st.data())
    def checkpoint(self, data: st.DataObject) -> None:
        seq, writes, records, consumed = self._interval(data)
        for record in records:
            self._append(record)
        for key, value in writes.items():
            if value is None:
                self.table.pop(key, None)
            else:
                self.table[key] = value
        self.position += consumed
        self.completed.append((seq, self.position, dict(self.table)))

    @rule(data=st.data(), zombie=st.booleans())
    def failed_checkpoint(self, data: st.DataObject, zombie: bool) -> None:
        """An attempt whose flush or ack failed (part of its writes stored), then a reset; with
        ``zombie`` its owner lives on and keeps writing its seq later."""
        seq, _, records, _ = self._interval(data)
        for record in records[: data.draw(st.integers(0, len(records)))]:
            self._append(record)
        self.aborted.add(seq)
        if zombie:
            self.zombie_seqs.append(seq)

    @precondition(lambda self: bool(self.zombie_seqs))
    @rule(data=st.data())
    def zombie_write(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from(self.zombie_seqs))
        self._append(ChangelogRecord(data.draw(st.sampled_from(KEYS)), data.draw(CHANGES), seq, 10**9))

    @invariant()
    def restore_matches_every_completed_checkpoint(self) -> None:
        assert restore_table(self.log, self.completed[-1][0] if self.completed else 0, self.aborted, self.position) == (
            self.table
        )
        for seq, position, table in self.completed[-3:]:
            assert restore_table(self.log, seq, self.aborted, position) == table


TestRegionOfOnePartition = RegionOfOnePartition.TestCase
TestRegionOfOnePartition.settings = settings(max_examples=100, stateful_step_count=20)
