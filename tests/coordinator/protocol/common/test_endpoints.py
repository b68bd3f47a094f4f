"""The client's list of coordinator endpoints (``coordinator/protocol/common/endpoints.py``)."""

from __future__ import annotations

import threading

import pytest

from coordinator.protocol.common.endpoints import (
    MAX_ENDPOINTS,
    MAX_LEARNED,
    EndpointRing,
    EpochFence,
    check_endpoint,
    parse_endpoints,
)
from coordinator.protocol.wire.errors import LoadInProgress, NotLeader, error_for_code


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


def test_a_frame_of_a_lower_epoch_is_dropped_and_counted_an_equal_or_higher_one_admitted():
    fence = EpochFence()
    assert fence.admit(0, "a ping_reply")
    assert fence.admit(3, "a ping_reply")  # a new leader's first frame raises the epoch
    assert fence.admit(3, "a region_command")
    assert not fence.admit(2, "a region_command")  # the deposed leader's late push
    assert not fence.admit(0, "an error")
    assert (fence.highest, fence.dropped) == (3, 2)
    assert fence.admit(7, "a ping_reply")
    assert not fence.admit(3, "a ping_reply")
    assert (fence.highest, fence.dropped) == (7, 3)


def test_the_ring_shares_one_fence_between_its_threads():
    ring = EndpointRing("tcp://a:1,tcp://b:2")
    barrier = threading.Barrier(8)

    def admit(epoch: int) -> None:
        barrier.wait()
        ring.fence.admit(epoch, "a reply")

    threads = [threading.Thread(target=admit, args=(e,)) for e in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ring.fence.highest == 7
    assert not ring.fence.admit(6, "a reply")


def test_a_redirect_moves_to_a_listed_endpoint_or_adds_it_bounded_keeping_the_configured_ones():
    ring = EndpointRing("tcp://a:1,tcp://b:2")
    assert ring.redirect("tcp://b:2") == ring.current == "tcp://b:2"
    assert ring.endpoints == ("tcp://a:1", "tcp://b:2")
    learned = [f"tcp://new{i}:1" for i in range(MAX_LEARNED + 2)]
    for endpoint in learned:
        assert ring.redirect(endpoint) == ring.current == endpoint
    # the configured endpoints stay; the learned ones are bounded, the oldest replaced first
    assert ring.endpoints == ("tcp://a:1", "tcp://b:2", *learned[-MAX_LEARNED:])
    assert ring.move_from(learned[-1]) == "tcp://a:1"  # the ring goes on cyclically


def test_one_endpoint_redirected_elsewhere_can_move_on_after():
    ring = EndpointRing("tcp://standby:1")
    assert not ring.several
    ring.redirect("tcp://leader:2")
    assert ring.several
    assert ring.move_from("tcp://leader:2") == "tcp://standby:1"


@pytest.mark.parametrize(
    "named",
    [
        None,
        5,
        "",
        "leader:5570",  # no scheme
        "http://evil.example/",  # a scheme ZeroMQ does not reach the coordinator by
        "udp://a:1",
        "tcp://a:1,tcp://b:2",  # a list, not one endpoint
        "tcp://a:1\nX-Injected: 1",
        "tcp://a :1",
        "tcp://" + "h" * 400 + ":1",
    ],
)
def test_an_endpoint_named_by_a_reply_is_checked_like_a_configured_one(named):
    with pytest.raises(ValueError, match="coordinator endpoint"):
        check_endpoint(named)
    # the client turns such a NOT_LEADER into LOAD_IN_PROGRESS: it connects nowhere new
    err = error_for_code("NOT_LEADER", "standby", {"code": "NOT_LEADER", "message": "standby", "leader": named})
    assert isinstance(err, LoadInProgress)


def test_a_usable_named_leader_becomes_a_not_leader_error_carrying_it():
    err = error_for_code("NOT_LEADER", "standby", {"leader": "tcp://10.0.0.7:5570"})
    assert isinstance(err, NotLeader)
    assert err.leader == "tcp://10.0.0.7:5570"
