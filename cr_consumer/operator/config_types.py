"""The types of :class:`~cr_consumer.operator.config.OperatorConfig`'s settings.

The enums of the settings that take one of a few values, the converters that
turn a setting given as a string (``"earliest"``, ``"kafka-python"``) into its
type, and :class:`ConfigError`, raised for any setting that is unknown, out of
range or contradicts another one. The start position's type is shared with the
Spark source (:mod:`cr_consumer.kafka.start_position`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from coordinator.protocol.common.gc_policy import GcPolicy
from cr_consumer.kafka.client import ClientKind
from cr_consumer.kafka.start_position import StartKind, StartPosition

E = TypeVar("E", bound=enum.Enum)

#: A key or value deserialiser (``OperatorConfig.key_deserializer``): raw bytes
#: (None for null) to the user's type, hence Any.
Deserializer = Callable[[bytes | None], Any]


class ConfigError(ValueError):
    """A setting is unknown, out of range or contradicts another one."""


class RegionMode(enum.Enum):
    PERIODIC = "periodic"
    OPERATOR_DRIVEN = "operator_driven"


class MalformedPolicy(enum.Enum):
    """What to do with a record the deserialiser cannot decode."""

    SKIP = "skip"  # count it (nDroppedMalformedMessages) and go on
    FAIL = "fail"  # fail the operator, naming topic/partition/offset


def enum_value(cls: type[E], value: object) -> E:
    """``value`` as a member of ``cls``: the member itself, or its value as a string
    (case and surrounding blanks ignored); ConfigError naming the choices otherwise."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        try:
            return cls(value.strip().lower())
        except ValueError:
            pass
    choices = ", ".join(m.value for m in cls)
    raise ConfigError(f"{cls.__name__}: {value!r} is not one of {choices}")


def as_start_position(value: object) -> StartPosition:
    """A StartPosition as it is, or a StartKind (or its value as a string) without values."""
    if isinstance(value, StartPosition):
        return value
    return StartPosition(enum_value(StartKind, value))


def as_region_mode(value: object) -> RegionMode:
    return enum_value(RegionMode, value)


def as_malformed_policy(value: object) -> MalformedPolicy:
    return enum_value(MalformedPolicy, value)


def as_gc_policy(value: object) -> GcPolicy:
    return enum_value(GcPolicy, value)


def as_client_kind(value: object) -> ClientKind:
    """The Kafka client library; ``kafka_python`` and ``KafkaPython`` name kafka-python too."""
    if isinstance(value, str) and value.strip().lower().replace("_", "-") in ("kafka-python", "kafkapython"):
        return ClientKind.KAFKA_PYTHON
    return enum_value(ClientKind, value)


def as_topics(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """One topic name or several as a tuple (none: empty)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(value)


def as_properties(value: Mapping[str, object]) -> dict[str, Any]:
    """Kafka consumer properties by their dotted names, copied (the caller's
    mapping may change later). Any: a property's value is whatever type the
    Kafka client takes for it (str, int, bool, a list of assignors)."""
    return dict(value)
