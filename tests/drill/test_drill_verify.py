"""The drill verifier on hand-made output: every kind of fault is detected."""

from __future__ import annotations

import json

import pytest

from cr_consumer.drill.delivered import read_dead_letter_files, read_files
from cr_consumer.drill.manifest import Manifest, ManifestError
from cr_consumer.drill.state import state_key
from cr_consumer.drill.verify import verify


def _manifest(n=10, poison=()):
    m = Manifest(group="g")
    for p in (0, 1):
        for off in range(n):
            m.add("t", p, off, f"v{p}-{off}", poison=(p, off) in poison)
    return m


def _write(path, rows):
    path.write_text(
        "".join(json.dumps({"topic": t, "partition": p, "offset": o, "value": v}) + "\n" for t, p, o, v in rows)
    )


def _good_rows(n=10, poison=()):
    return [("t", p, o, f"v{p}-{o}") for p in (0, 1) for o in range(n) if (p, o) not in poison]


def test_clean_output_passes(tmp_path):
    rows = _good_rows()
    _write(tmp_path / "m1-0000000001.jsonl", rows[:7])
    _write(tmp_path / "m2-0000000001.jsonl", rows[7:])
    r = verify(_manifest(), read_files(tmp_path), committed={("t", 0): 10, ("t", 1): 10})
    assert r.ok, r
    assert (r.produced, r.expected, r.delivered, r.sources) == (20, 20, 20, 2)


def test_gap_is_missing(tmp_path):
    rows = [row for row in _good_rows() if row[:3] != ("t", 1, 4)]
    _write(tmp_path / "a.jsonl", rows)
    r = verify(_manifest(), read_files(tmp_path))
    assert not r.ok
    assert r.missing == 1
    assert r.examples["missing"] == [["t", 1, 4]]
    assert r.duplicates == 0
    assert r.unexpected == 0


def test_duplicate_across_files_is_detected(tmp_path):
    rows = _good_rows()
    _write(tmp_path / "a.jsonl", rows)
    _write(tmp_path / "b.jsonl", [rows[3]])
    r = verify(_manifest(), read_files(tmp_path))
    assert not r.ok
    assert r.duplicates == 1
    assert r.missing == 0
    assert r.examples["duplicates"] == [["t", 0, 3, 2]]


def test_wrong_value_is_detected(tmp_path):
    rows = _good_rows()
    rows[5] = ("t", 0, 5, "tampered")
    _write(tmp_path / "a.jsonl", rows)
    r = verify(_manifest(), read_files(tmp_path))
    assert not r.ok
    assert r.wrong_values == 1


def test_poison_skipped_is_ok_and_poison_delivered_is_not(tmp_path):
    poison = {(0, 2), (1, 9)}
    m = _manifest(poison=poison)
    _write(tmp_path / "a.jsonl", _good_rows(poison=poison))
    r = verify(m, read_files(tmp_path))
    assert r.ok, r
    assert (r.produced, r.poison, r.expected, r.delivered) == (20, 2, 18, 18)
    _write(tmp_path / "b.jsonl", [("t", 0, 2, "poison")])
    r = verify(m, read_files(tmp_path))
    assert not r.ok
    assert r.unexpected == 1


def test_pending_files_are_ignored(tmp_path):
    rows = _good_rows()
    _write(tmp_path / "a.jsonl", rows)
    _write(tmp_path / ".m1-abc.pending", rows[:3])  # not published: must not count
    assert verify(_manifest(), read_files(tmp_path)).ok


def test_committed_offsets_behind_output(tmp_path):
    _write(tmp_path / "a.jsonl", _good_rows())
    r = verify(_manifest(), read_files(tmp_path), committed={("t", 0): 10, ("t", 1): 7})
    assert not r.ok
    assert r.committed_behind == 1
    r = verify(_manifest(), read_files(tmp_path), committed={("t", 0): 10})
    assert r.committed_behind == 1  # nothing committed for t/1


