"""Building a :class:`~cr_consumer.kafka.client.KafkaClient` of the chosen kind.

A module of its own so that the seam (``client.py``) imports neither
implementation, and each implementation imports only the seam. The properties
are checked here (:func:`~cr_consumer.kafka.property_rules.client_checked`)
before either client maps them to its library's names.
"""

from __future__ import annotations

from collections.abc import Mapping

from cr_consumer.kafka.client import ClientKind, KafkaClient
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


__all__ = ["make_client"]
