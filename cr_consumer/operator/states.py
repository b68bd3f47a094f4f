"""The consumer-group client's state machine.

States (as in the reference design, plus CLOSED and FAILED):

* INITIALIZED: built, event thread not yet running.
* SUBSCRIBED: subscribed; no record fetched yet since the subscription.
* RECORDS_FETCHED: a poll returned records since subscribe or the last reset.
  A revocation in this state makes the region reset.
* CR_RESET_PENDING: a reset is needed or running; records polled now are dropped
  and assigned partitions are not seeked (the reset will seek them).
* RESET_COMPLETE: the reset seeked every assigned partition; nothing fetched yet.
* CLOSED: shut down. FAILED: a fatal error (the cause is kept by the operator).

Drain and checkpoint do not change the state. The machine is the project's
one state-machine helper (``coordinator/protocol/common/transitions.py``): every
transition is logged, one that is not in :data:`TRANSITIONS` raises
:class:`IllegalTransition`. It is used from the event thread, Kafka's IO
thread (rebalance listener) and the handler caller; it holds a lock.
"""

from __future__ import annotations

import enum
import logging

from coordinator.protocol.common.transitions import IllegalTransition, StateMachine, TransitionTable

log = logging.getLogger(__name__)


class ClientState(enum.Enum):
    INITIALIZED = "INITIALIZED"
    SUBSCRIBED = "SUBSCRIBED"
    RECORDS_FETCHED = "RECORDS_FETCHED"
    CR_RESET_PENDING = "CR_RESET_PENDING"
    RESET_COMPLETE = "RESET_COMPLETE"
    CLOSED = "CLOSED"
    FAILED = "FAILED"


S = ClientState

TRANSITIONS: TransitionTable[ClientState] = TransitionTable(
    ClientState,
    {
        S.INITIALIZED: {S.SUBSCRIBED, S.CLOSED, S.FAILED},
        S.SUBSCRIBED: {S.RECORDS_FETCHED, S.CR_RESET_PENDING, S.CLOSED, S.FAILED},
        S.RECORDS_FETCHED: {S.CR_RESET_PENDING, S.CLOSED, S.FAILED},
        S.CR_RESET_PENDING: {S.CR_RESET_PENDING, S.RESET_COMPLETE, S.CLOSED, S.FAILED},
        S.RESET_COMPLETE: {S.RECORDS_FETCHED, S.CR_RESET_PENDING, S.CLOSED, S.FAILED},
        S.CLOSED: {S.CLOSED},
        S.FAILED: {S.CLOSED, S.FAILED},
    },
)


class ClientStateMachine(StateMachine[ClientState]):
    """The client's machine: the generic one over :data:`TRANSITIONS`, from
    INITIALIZED, for the operator ``name``. Repeats (a reset requested while one
    is pending, a second close) are logged at DEBUG only: they change nothing."""

    def __init__(self, name: str) -> None:
        super().__init__(name, TRANSITIONS, ClientState.INITIALIZED, log, quiet_repeats=True)


__all__ = ["TRANSITIONS", "ClientState", "ClientStateMachine", "IllegalTransition"]