def test_malformed_line_and_unknown_partition(tmp_path):
    rows = [*_good_rows(), ("t", 7, 0, "x")]
    _write(tmp_path / "a.jsonl", rows)
    with open(tmp_path / "a.jsonl", "a") as f:
        f.write("not json\n")
    r = verify(_manifest(), read_files(tmp_path))
    assert r.unexpected == 1
    assert r.malformed_lines == 1
    assert not r.ok


def test_manifest_round_trip_and_version(tmp_path):
    m = _manifest(poison={(0, 1)})
    m.save(tmp_path / "manifest.json")
    m2 = Manifest.load(tmp_path / "manifest.json")
    assert m2.values == m.values
    assert m2.poison == m.poison
    (tmp_path / "bad.json").write_text(json.dumps({"version": 99}))
    with pytest.raises(ManifestError, match="version 99"):
        Manifest.load(tmp_path / "bad.json")


def _store_checkpoint(state_dir, member, seq, offsets):
    from kafka import TopicPartition

    from cr_consumer.operator.checkpoint import OperatorCheckpoint
    from cr_consumer.runtime.pipeline.checkpoint_store import DirectoryCheckpointStore

    store = DirectoryCheckpointStore(state_dir / "checkpoints" / member)
    ckpt = OperatorCheckpoint(member, (member,), {TopicPartition(t, p): o for (t, p), o in offsets.items()})
    store.save(seq, "00-source", ckpt.encode())
    store.seal(seq)


def test_committed_offsets_compared_with_the_last_checkpoint_per_partition(tmp_path):
    """Check 5 reads the sources' offsets of the last completed checkpoint from the
    members' checkpoint stores, not the output."""
    from cr_consumer.drill.verify import CheckpointMissing, last_checkpoint_offsets

    out, state = tmp_path / "out", tmp_path / "state"
    out.mkdir()
    _write(out / "a.jsonl", _good_rows())
    _store_checkpoint(state, "m0", 4, {("t", 0): 10})
    _store_checkpoint(state, "m1", 4, {("t", 1): 10})
    _store_checkpoint(state, "m1", 3, {("t", 1): 2})
    (state / "checkpoints" / "m1" / "0000000005").mkdir()  # an unsealed later one: ignored
    ckpt = last_checkpoint_offsets(state, 4)
    assert ckpt == {("t", 0): 10, ("t", 1): 10}
    r = verify(_manifest(), read_files(out), committed={("t", 0): 10, ("t", 1): 10}, checkpoint=(4, ckpt))
    assert r.ok
    assert r.committed_basis == "checkpoint 4"
    r = verify(_manifest(), read_files(out), committed={("t", 0): 10, ("t", 1): 9}, checkpoint=(4, ckpt))
    assert r.committed_behind == 1
    assert r.examples["committed_behind"] == [["t", 1, 9, 10]]
    # committed at the checkpoint although the output goes further (an older checkpoint):
    r = verify(
        _manifest(),
        read_files(out),
        committed={("t", 0): 10, ("t", 1): 2},
        checkpoint=(3, last_checkpoint_offsets(state, 3)),
    )
    assert r.committed_behind == 0
    assert r.committed_basis == "checkpoint 3"
    with pytest.raises(CheckpointMissing, match="checkpoint 5"):
        last_checkpoint_offsets(state, 5)


def _manifest_with_unplaced(
    unplaced: dict[int, range], poison_unplaced: set[tuple[int, int]] = frozenset()
) -> Manifest:
    """As _manifest, with the offsets in ``unplaced[p]`` acknowledged without an
    offset (-1: a batch the producer sent again and the broker already had)."""
    m = Manifest(group="g")
    for p in (0, 1):
        for off in range(10):
            ack = -1 if off in unplaced.get(p, ()) or (p, off) in poison_unplaced else off
            m.add("t", p, ack, f"v{p}-{off}", poison=(p, off) in poison_unplaced)
    return m


