"""Building a :class:`~cr_consumer.kafka.client.KafkaClient` of the chosen kind.

A module of its own so that the seam (``client.py``) imports neither
implementation, and each implementation imports only the seam. The properties
are checked here (:func:`~cr_consumer.kafka.property_rules.client_checked`)
before either client maps them to its library's names.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cr_consumer.kafka.client import ClientKind, KafkaClient
from cr_consumer.kafka.producer import TransactionalWriter
from cr_consumer.kafka.property_rules import client_checked


def make_client(kind: ClientKind | str, properties: Mapping[str, object]) -> KafkaClient:
    """A client of ``kind`` with ``properties`` (standard dotted names; must hold
    ``bootstrap.servers`` and ``group.id``, None for a kafka-python client without
    a group). ClientUnavailable when the library is missing; ClientConfigError for
    a property it cannot use."""
    kind = ClientKind(kind)
    properties = client_checked(properties)
    if kind is ClientKind.LIBRDKAFKA:
        from cr_consumer.kafka.librdkafka.client import LibrdkafkaClient

        return LibrdkafkaClient(properties)
    from cr_consumer.kafka.kafka_python.client import KafkaPythonClient

    return KafkaPythonClient(properties)


def make_transactional_producer(
    kind: ClientKind | str,
    bootstrap: str,
    properties: Mapping[str, object],
    transactional_id: str,
    settings: Mapping[str, Any],
) -> TransactionalWriter:
    """A transactional producer of ``kind`` for ``transactional_id`` (``properties``: checked by
    ``property_rules.check_producer_properties``, the sink's defaults under them; ``settings``:
    the raw client's, which a librdkafka producer reads its producer id and epoch back with)."""
    kind = ClientKind(kind)
    if kind is ClientKind.LIBRDKAFKA:
        from cr_consumer.kafka.librdkafka.producer import LibrdkafkaTransactionalProducer

        return LibrdkafkaTransactionalProducer(bootstrap, properties, transactional_id, settings)
    from cr_consumer.kafka.kafka_python.producer import TransactionalProducer, producer_config

    return TransactionalProducer(producer_config(bootstrap, properties, transactional_id, {}))


__all__ = ["make_client", "make_transactional_producer"]
