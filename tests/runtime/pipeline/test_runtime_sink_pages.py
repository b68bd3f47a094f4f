"""The file sink drops its synced pages from the page cache (real files, no
broker): the output is byte for byte the same with and without the drop, only
synced whole pages are dropped (never the partly written last one), and a
sealed interval's pages are all dropped at the checkpoint."""

from __future__ import annotations

import os

import pytest

from cr_consumer.runtime import FileSink, Record
from cr_consumer.runtime.pipeline import sinks


def batch(start: int, n: int) -> list[Record]:
    # 150-byte values: a batch's bytes are not a multiple of the page size
    return [Record("t", 0, o, 1000 + o, None, b"v" * 150) for o in range(start, start + n)]


def run_interval(sink: FileSink, batches: int, per_batch: int) -> None:
    for b in range(batches):
        sink.process_batch(batch(b * per_batch, per_batch))


@pytest.fixture
def drops(monkeypatch) -> list[tuple[int, int]]:
    """The (offset, length) of every page drop the sinks ask for (passed on to the real call)."""
    seen: list[tuple[int, int]] = []
    real = os.posix_fadvise

    def record(fd: int, offset: int, length: int, advice: int) -> None:
        assert advice == os.POSIX_FADV_DONTNEED
        seen.append((offset, length))
        real(fd, offset, length, advice)

    monkeypatch.setattr(sinks, "_fadvise", record)
    return seen


def test_the_output_is_the_same_with_and_without_the_drop(tmp_path, drops):
    sinks_by_mode = {drop: FileSink(tmp_path / str(drop), "m", drop_written_pages=drop) for drop in (True, False)}
    for sink in sinks_by_mode.values():
        run_interval(sink, batches=40, per_batch=500)  # ~4 MB: several incremental syncs
        sink.checkpoint(1)
        sink.notify_checkpoint_complete(1)
        run_interval(sink, batches=3, per_batch=7)
        sink.checkpoint(2)
        sink.notify_checkpoint_complete(2)
        sink.close()
    kept, dropped = ([p.read_bytes() for p in sorted((tmp_path / str(d)).glob("*.jsonl"))] for d in (False, True))
    assert len(kept) == 2
    assert kept == dropped
    assert len(kept[0]) > 4 * sinks.SYNC_EVERY_BYTES
    assert drops  # only the dropping sink asked


def test_only_synced_whole_pages_are_dropped_then_the_whole_sealed_file(tmp_path, drops):
    sink = FileSink(tmp_path, "m")
    run_interval(sink, batches=40, per_batch=500)
    synced = list(drops)
    assert len(synced) >= 3  # one per incremental sync
    end = 0
    for offset, length in synced:  # contiguous, from the start, whole pages only
        assert offset == end
        assert length > 0
        assert (offset + length) % sinks._PAGE == 0
        end = offset + length
    size = sink._written
    assert end < size  # the partly written page and the unsynced tail stay cached
    sink.checkpoint(1)
    offset, length = drops[-1]
    assert offset == end
    assert offset + length == size  # the sealed file: every page
    sink.notify_checkpoint_complete(1)
    assert (tmp_path / "m-0000000001.jsonl").stat().st_size == size
    run_interval(sink, batches=1, per_batch=10)  # a new interval starts from its own first page
    sink.checkpoint(2)
    assert drops[-1][0] == 0
    sink.close()


def test_a_sink_that_keeps_its_pages_never_drops(tmp_path, drops):
    sink = FileSink(tmp_path, "m", drop_written_pages=False)
    run_interval(sink, batches=40, per_batch=500)
    sink.checkpoint(1)
    sink.close()
    assert drops == []


def test_a_refused_drop_is_logged_and_the_output_stays_whole(tmp_path, monkeypatch, caplog):
    calls: list[int] = []

    def refuse(fd: int, offset: int, length: int, advice: int) -> None:
        calls.append(offset)
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(sinks, "_fadvise", refuse)
    sink = FileSink(tmp_path, "m")
    with caplog.at_level("WARNING"):
        run_interval(sink, batches=40, per_batch=500)
        sink.checkpoint(1)
    sink.notify_checkpoint_complete(1)
    sink.close()
    assert len(calls) == 1  # refused once, then the sink keeps its pages
    assert "cannot drop written pages" in caplog.text
    lines = (tmp_path / "m-0000000001.jsonl").read_bytes().splitlines()
    assert len(lines) == 40 * 500
    assert lines[-1].startswith(b'{"topic":"t","partition":0,"offset":19999,')