def test_records_acknowledged_without_an_offset_are_placed_where_delivered(tmp_path):
    m = _manifest_with_unplaced({1: range(4, 8)})
    _write(tmp_path / "a.jsonl", _good_rows())
    r = verify(m, read_files(tmp_path))
    assert r.ok, r
    assert (r.produced, r.delivered) == (20, 20)
    m.save(tmp_path / "manifest.json")
    again = Manifest.load(tmp_path / "manifest.json")
    assert again.unplaced == {("t", 1): [f"v1-{o}" for o in range(4, 8)]}
    assert verify(again, read_files(tmp_path)).ok


def test_a_record_acknowledged_without_an_offset_and_not_delivered_is_missing(tmp_path):
    m = _manifest_with_unplaced({0: range(8, 10)})
    _write(tmp_path / "a.jsonl", [row for row in _good_rows() if row[:3] != ("t", 0, 9)])
    r = verify(m, read_files(tmp_path))
    assert not r.ok
    assert r.missing == 1
    assert r.examples["missing"] == [["t", 0, None, repr("v0-9")]]
    assert r.unexpected == 0


def test_a_value_acknowledged_once_and_delivered_twice_at_two_offsets_is_unexpected(tmp_path):
    m = _manifest_with_unplaced({0: range(9, 10)})
    rows = [*_good_rows(), ("t", 0, 10, "v0-9")]  # the same value once more, after the range
    _write(tmp_path / "a.jsonl", rows)
    r = verify(m, read_files(tmp_path))
    assert not r.ok
    assert r.unexpected == 1
    assert r.missing == 0


def test_a_poison_record_acknowledged_without_an_offset_explains_one_hole(tmp_path):
    m = _manifest_with_unplaced({}, poison_unplaced={(1, 3)})
    rows = [row for row in _good_rows() if row[:3] != ("t", 1, 3)]
    _write(tmp_path / "a.jsonl", rows)
    r = verify(m, read_files(tmp_path))
    assert r.ok, r
    _write(tmp_path / "a.jsonl", [row for row in rows if row[:3] != ("t", 1, 5)])
    assert verify(m, read_files(tmp_path)).missing == 1


@pytest.mark.parametrize(
    "entry",
    [
        {"unplaced": "v0-1"},  # not a list
        {"unplaced": [["v0-1"]]},  # a value that is not a string (would not be hashable)
        {"unplaced_poison": -1},
        {"unplaced_poison": True},
        {"unplaced_poison": "2"},
    ],
    ids=["not-a-list", "list-value", "negative", "bool", "string"],
)
def test_a_manifest_with_malformed_unplaced_records_is_refused(tmp_path, entry):
    doc = _manifest().to_json()
    doc["topics"]["t"]["0"].update(entry)
    (tmp_path / "m.json").write_text(json.dumps(doc))
    with pytest.raises(ManifestError, match="malformed unplaced records"):
        Manifest.load(tmp_path / "m.json")


