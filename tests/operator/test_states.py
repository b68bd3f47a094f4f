"""The client state machine: the transition table, illegal transitions raise, all are logged
(the generic machine itself: tests/coordinator/protocol/common/test_transitions.py)."""

from __future__ import annotations

import logging

import pytest

from cr_consumer.operator.states import TRANSITIONS, ClientState, ClientStateMachine, IllegalTransition

S = ClientState


def test_normal_life_cycle_is_logged(caplog):
    sm = ClientStateMachine("m0")
    with caplog.at_level(logging.INFO, logger="cr_consumer.operator.states"):
        for to in (
            S.SUBSCRIBED,
            S.RECORDS_FETCHED,
            S.CR_RESET_PENDING,
            S.RESET_COMPLETE,
            S.RECORDS_FETCHED,
            S.CR_RESET_PENDING,
            S.RESET_COMPLETE,
            S.CLOSED,
        ):
            sm.to(to, "test")
    assert sm.state is S.CLOSED
    assert sum(r.getMessage().startswith("m0: ") and " -> " in r.getMessage() for r in caplog.records) == 8
    assert "RECORDS_FETCHED -> CR_RESET_PENDING" in caplog.text


def test_repeats_are_logged_at_debug_only(caplog):
    sm = ClientStateMachine("m0")
    sm.to(S.SUBSCRIBED)
    sm.to(S.CR_RESET_PENDING)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="cr_consumer.operator.states"):
        sm.to(S.CR_RESET_PENDING, "again")
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]


@pytest.mark.parametrize(
    "path",
    [
        (S.RECORDS_FETCHED,),
        (S.SUBSCRIBED, S.RESET_COMPLETE),
        (S.SUBSCRIBED, S.INITIALIZED),
        (S.CLOSED, S.SUBSCRIBED),
    ],
)
def test_illegal_transitions_raise(path):
    sm = ClientStateMachine("m0")
    for to in path[:-1]:  # legal steps up to the illegal last one
        sm.to(to)
    with pytest.raises(IllegalTransition, match=f"illegal transition .* -> {path[-1].value}"):
        sm.to(path[-1])


def test_to_if_only_from_given_states():
    sm = ClientStateMachine("m0")
    assert not sm.to_if({S.SUBSCRIBED}, S.RECORDS_FETCHED)
    sm.to(S.SUBSCRIBED)
    assert sm.to_if({S.SUBSCRIBED, S.RESET_COMPLETE}, S.RECORDS_FETCHED)
    assert sm.state is S.RECORDS_FETCHED


def test_every_state_can_close():
    for state, allowed in TRANSITIONS.items():
        assert S.CLOSED in allowed, state
