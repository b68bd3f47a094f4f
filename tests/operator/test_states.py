"""The client state machine: the transition table, illegal transitions raise, all are logged."""

from __future__ import annotations

import logging

import pytest

from cr_consumer.operator.states import TRANSITIONS, ClientState, IllegalTransition, StateMachine

S = ClientState


def test_normal_life_cycle_is_logged(caplog):
    sm = StateMachine("m0")
    with caplog.at_level(logging.INFO, logger="cr_consumer.operator.states"):
        for to in (S.SUBSCRIBED, S.RECORDS_FETCHED, S.CR_RESET_PENDING, S.RESET_COMPLETE,
                   S.RECORDS_FETCHED, S.CR_RESET_PENDING, S.RESET_COMPLETE, S.CLOSED):
            sm.to(to, "test")
    assert sm.state is S.CLOSED
    assert sum("m0: state" in r.getMessage() for r in caplog.records) == 8
    assert "RECORDS_FETCHED -> CR_RESET_PENDING" in caplog.text


@pytest.mark.parametrize("path", [
    (S.RECORDS_FETCHED,),
    (S.SUBSCRIBED, S.RESET_COMPLETE),
    (S.SUBSCRIBED, S.INITIALIZED),
    (S.CLOSED, S.SUBSCRIBED),
])
def test_illegal_transitions_raise(path):
    sm = StateMachine("m0")
    with pytest.raises(IllegalTransition):
        for to in path:
            sm.to(to)


def test_to_if_only_from_given_states():
    sm = StateMachine("m0")
    assert not sm.to_if({S.SUBSCRIBED}, S.RECORDS_FETCHED)
    sm.to(S.SUBSCRIBED)
    assert sm.to_if({S.SUBSCRIBED, S.RESET_COMPLETE}, S.RECORDS_FETCHED)
    assert sm.state is S.RECORDS_FETCHED


def test_every_state_can_close():
    for state, allowed in TRANSITIONS.items():
        assert S.CLOSED in allowed, state
