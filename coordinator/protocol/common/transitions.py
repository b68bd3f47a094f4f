"""The one state-machine helper: an enum of states, an explicit table of the
allowed transitions, every transition checked and logged, one error.

Used by every state machine of the project: the region controller's phases
(``coordinator/region/machine.py``), the consumer-group client's states
(``cr_consumer/operator/states.py``) and a warm standby's hand-over
(``cr_consumer/runtime/runner/standby_proc.py``).

1. :class:`TransitionTable` is built once per machine, at import: every state
   of the enum has an entry (a terminal state an empty one), and every target
   is a state of the same enum; anything else raises ValueError at import, so
   a table cannot silently miss a state.
2. :meth:`StateMachine.to` moves to a state the table allows from the current
   one, and logs it (``<who>: OLD -> NEW (why)``) on the owner's logger; a
   transition the table does not allow raises :class:`IllegalTransition`
   (a bug in the caller: nothing is changed). A machine built with
   ``quiet_repeats`` logs an allowed move to the same state at DEBUG (a
   repeated close, a reset requested while one is pending) and real changes
   at INFO; otherwise every transition is logged at INFO.
3. :meth:`StateMachine.to_if` is ``to`` only from one of given states,
   checked and moved atomically: the machine holds a lock, so threads may
   share it (the client's event thread, Kafka's IO thread and the handler
   caller); single-threaded owners pay one uncontended lock per transition.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Generic, TypeVar

StateT = TypeVar("StateT", bound=enum.Enum)


class IllegalTransition(RuntimeError):
    """A transition its machine's table does not allow (the message names the
    machine, both states and why the caller wanted it)."""


class TransitionTable(Mapping[StateT, frozenset[StateT]], Generic[StateT]):
    """Each state's allowed next states (step 1); a read-only mapping."""

    def __init__(self, states: type[StateT], allowed: Mapping[StateT, Iterable[StateT]]) -> None:
        table = {state: frozenset(targets) for state, targets in allowed.items()}
        missing = [s.name for s in states if s not in table]
        foreign = [repr(s) for s in table if not isinstance(s, states)]
        foreign += [repr(t) for targets in table.values() for t in targets if not isinstance(t, states)]
        if missing or foreign:
            raise ValueError(
                f"transition table of {states.__name__}: states without an entry {missing}, "
                f"not {states.__name__} states {foreign}"
            )
        self._table: Mapping[StateT, frozenset[StateT]] = MappingProxyType(table)

    def __getitem__(self, state: StateT) -> frozenset[StateT]:
        return self._table[state]

    def __iter__(self) -> Iterator[StateT]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)

    def allows(self, old: StateT, new: StateT) -> bool:
        return new in self._table[old]


class StateMachine(Generic[StateT]):
    """One machine's current state (steps 2-3). ``who`` names it in log lines and
    errors ("region r1", "standby 4242", an operator's name); ``logger`` is its
    owner's, so the lines keep their module's logger name."""

    def __init__(
        self,
        who: str,
        table: TransitionTable[StateT],
        initial: StateT,
        logger: logging.Logger,
        *,
        quiet_repeats: bool = False,
    ) -> None:
        self.who = who
        self._table = table
        self._state = initial
        self._log = logger
        self._quiet_repeats = quiet_repeats
        self._lock = threading.Lock()

    @property
    def state(self) -> StateT:
        return self._state

    def to(self, new: StateT, why: str = "") -> StateT:
        """Move to ``new``; returns the previous state. Raises IllegalTransition."""
        with self._lock:
            old = self._move(new, why)
        self._logged(old, new, why)
        return old

    def to_if(self, sources: Iterable[StateT], new: StateT, why: str = "") -> bool:
        """Move to ``new`` only from one of ``sources`` (atomically); True if moved.
        Raises IllegalTransition when the current state is a source the table
        does not allow ``new`` from."""
        with self._lock:
            old = self._state
            if old not in sources:
                return False
            self._move(new, why)
        self._logged(old, new, why)
        return True

    def _move(self, new: StateT, why: str) -> StateT:
        # Under the lock: check and set are one step for every thread.
        old = self._state
        if not self._table.allows(old, new):
            raise IllegalTransition(
                f"{self.who}: illegal transition {old.value} -> {new.value}" + (f" ({why})" if why else "")
            )
        self._state = new
        return old

    def _logged(self, old: StateT, new: StateT, why: str) -> None:
        level = logging.DEBUG if self._quiet_repeats and old is new else logging.INFO
        self._log.log(level, "%s: %s -> %s%s", self.who, old.value, new.value, f" ({why})" if why else "")


__all__ = ["IllegalTransition", "StateMachine", "TransitionTable"]
