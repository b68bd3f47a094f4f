"""The client's list of coordinator endpoints (``coordinator/protocol/common/endpoints.py``)."""

from __future__ import annotations

import threading

import pytest

from coordinator.protocol.common.endpoints import MAX_ENDPOINTS, EndpointRing, parse_endpoints


def test_one_endpoint_or_several_comma_separated():
    assert parse_endpoints("tcp://127.0.0.1:5570") == ("tcp://127.0.0.1:5570",)
    assert parse_endpoints("tcp://a:1, tcp://b:2,ipc:///tmp/c") == ("tcp://a:1", "tcp://b:2", "ipc:///tmp/c")


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "127.0.0.1:5570",  # no scheme
        "udp://a:1",
        "tcp://",
        "tcp://a:1,,tcp://b:2",  # an empty entry
        "tcp://a:1,tcp://a:1",  # repeated
        "tcp://" + "h" * 400 + ":1",
        ",".join(f"tcp://h{i}:1" for i in range(MAX_ENDPOINTS + 1)),
    ],
)
def test_a_malformed_or_unbounded_list_is_refused(text):
    with pytest.raises(ValueError, match="coordinator endpoint"):
        parse_endpoints(text)


def test_the_ring_moves_on_from_a_silent_endpoint_once_however_many_threads_found_it():
    ring = EndpointRing("tcp://a:1,tcp://b:2,tcp://c:3")
    assert ring.several
    assert ring.current == "tcp://a:1"
    barrier = threading.Barrier(8)
    seen: list[str] = []

    def silent_a() -> None:
        barrier.wait()
        seen.append(ring.move_from("tcp://a:1"))

    threads = [threading.Thread(target=silent_a) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert set(seen) == {"tcp://b:2"}  # moved once: b, not c
    assert ring.move_from("tcp://b:2") == "tcp://c:3"
    assert ring.move_from("tcp://c:3") == "tcp://a:1"  # cyclic
    assert ring.move_from("tcp://c:3") == "tcp://a:1"  # a late thread's move from c changes nothing


def test_one_endpoint_never_moves():
    ring = EndpointRing("tcp://a:1")
    assert not ring.several
    assert ring.move_from("tcp://a:1") == "tcp://a:1"
