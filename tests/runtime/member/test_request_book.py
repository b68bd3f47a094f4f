"""The control channel's request bookkeeping (RequestBook in cr_consumer/runtime/member/request_book.py),
without sockets: ids and answers, waiters, and what is held while not joined."""

from __future__ import annotations

from coordinator.protocol.region.commands import CommandKind
from coordinator.protocol.region.messages import RegionAck, RegionResetRequest, RegionTrigger
from cr_consumer.runtime.member.request_book import HELD_KEPT, PENDING_KEPT, WAITERS_KEPT, RequestBook, Waiter


def test_an_answer_finds_its_request_type_and_waiter_once():
    book = RequestBook("m0")
    rid = book.new_id("region_trigger")
    waiter = Waiter()
    book.await_answer(rid, waiter)
    assert book.answered(rid) == ("region_trigger", waiter)
    assert book.answered(rid) == (None, None)
    assert book.answered(None) == (None, None)


def test_ids_are_bounded_and_unique():
    book = RequestBook("m" * 500)
    ids = {book.new_id("region_heartbeat") for _ in range(3)}
    assert len(ids) == 3
    assert all(len(i) <= 64 + 12 for i in ids)


def test_forgotten_requests_and_waiters_are_bounded():
    book = RequestBook("m0")
    first = book.new_id("region_heartbeat")
    for _ in range(PENDING_KEPT):
        book.new_id("region_heartbeat")
    assert book.answered(first) == (None, None)
    waiters = [Waiter() for _ in range(WAITERS_KEPT + 1)]
    for w in waiters:
        book.await_answer(book.new_id("region_trigger"), w)
    assert waiters[0].done.is_set()
    assert waiters[0].reply is None  # the oldest asker is answered None
    assert not waiters[1].done.is_set()
    book.abandon()
    assert all(w.done.is_set() for w in waiters)


def _reset(force: bool, reason: str) -> RegionResetRequest:
    return RegionResetRequest("r", "m0", "i", force, reason)


def _drained(seq: int) -> RegionAck:
    return RegionAck("r", "m0", "i", CommandKind.DRAIN, seq, None, True, None, None)


def test_while_not_joined_acks_and_one_reset_request_are_held_the_rest_dropped():
    book = RequestBook("m0")
    book.hold(_reset(True, "a"), None)
    book.hold(_reset(False, "b"), None)  # never replaces a forced one
    for seq in range(HELD_KEPT + 2):
        book.hold(_drained(seq), None)
    trigger = Waiter()
    book.hold(RegionTrigger("r", "m0", "i"), trigger)
    assert trigger.done.is_set()
    assert trigger.reply is None
    held = book.take_held()
    assert len(held) == HELD_KEPT + 1
    assert held[0] == _drained(2)  # the oldest were dropped
    assert held[-1] == _reset(True, "a")
    assert book.take_held() == []
    book.hold(_reset(False, "c"), None)
    book.hold(_reset(True, "d"), None)
    assert book.take_held() == [_reset(True, "d")]
