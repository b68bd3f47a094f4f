"""The one state-machine helper (``coordinator/protocol/common/transitions.py``): a table
with every state, transitions checked and logged, one error, atomic ``to_if``."""

from __future__ import annotations

import enum
import logging
import threading

import pytest

from coordinator.protocol.common.transitions import IllegalTransition, StateMachine, TransitionTable

log = logging.getLogger(__name__)


class Light(enum.Enum):
    OFF = "off"
    ON = "on"
    BROKEN = "broken"


class Other(enum.Enum):
    X = "x"


TABLE = TransitionTable(
    Light, {Light.OFF: {Light.ON, Light.BROKEN}, Light.ON: {Light.OFF, Light.ON, Light.BROKEN}, Light.BROKEN: set()}
)


def test_the_table_is_a_read_only_mapping_of_frozensets():
    assert dict(TABLE) == {
        Light.OFF: frozenset({Light.ON, Light.BROKEN}),
        Light.ON: frozenset({Light.OFF, Light.ON, Light.BROKEN}),
        Light.BROKEN: frozenset(),
    }
    assert TABLE.allows(Light.OFF, Light.ON)
    assert not TABLE.allows(Light.BROKEN, Light.OFF)
    with pytest.raises(TypeError):
        TABLE._table[Light.BROKEN] = frozenset({Light.ON})  # type: ignore[index]


def test_a_table_must_name_every_state_and_only_its_states():
    with pytest.raises(ValueError, match=r"without an entry \['BROKEN'\]"):
        TransitionTable(Light, {Light.OFF: {Light.ON}, Light.ON: set()})
    with pytest.raises(ValueError, match="not Light states"):
        TransitionTable(Light, {Light.OFF: {Other.X}, Light.ON: set(), Light.BROKEN: set()})  # type: ignore[dict-item]


def test_transitions_are_checked_and_logged(caplog):
    machine = StateMachine("lamp 1", TABLE, Light.OFF, log)
    with caplog.at_level(logging.DEBUG, logger=__name__):
        assert machine.to(Light.ON, "switched") is Light.OFF
        machine.to(Light.ON)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "lamp 1: off -> on (switched)"),
        (logging.INFO, "lamp 1: on -> on"),
    ]
    machine.to(Light.BROKEN, "bulb")
    with pytest.raises(IllegalTransition, match=r"lamp 1: illegal transition broken -> on \(repair\)"):
        machine.to(Light.ON, "repair")
    assert machine.state is Light.BROKEN


def test_quiet_repeats_are_logged_at_debug(caplog):
    machine = StateMachine("lamp 2", TABLE, Light.ON, log, quiet_repeats=True)
    with caplog.at_level(logging.DEBUG, logger=__name__):
        machine.to(Light.ON, "again")
        machine.to(Light.OFF, "switched")
    assert [r.levelno for r in caplog.records] == [logging.DEBUG, logging.INFO]


def test_to_if_moves_only_from_its_sources():
    machine = StateMachine("lamp 3", TABLE, Light.OFF, log)
    assert not machine.to_if({Light.ON}, Light.OFF)
    assert machine.state is Light.OFF
    assert machine.to_if({Light.OFF}, Light.ON)
    machine.to(Light.BROKEN)
    with pytest.raises(IllegalTransition):
        machine.to_if({Light.BROKEN}, Light.ON)


def _race(machine: StateMachine[Light], threads: int) -> list[bool]:
    start = threading.Barrier(threads)
    moved: list[bool] = []

    def race() -> None:
        start.wait()
        moved.append(machine.to_if({Light.OFF}, Light.ON))

    running = [threading.Thread(target=race) for _ in range(threads)]
    for t in running:
        t.start()
    for t in running:
        t.join()
    return moved


def test_to_if_is_atomic_across_threads():
    """Of many threads racing OFF -> ON, exactly one moves the machine."""
    for _ in range(20):
        assert _race(StateMachine("lamp 4", TABLE, Light.OFF, log), 8).count(True) == 1
