"""The exactly-once file sink under untimely faults: real files, no broker.
One member's files are never another's, publishing never overwrites, and a
returning member publishes (never deletes) what its completed checkpoint sealed."""

from __future__ import annotations

import json
import os

import pytest

from cr_consumer.runtime import FileSink, Record


def recs(partition: int, start: int, n: int) -> list[Record]:
    return [Record("t", partition, o, 1000 + o, b"k", b"v%d" % o) for o in range(start, start + n)]


def offsets(directory, member: str) -> list[int]:
    out = []
    for path in sorted(directory.glob(f"{member}-*.jsonl")):
        out.extend(
            json.loads(line)["offset"] for line in path.read_text().splitlines() if json.loads(line)["member"] == member
        )
    return out


def test_reset_of_one_member_never_touches_a_member_whose_name_extends_it(tmp_path):
    a, ab = FileSink(tmp_path, "a"), FileSink(tmp_path, "a-b")
    ab.process_batch(recs(1, 0, 5))
    data = ab.checkpoint(1)  # a-b's interval 1 is sealed, published at RESUME
    a.process_batch(recs(0, 0, 5))
    a.reset_to_initial_state(1)  # a's reset: only a's pending files go
    a.reset(0, json.dumps({"version": 1, "kind": "file_sink", "member": "a", "intervals": []}).encode())
    ab.notify_checkpoint_complete(1)
    assert offsets(tmp_path, "a-b") == [0, 1, 2, 3, 4]
    assert [p.name for p in a.published_files()] == []
    assert [p.name for p in ab.published_files()] == ["a-b-0000000001.jsonl"]
    ab.process_batch(recs(1, 5, 2))
    ab.reset(1, data)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".pending")]


def test_publish_never_overwrites_a_published_file(tmp_path):
    sink = FileSink(tmp_path, "m")
    sink.process_batch(recs(0, 0, 3))
    sink.checkpoint(1)
    (tmp_path / "m-0000000001.jsonl").write_text("someone else's output\n")
    with pytest.raises(FileExistsError, match=r"m-0000000001\.jsonl"):
        sink.notify_checkpoint_complete(1)
    assert (tmp_path / "m-0000000001.jsonl").read_text() == "someone else's output\n"
    assert [p for p in tmp_path.iterdir() if p.name.endswith(".pending")]  # kept, not lost


def test_publish_after_a_crash_between_link_and_unlink_is_idempotent(tmp_path):
    sink = FileSink(tmp_path, "m")
    sink.process_batch(recs(0, 0, 3))
    data = sink.checkpoint(1)
    pending = next(p for p in tmp_path.iterdir() if p.name.endswith(".pending"))
    os.link(pending, tmp_path / "m-0000000001.jsonl")  # the crash: linked, pending not yet unlinked
    again = FileSink(tmp_path, "m")
    again.reset(1, data)
    assert offsets(tmp_path, "m") == [0, 1, 2]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".pending")]


def test_returning_member_publishes_its_sealed_interval_from_its_store(tmp_path):
    """The member sealed interval 2 (checkpoint 2 completed) and died before the
    RESUME published it; it wrote interval 3 (never completed). Its next process
    is reset to its own checkpoint 2 from its checkpoint store: interval 2 is
    published, interval 3 deleted (replayed), nothing else of it touched."""
    from cr_consumer.runtime import DirectoryCheckpointStore

    out, store = tmp_path / "out", DirectoryCheckpointStore(tmp_path / "ckpt" / "m")
    sink = FileSink(out, "m")
    for seq, start in ((1, 0), (2, 5)):
        sink.process_batch(recs(0, start, 5))
        store.save(seq, "01-file_sink", sink.checkpoint(seq))
        store.seal(seq)
        if seq == 1:
            sink.notify_checkpoint_complete(1)
    sink.process_batch(recs(0, 10, 5))
    store.save(3, "01-file_sink", sink.checkpoint(3))
    store.seal(3)  # acked, but checkpoint 3 never completed
    sink.process_batch(recs(0, 15, 2))  # the open interval
    del sink  # kill -9: nothing closed

    again = FileSink(out, "m")
    store = DirectoryCheckpointStore(tmp_path / "ckpt" / "m")
    again.reset(2, store.load(2, "01-file_sink"))
    assert offsets(out, "m") == list(range(10))
    assert [p.name for p in again.published_files()] == ["m-0000000001.jsonl", "m-0000000002.jsonl"]
    assert not [p for p in out.iterdir() if p.name.endswith(".pending")]
