"""Sink-commit notices over real ZeroMQ sockets: the driver's sender, the runner's
receiver, and what the receiver refuses (``cr_consumer/spark/sink_notices.py``)."""

from __future__ import annotations

import json
import queue
import time

import zmq

from cr_consumer.spark.offsets import SourceOffset
from cr_consumer.spark.sink_notices import (
    MAX_NOTICE_BYTES,
    NoticeReceiver,
    NoticeSender,
    SinkNotice,
    crkafka_ends,
    notice_endpoint,
)
from cr_consumer.testing.kafka_util import unique_name


def _query() -> str:
    return unique_name("q").encode().hex()[:16]


def _end(query: str, epoch: int) -> SourceOffset:
    return SourceOffset(epoch=epoch, positions={("t", 0): 10 * epoch}, query=query)


def _notice(query: str, epoch: int, checkpoint: str | None = "file:/tmp/cp") -> SinkNotice:
    return SinkNotice(_end(query, epoch), checkpoint)


def test_a_notice_sent_before_the_runner_listens_arrives_once_it_does():
    query = _query()
    sender = NoticeSender()
    got: queue.Queue = queue.Queue()
    try:
        assert sender.send(_notice(query, 1))  # queued: the runner is not there yet
        receiver = NoticeReceiver(query, got.put)
        receiver.start()
        try:
            assert got.get(timeout=10) == _notice(query, 1)
            assert sender.send(_notice(query, 2, None))
            assert got.get(timeout=10) == _notice(query, 2, None)
        finally:
            receiver.stop()
    finally:
        sender.close()


def test_the_receiver_drops_bad_notices_and_goes_on():
    query = _query()
    got: queue.Queue = queue.Queue()
    receiver = NoticeReceiver(query, got.put)
    receiver.start()
    push = zmq.Context.instance().socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    push.connect(notice_endpoint(query))
    try:
        good = _notice(query, 3).to_json()
        for bad in (
            b"not json",
            b"[]",
            {"v": 9, "end": good["end"]},
            {**good, "end": None},
            {**good, "end": 5},
            {**good, "checkpoint": 7},
            {**good, "checkpoint": "x" * 5000},
            {**good, "checkpoint": "a\nb"},
            _notice("0123456789abcdef", 1).to_json(),  # another query's
            {**good, "end": {"v": 1, "epoch": -1, "offsets": {}}},
            {**good, "end": {"v": 1, "epoch": 1, "offsets": {"t:x": 1}, "query": query}},
            {**good, "end": {"v": 1, "epoch": 1, "offsets": {"t:0": 1}}},  # positions without a query id
            b"{" * (MAX_NOTICE_BYTES + 1),
        ):  # past the size bound: refused by the socket
            push.send(bad if isinstance(bad, bytes) else json.dumps(bad).encode())
        push.send(json.dumps(good).encode())
        assert got.get(timeout=10) == _notice(query, 3)
        assert got.empty()
        assert receiver.received == 1
    finally:
        push.close(0)
        receiver.stop()


def test_a_failing_commit_does_not_stop_the_receiver():
    query = _query()
    calls: list[int] = []

    def on_notice(notice: SinkNotice) -> None:
        calls.append(notice.end.epoch)
        if notice.end.epoch == 1:
            raise RuntimeError("the commit failed")

    receiver = NoticeReceiver(query, on_notice)
    receiver.start()
    sender = NoticeSender()
    try:
        sender.send(_notice(query, 1))
        sender.send(_notice(query, 2))
        deadline = time.monotonic() + 10
        while calls != [1, 2]:
            assert time.monotonic() < deadline, calls
            time.sleep(0.01)
    finally:
        sender.close()
        receiver.stop()


def test_only_crkafka_offsets_with_a_query_are_sent():
    query = "0123456789abcdef"
    ends = [
        json.dumps(_end(query, 4).to_json()),
        json.dumps({"v": 1, "epoch": 0, "offsets": {}}),
        '{"logOffset": 7}',
        "not json",
        "null",
    ]
    assert crkafka_ends(ends) == [_end(query, 4)]


def test_the_newest_committed_batch_is_read_from_spark_s_logs(tmp_path):
    from cr_consumer.spark.control import last_committed_end

    query = "0123456789abcdef"
    meta = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}'
    (tmp_path / "offsets").mkdir()
    (tmp_path / "commits").mkdir()
    assert last_committed_end(tmp_path, query) is None  # nothing committed
    for batch in (0, 1, 2):
        other = '{"logOffset": 7}'
        (tmp_path / "offsets" / str(batch)).write_text(
            f"v1\n{meta}\n{other}\n{json.dumps(_end(query, batch + 1).to_json())}\n"
        )
    for batch in (0, 1):  # batch 2 is planned, not committed
        (tmp_path / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    (tmp_path / "commits" / ".1.crc").write_text("x")
    assert SourceOffset.from_json(last_committed_end(tmp_path, query)) == _end(query, 2)
    assert last_committed_end(tmp_path, "fedcba9876543210") is None  # another query's location