def _write_dead_letters(path, offsets, value=b"\xff\xfe"):
    """The file dead-letter sink's lines for input records ``offsets`` ((partition, offset)):
    the runtime's own dead-letter records, in the file sink's JSON form."""
    from cr_consumer.runtime.pipeline.dead_letter import dead_letter_record
    from cr_consumer.runtime.pipeline.records import Record, to_json_lines

    records = [
        dead_letter_record(Record("t", p, o, None, None, value, ()), "03-map", ValueError("poison"), ("t", p))
        for p, o in offsets
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(to_json_lines(records, ',"member":"m1"'))


POISON = {(0, 2), (1, 9)}


def _dead_letter_output(tmp_path, dead_letters):
    """The output of a drill in dead-letter mode: the good records, and ``dead_letters``
    (partition, offset) in the ``dlq`` subdirectory; the verdict."""
    _write(tmp_path / "m1-0000000001.jsonl", _good_rows(poison=POISON))
    _write_dead_letters(tmp_path / "dlq" / "m1-0000000001.jsonl", dead_letters)
    return verify(_manifest(poison=POISON), read_files(tmp_path), dead_letters=read_dead_letter_files(tmp_path / "dlq"))


def test_every_poison_record_dead_lettered_once_passes(tmp_path):
    r = _dead_letter_output(tmp_path, sorted(POISON))
    assert r.ok, r
    # the dead-letter subdirectory is not the output: the good records only there
    assert (r.delivered, r.unexpected, r.dead_letters) == (18, 0, 2)
    assert (r.dead_letter_missing, r.dead_letter_duplicates, r.dead_letter_unexpected) == (0, 0, 0)


def test_a_poison_record_not_dead_lettered_is_missing(tmp_path):
    r = _dead_letter_output(tmp_path, [(0, 2)])
    assert not r.ok
    assert (r.dead_letters, r.dead_letter_missing) == (1, 1)
    assert r.examples["dead_letter_missing"] == [["t", 1, 9]]


def test_a_poison_record_dead_lettered_twice_is_a_duplicate(tmp_path):
    _write_dead_letters(tmp_path / "dlq" / "m2-0000000001.jsonl", [(1, 9)], value=b"text")
    r = _dead_letter_output(tmp_path, sorted(POISON))
    assert not r.ok
    assert (r.dead_letters, r.dead_letter_duplicates, r.dead_letter_missing) == (3, 1, 0)
    assert r.examples["dead_letter_duplicates"] == [["t", 1, 9, 2]]


def test_a_good_record_or_a_malformed_line_in_the_dead_letter_output_fails(tmp_path):
    r = _dead_letter_output(tmp_path, [*sorted(POISON), (0, 5)])
    assert not r.ok
    assert r.dead_letter_unexpected == 1
    assert r.examples["dead_letter_unexpected"] == [["t", 0, 5, "good"]]
    _write(tmp_path / "dlq" / "m2-0000000001.jsonl", [("t", 0, 2, "no provenance headers")])
    r = verify(_manifest(poison=POISON), read_files(tmp_path), dead_letters=read_dead_letter_files(tmp_path / "dlq"))
    assert r.malformed_lines == 1
    assert not r.ok


def test_a_dead_letter_matches_a_poison_record_acknowledged_without_an_offset(tmp_path):
    m = _manifest_with_unplaced({}, poison_unplaced={(1, 3)})
    _write(tmp_path / "a.jsonl", [row for row in _good_rows() if row[:3] != ("t", 1, 3)])
    _write_dead_letters(tmp_path / "dlq" / "a.jsonl", [(1, 3)])
    r = verify(m, read_files(tmp_path), dead_letters=read_dead_letter_files(tmp_path / "dlq"))
    assert r.ok, r
    assert r.dead_letters == 1
    r = verify(m, read_files(tmp_path), dead_letters=read_dead_letter_files(tmp_path / "nowhere"))
    assert r.dead_letter_missing == 1


def _state_rows(n=10):
    """The keyed state's output: each record keyed by its state key and that key's count so far."""
    rows = []
    for p in (0, 1):
        counts: dict[int, int] = {}
        for o in range(n):
            k = state_key(f"v{p}-{o}")
            counts[k] = counts.get(k, 0) + 1
            rows.append({"topic": "t", "partition": p, "offset": o, "value": f"v{p}-{o}", "key": f"{k}:{counts[k]}"})
    return rows


def test_keyed_state_counts_are_checked_record_by_record(tmp_path):
    rows = _state_rows()
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert verify(_manifest(), read_files(tmp_path), state=True).wrong_states == 0
    assert verify(_manifest(), read_files(tmp_path)).wrong_states is None  # not a state drill

    # a count restored from a state that lost a change: one record's count is one short
    k, n = rows[13]["key"].split(":")
    rows[13]["key"] = f"{k}:{int(n) - 1}"
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = verify(_manifest(), read_files(tmp_path), state=True)
    assert not r.ok
    assert r.wrong_states == 1
    assert r.examples["wrong_states"] == [["t", 1, 3, repr(f"{k}:{int(n) - 1}"), f"{k}:{n}"]]
    assert (r.missing, r.duplicates, r.wrong_values) == (0, 0, 0)
