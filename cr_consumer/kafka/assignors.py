"""The partition assignors the operator runs, and the one table of their spellings.

``partition.assignment.strategy`` is read here, once, for everyone that reads it:
the property rules (``cr_consumer.kafka.property_rules``) and both clients
(``kafka_python.client``, ``librdkafka.client``), so a spelling one of them accepts
is accepted by all with the same meaning.

1. The value is a comma-separated string or a sequence of strings; each name is
   one of :data:`SPELLINGS` (any case, spaces around it ignored): the standard
   name (librdkafka's and kafka-python's ``name``), the Java class name with or
   without its package, or kafka-python's class name.
2. The names are read as their standard names (``range``, ``roundrobin``,
   ``cooperative-sticky``), in the order given, a repeat kept once.
3. Eager assignors (``range``, ``roundrobin``) or ``cooperative-sticky`` alone:
   one consumer runs one rebalance protocol, and the operator's revocation
   handling (``cr_consumer.operator.rebalance``) differs between the two.
   ``cooperative-sticky`` alone is the incremental (cooperative) protocol.
4. Anything else (an unknown or empty name, a non-string, eager mixed with
   cooperative) is refused with :class:`ClientConfigError` naming every accepted
   spelling; the property rules turn it into their ``PropertyError``.

The eager sticky assignor (Java's ``StickyAssignor``) is not offered: librdkafka
does not have it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import attrs

from cr_consumer.kafka.client import ClientConfigError, RebalanceProtocol

KEY = "partition.assignment.strategy"
RANGE = "range"
ROUNDROBIN = "roundrobin"
COOPERATIVE_STICKY = "cooperative-sticky"
_JAVA = "org.apache.kafka.clients.consumer."

#: Every accepted spelling -> its standard name (compared in any case).
SPELLINGS: Mapping[str, str] = {
    RANGE: RANGE,
    "RangeAssignor": RANGE,
    _JAVA + "RangeAssignor": RANGE,
    "RangePartitionAssignor": RANGE,  # kafka-python's class
    ROUNDROBIN: ROUNDROBIN,
    "RoundRobinAssignor": ROUNDROBIN,
    _JAVA + "RoundRobinAssignor": ROUNDROBIN,
    "RoundRobinPartitionAssignor": ROUNDROBIN,  # kafka-python's class
    COOPERATIVE_STICKY: COOPERATIVE_STICKY,
    "CooperativeStickyAssignor": COOPERATIVE_STICKY,  # also kafka-python's class
    _JAVA + "CooperativeStickyAssignor": COOPERATIVE_STICKY,
}
_BY_LOWER = {spelling.lower(): name for spelling, name in SPELLINGS.items()}
#: Bound on the names of one strategy (there are three assignors; a longer value is a mistake).
MAX_NAMES = 16


def _accepted() -> str:
    spellings = "; ".join(
        f"{name} ({', '.join(s for s, n in SPELLINGS.items() if n == name and s != name)})"
        for name in (RANGE, ROUNDROBIN, COOPERATIVE_STICKY)
    )
    return (
        f"give {RANGE} and/or {ROUNDROBIN} (eager), or {COOPERATIVE_STICKY} alone (incremental); "
        f"accepted spellings, any case: {spellings}"
    )


#: The sentence every refusal ends with.
ACCEPTED = _accepted()


def _refuse(reason: str) -> ClientConfigError:
    return ClientConfigError(f"{KEY}: {reason}: {ACCEPTED}")


@attrs.frozen
class AssignmentStrategy:
    """The assignors of one consumer by their standard names (read by :func:`parse_strategy`)."""

    names: tuple[str, ...]
    #: Kafka's, kafka-python's and librdkafka's default: range, then roundrobin (eager).
    DEFAULT: ClassVar[AssignmentStrategy]

    @property
    def protocol(self) -> RebalanceProtocol:
        """COOPERATIVE for cooperative-sticky alone, else EAGER (module docstring, step 3)."""
        return RebalanceProtocol.COOPERATIVE if self.names == (COOPERATIVE_STICKY,) else RebalanceProtocol.EAGER

    def __str__(self) -> str:
        """The standard names comma-separated: the property's value for either client."""
        return ",".join(self.names)


AssignmentStrategy.DEFAULT = AssignmentStrategy((RANGE, ROUNDROBIN))


def parse_strategy(value: object) -> AssignmentStrategy:
    """The strategy ``value`` names; ClientConfigError for anything the module
    docstring does not accept (checked in full before anything is returned)."""
    if isinstance(value, str):
        items: list[object] = list(value.split(","))
    elif isinstance(value, Sequence):
        items = list(value)
    else:
        raise _refuse(f"{value!r} is not a name or a list of names")
    if len(items) > MAX_NAMES:
        raise _refuse(f"{len(items)} names (at most {MAX_NAMES})")
    names: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise _refuse(f"{item!r} is not an assignor name")
        name = _BY_LOWER.get(item.strip().lower())
        if name is None:
            raise _refuse(
                f"{item.strip()!r} is not supported" if item.strip() else f"an empty assignor name in {value!r}"
            )
        if name not in names:
            names.append(name)
    if not names:
        raise _refuse("no assignor given")
    if COOPERATIVE_STICKY in names and len(names) > 1:
        raise _refuse(
            f"mixes eager and cooperative assignors: {COOPERATIVE_STICKY} cannot be combined with "
            f"eager assignors ({', '.join(n for n in names if n != COOPERATIVE_STICKY)})"
        )
    return AssignmentStrategy(tuple(names))


def strategy_of(properties: Mapping[str, object]) -> AssignmentStrategy:
    """The strategy of a client's dotted ``properties`` (the default when the key is absent)."""
    return parse_strategy(properties[KEY]) if KEY in properties else AssignmentStrategy.DEFAULT


__all__ = [
    "ACCEPTED",
    "COOPERATIVE_STICKY",
    "KEY",
    "MAX_NAMES",
    "RANGE",
    "ROUNDROBIN",
    "SPELLINGS",
    "AssignmentStrategy",
    "parse_strategy",
    "strategy_of",
]
