"""librdkafka's verdict on the Kafka sink's producer properties (:func:`check_settings`).

librdkafka checks its setting names and values only when a producer is built,
so the check builds one: with the properties mapped to librdkafka's names
(:func:`~cr_consumer.kafka.librdkafka.properties.librdkafka_producer_config`)
and no cluster, then drops it (a few ms, no connection). A name or a value
librdkafka does not take then fails the sink's construction, not its first interval.
"""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import KafkaError, KafkaException, Producer

from cr_consumer.kafka.librdkafka.properties import librdkafka_producer_config


def check_settings(properties: Mapping[str, object]) -> str | None:
    """librdkafka's refusal of ``properties`` as producer settings, or None: a producer with
    them and no cluster is built and dropped at once (a few ms, no connection), so a name or a
    value librdkafka does not take fails the sink's construction, not its first interval."""
    try:
        Producer({**librdkafka_producer_config(properties), "log_level": 3})
    except KafkaException as exc:
        return str(exc.args[0].str() if exc.args and isinstance(exc.args[0], KafkaError) else exc)
    return None


__all__ = ["check_settings"]
