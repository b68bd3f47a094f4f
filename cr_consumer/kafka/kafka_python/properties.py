"""Kafka properties (standard dotted names) -> kafka-python's consumer keyword arguments.

The properties are checked before (:mod:`cr_consumer.kafka.property_rules`); here:

1. librdkafka's spellings of the settings kafka-python names otherwise are mapped
   (:data:`RENAMED`), then each dotted name becomes its keyword name
   (``fetch.max.wait.ms`` -> ``fetch_max_wait_ms``: :func:`kafka_python_name`);
2. a name that is not one of kafka-python's consumer settings (:data:`SETTINGS`)
   is refused (:class:`~cr_consumer.kafka.client.ClientConfigError`);
3. ``partition.assignment.strategy`` is read by :mod:`cr_consumer.kafka.assignors`
   and given as kafka-python's classes (:data:`ASSIGNORS`);
4. auto commit is always off (the operator commits).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka import KafkaConsumer
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

from cr_consumer.kafka.assignors import COOPERATIVE_STICKY, RANGE, ROUNDROBIN, parse_strategy
from cr_consumer.kafka.client import ClientConfigError

#: librdkafka's names of settings kafka-python spells otherwise (dotted -> dotted).
RENAMED: Mapping[str, str] = {
    "sasl.username": "sasl.plain.username",
    "sasl.password": "sasl.plain.password",
    "sasl.mechanisms": "sasl.mechanism",
    "ssl.ca.location": "ssl.cafile",
    "ssl.certificate.location": "ssl.certfile",
    "ssl.key.location": "ssl.keyfile",
    "ssl.key.password": "ssl.password",
    "socket.timeout.ms": "request.timeout.ms",
    "fetch.wait.max.ms": "fetch.max.wait.ms",
}

#: kafka-python's consumer settings and their defaults (keyword names: ``fetch_max_wait_ms``).
DEFAULTS: Mapping[str, object] = KafkaConsumer.DEFAULT_CONFIG
#: kafka-python's consumer settings (keyword names).
SETTINGS: frozenset[str] = frozenset(DEFAULTS)


def kafka_python_name(key: str) -> str:
    """kafka-python's keyword name of the dotted property ``key`` (librdkafka's spellings mapped)."""
    return RENAMED.get(key, key).replace(".", "_")


#: The standard assignor names (cr_consumer.kafka.assignors) -> kafka-python's classes.
ASSIGNORS: Mapping[str, type] = {
    RANGE: RangePartitionAssignor,
    ROUNDROBIN: RoundRobinPartitionAssignor,
    COOPERATIVE_STICKY: CooperativeStickyAssignor,
}


def kafka_python_config(properties: Mapping[str, object]) -> dict[str, Any]:
    """kafka-python keyword arguments for ``properties``, checked by
    :mod:`cr_consumer.kafka.property_rules` (see the module docstring)."""
    cfg: dict[str, Any] = {"enable_auto_commit": False}
    for key, value in properties.items():
        name = kafka_python_name(key)
        if name not in SETTINGS:
            raise ClientConfigError(f"Kafka property {key!r} is not a kafka-python consumer setting")
        cfg[name] = value
    if "partition_assignment_strategy" in cfg:
        cfg["partition_assignment_strategy"] = tuple(
            ASSIGNORS[name] for name in parse_strategy(cfg["partition_assignment_strategy"]).names
        )
    return cfg


__all__ = ["ASSIGNORS", "DEFAULTS", "RENAMED", "SETTINGS", "kafka_python_config", "kafka_python_name"]
