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
    crkafka_ends,
    notice_endpoint,
)
from cr_consumer.testing.kafka_util import unique_name


def _query() -> str:
    return unique_name("q").encode().hex()[:16]


def _end(query: str, epoch: int) -> SourceOffset:
    return SourceOffset(epoch=epoch, positions={("t", 0): 10 * epoch}, query=query)


def test_a_notice_sent_before_the_runner_listens_arrives_once_it_does():
    query = _query()
    sender = NoticeSender()
    got: queue.Queue = queue.Queue()
    try:
        assert sender.send(_end(query, 1))  # queued: the runner is not there yet
        receiver = NoticeReceiver(query, got.put)
        receiver.start()
        try:
            assert got.get(timeout=10) == _end(query, 1)
            assert sender.send(_end(query, 2))
            assert got.get(timeout=10) == _end(query, 2)
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
        for bad in (b"not json", b"[]", json.dumps({"v": 9, "epoch": 1}).encode(),
                    json.dumps(_end("0123456789abcdef", 1).to_json()).encode(),  # another query's
                    json.dumps({"v": 1, "epoch": -1, "offsets": {}}).encode(),
                    json.dumps({"v": 1, "epoch": 1, "offsets": {"t:x": 1}, "query": query}).encode(),
                    b"{" * (MAX_NOTICE_BYTES + 1)):  # past the size bound: refused by the socket
            push.send(bad)
        push.send(json.dumps(_end(query, 3).to_json()).encode())
        assert got.get(timeout=10) == _end(query, 3)
        assert got.empty()
        assert receiver.received == 1
    finally:
        push.close(0)
        receiver.stop()


def test_a_failing_commit_does_not_stop_the_receiver():
    query = _query()
    calls: list[int] = []

    def on_end(end: SourceOffset) -> None:
        calls.append(end.epoch)
        if end.epoch == 1:
            raise RuntimeError("the commit failed")

    receiver = NoticeReceiver(query, on_end)
    receiver.start()
    sender = NoticeSender()
    try:
        sender.send(_end(query, 1))
        sender.send(_end(query, 2))
        deadline = time.monotonic() + 10
        while calls != [1, 2]:
            assert time.monotonic() < deadline, calls
            time.sleep(0.01)
    finally:
        sender.close()
        receiver.stop()


def test_only_crkafka_offsets_with_a_query_are_sent():
    query = "0123456789abcdef"
    ends = [json.dumps(_end(query, 4).to_json()), json.dumps({"v": 1, "epoch": 0, "offsets": {}}),
            '{"logOffset": 7}', "not json", "null"]
    assert crkafka_ends(ends) == [_end(query, 4)]
