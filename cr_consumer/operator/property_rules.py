"""The rules for the Kafka consumer properties an operator is given, and the defaults it derives.

``OperatorConfig.consumer_properties`` passes Kafka consumer properties by their
standard dotted names. The rules here:

1. :func:`check_property_names`: every name is dotted, is not one the operator
   sets itself (:data:`RESERVED`: a field of its own, or a property the
   exactly-once guarantee fixes), is not a Java-client-only name, and (with
   kafka-python) is one of kafka-python's settings.
2. :func:`assignor_names`: ``partition.assignment.strategy`` names eager
   assignors (range, roundrobin) or the cooperative sticky assignor alone;
   eager and cooperative assignors are never mixed. The spellings are the
   clients' own table (:mod:`cr_consumer.kafka.assignors`), so the config
   accepts exactly what both clients accept.
3. The defaults and caps ``OperatorConfig.client_properties`` derives the
   client's properties with (each constant says which failure it prevents).
"""

from __future__ import annotations

from collections.abc import Mapping

from cr_consumer.kafka.assignors import parse_strategy
from cr_consumer.kafka.client import GUARANTEE_PROPERTIES, ClientConfigError, ClientKind
from cr_consumer.kafka.properties import jvm_equivalent
from cr_consumer.operator.config_types import ConfigError

#: Kafka properties that have a field of their own, or that the operator
#: decides itself: setting them through consumer_properties is an error.
RESERVED = {
    "bootstrap.servers": "use OperatorConfig(bootstrap_servers=...)",
    "group.id": "use OperatorConfig(group_id=...)",
    "max.poll.records": "use OperatorConfig(max_poll_records=...)",
    "key.deserializer": "use OperatorConfig(key_deserializer=...)",
    "value.deserializer": "use OperatorConfig(value_deserializer=...)",
    **{key: reason for key, (_safe, reason) in GUARANTEE_PROPERTIES.items()},
}

#: Cap on metadata.max.age.ms: a newly created topic matching the pattern (or
#: new partitions) must be seen within ~2 s, as in the reference.
METADATA_MAX_AGE_CAP_MS = 2000
DEFAULT_SESSION_TIMEOUT_MS = 20000
#: fetch.max.wait.ms unless set: a fetch at the log end waits this long in the
#: broker, and a partition seeked by a reset is not fetched again until that
#: fetch returns; Kafka's 500 ms default would add up to 500 ms to every reset.
DEFAULT_FETCH_MAX_WAIT_MS = 100
DEFAULT_HEARTBEAT_INTERVAL_MS = 3000
#: fetch.max.bytes unless set: kafka-python decodes a fetch response on its IO
#: thread, holding the GIL ~2-3 ms per MB, and a drain's commit response (or
#: the poll the drain waits for) queues behind it. With Kafka's 50 MB default
#: a broker that ignores max.partition.fetch.bytes (tansu) answers with ~5 MB
#: responses whose decoding stalled drains for 10-25 ms (the drain-latency
#: p99). With 1 MB the drain p99 is ~12 ms at the same throughput (BENCHMARKS.md).
DEFAULT_FETCH_MAX_BYTES = 1024 * 1024

def check_property_names(props: Mapping[str, object], client: ClientKind = ClientKind.KAFKA_PYTHON) -> None:
    """Every key is a dotted consumer property this operator lets the user set;
    a Java-client-only name (``sasl.jaas.config``, ``ssl.truststore.location``)
    is refused naming the equivalent. kafka-python: the name must be one of its
    settings (or one of librdkafka's spellings it maps); librdkafka: the library
    itself checks the names when the client is created (it has no list to check
    against before). Raises ConfigError."""
    from cr_consumer.kafka.kafka_python.client import RENAMED, SETTINGS  # lazily: the package import stays light

    for key in props:
        if not isinstance(key, str) or "_" in key:
            raise ConfigError(
                f"consumer property {key!r}: use the standard dotted Kafka name (e.g. 'fetch.max.bytes')"
            )
        if key in RESERVED:
            raise ConfigError(f"consumer property {key!r} cannot be set here: {RESERVED[key]}")
        instead = jvm_equivalent(key)
        if instead is not None:
            raise ConfigError(f"consumer property {key!r} is a Java client setting that kafka-python does not "
                              f"read; use {instead} (docs/operations.md, Connecting to a real cluster)")
        if client is ClientKind.KAFKA_PYTHON and RENAMED.get(key, key).replace(".", "_") not in SETTINGS:
            raise ConfigError(f"unknown consumer property {key!r} (not a kafka-python consumer setting)")


def assignor_names(strategy: object) -> tuple[str, ...]:
    """The assignors of ``partition.assignment.strategy`` by their standard names
    (range, roundrobin, cooperative-sticky), read by the clients' own table
    (:func:`cr_consumer.kafka.assignors.parse_strategy`); ConfigError naming the
    accepted spellings for anything it refuses."""
    try:
        return parse_strategy(strategy).names
    except ClientConfigError as exc:
        raise ConfigError(str(exc)) from None


def default_heartbeat_ms(session_ms: int) -> int:
    """heartbeat.interval.ms unless set: Kafka's 3 s, or a third of a shorter session timeout."""
    return min(DEFAULT_HEARTBEAT_INTERVAL_MS, session_ms // 3)
