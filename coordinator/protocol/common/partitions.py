"""How a partition is named in logs, errors and metrics: ``topic[partition]``.

One spelling everywhere, so that a partition found in one log can be searched
for in every other log, metric label and error message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, TypeVar

V = TypeVar("V")


class TopicAndPartition(Protocol):
    """A Kafka partition: kafka-python's ``TopicPartition`` or anything with the two fields."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...


#: Any partition type (Mapping keys are invariant, so functions take a type variable).
TP = TypeVar("TP", bound=TopicAndPartition)


def partition_label(topic: str, partition: int) -> str:
    """``orders``, 3 -> ``orders[3]``."""
    return f"{topic}[{partition}]"


def by_label(values: Mapping[TP, V]) -> dict[str, V]:
    """``{TopicPartition("orders", 3): 17}`` -> ``{"orders[3]": 17}``, sorted by topic, then partition."""
    ordered = sorted(values.items(), key=lambda item: (item[0].topic, item[0].partition))
    return {partition_label(tp.topic, tp.partition): value for tp, value in ordered}


def offsets_text(values: Mapping[TP, int]) -> str:
    """``{orders[0]=5, orders[1]=9}``: offsets in one log field."""
    return "{" + ", ".join(f"{label}={value}" for label, value in by_label(values).items()) + "}"
