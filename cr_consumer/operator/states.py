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

Drain and checkpoint do not change the state. Every transition is logged; a
transition that is not in :data:`TRANSITIONS` raises :class:`IllegalTransition`.
The machine is used from the event thread, Kafka's IO thread (rebalance
listener) and the handler caller, so it holds a lock.
"""

from __future__ import annotations

import enum
import logging
import threading

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

TRANSITIONS: dict[ClientState, frozenset[ClientState]] = {
    S.INITIALIZED: frozenset({S.SUBSCRIBED, S.CLOSED, S.FAILED}),
    S.SUBSCRIBED: frozenset({S.RECORDS_FETCHED, S.CR_RESET_PENDING, S.CLOSED, S.FAILED}),
    S.RECORDS_FETCHED: frozenset({S.CR_RESET_PENDING, S.CLOSED, S.FAILED}),
    S.CR_RESET_PENDING: frozenset({S.CR_RESET_PENDING, S.RESET_COMPLETE, S.CLOSED, S.FAILED}),
    S.RESET_COMPLETE: frozenset({S.RECORDS_FETCHED, S.CR_RESET_PENDING, S.CLOSED, S.FAILED}),
    S.CLOSED: frozenset({S.CLOSED}),
    S.FAILED: frozenset({S.CLOSED, S.FAILED}),
}


class IllegalTransition(RuntimeError):
    pass


class StateMachine:
    def __init__(self, name: str) -> None:
        self._name = name
        self._state = ClientState.INITIALIZED
        self._lock = threading.Lock()

    @property
    def state(self) -> ClientState:
        return self._state

    def to(self, new: ClientState, reason: str = "") -> ClientState:
        """Move to ``new``; return the previous state. Raises IllegalTransition."""
        with self._lock:
            old = self._state
            if new not in TRANSITIONS[old]:
                raise IllegalTransition(f"{self._name}: illegal state transition {old.value} -> {new.value} ({reason})")
            self._state = new
        if old is not new:
            log.info("%s: state %s -> %s%s", self._name, old.value, new.value, f" ({reason})" if reason else "")
        return old

    def to_if(self, sources: set[ClientState] | frozenset[ClientState], new: ClientState, reason: str = "") -> bool:
        """Move to ``new`` only from one of ``sources`` (atomically); True if moved."""
        with self._lock:
            old = self._state
            if old not in sources:
                return False
            if new not in TRANSITIONS[old]:
                raise IllegalTransition(f"{self._name}: illegal state transition {old.value} -> {new.value} ({reason})")
            self._state = new
        if old is not new:
            log.info("%s: state %s -> %s%s", self._name, old.value, new.value, f" ({reason})" if reason else "")
        return True


__all__ = ["ClientState", "IllegalTransition", "StateMachine", "TRANSITIONS"]
