"""The ``kafka.*`` options of the ``crkafka`` source: consumer properties and the client library.

1. ``kafka.<dotted name>`` is a Kafka consumer property passed to every consumer
   of the query (:func:`parse_kafka_property`): refused when the source owns it
   (:data:`RESERVED_KAFKA`) or when kafka-python takes a Python object for it
   (:data:`OBJECT_KAFKA`); otherwise typed like kafka-python's default of the
   setting (bool, int >= 0, string; ``api.version`` a version tuple).
2. ``kafka.client`` picks the executors' Kafka library (:func:`parse_client`):
   librdkafka needs confluent-kafka in the driver (and on every executor).
3. :func:`check_properties` checks the properties together: librdkafka must
   accept them when it is the client, and the heartbeat must be shorter than
   the session timeout.
"""

from __future__ import annotations

from cr_consumer.kafka.client import ClientKind
from cr_consumer.spark.options.names import closest
from cr_consumer.spark.options.values import InvalidOptionError, parse_bool, parse_int

#: Kafka consumer properties this source owns (as Spark's Kafka source does);
#: setting them would break the exactly-once contract or duplicate an option.
RESERVED_KAFKA = {
    "enable.auto.commit": "offsets are committed by the source when Spark commits a batch",
    "auto.commit.interval.ms": "offsets are committed by the source when Spark commits a batch",
    "auto.offset.reset": "use startingOffsets (earliest, latest, committed or JSON per partition)",
    "key.deserializer": "keys are delivered as binary",
    "value.deserializer": "values are delivered as binary",
    "consumer.timeout.ms": "the source controls its own polling",
}

#: Kafka consumer properties that are Python objects in kafka-python and cannot
#: be given as a string option.
OBJECT_KAFKA = {
    "kafka.client",
    "selector",
    "socket.options",
    "metric.reporters",
    "partition.assignment.strategy",
    "default.offset.commit.callback",
    "ssl.context",
    "sasl.oauth.token.provider",
}

#: Types of the kafka-python settings whose default is None (so the type cannot be
#: read off the default).
_NONE_DEFAULT_TYPES = {"receive.buffer.bytes": int, "send.buffer.bytes": int}

#: The session timeout (ms) of the query's group members when
#: ``kafka.session.timeout.ms`` is not given (kafka-python's own default is
#: 45 s). The members only hold partitions and commit, and heartbeat from
#: kafka-python's IO thread, so a short timeout costs nothing; it bounds how
#: long the partitions of a killed driver stay with its dead members, and some
#: brokers complete a group join only after a session timeout (tansu: a second
#: query joining a group took ~50 s with 45 s, ~10 s with 10 s).
MEMBER_SESSION_TIMEOUT_MS = 10_000


def kafka_defaults() -> dict:
    """kafka-python's consumer settings and their defaults (keyword names)."""
    from cr_consumer.kafka.kafka_python.client import DEFAULTS  # local: importing options must stay cheap

    return dict(DEFAULTS)


def parse_kafka_property(option: str, raw: str, defaults: dict) -> tuple[str, object]:
    """``kafka.<dotted name>`` -> (dotted name, typed value); ``defaults`` from :func:`kafka_defaults`."""
    dotted = option[len("kafka.") :]
    if dotted in RESERVED_KAFKA:
        raise InvalidOptionError(option, f"cannot be set: {RESERVED_KAFKA[dotted]}")
    if dotted in OBJECT_KAFKA:
        raise InvalidOptionError(option, "is a Python object in kafka-python and cannot be set as an option")
    key = dotted.replace(".", "_")
    if "_" in dotted or key not in defaults:
        raise InvalidOptionError(option, f"unknown Kafka consumer property {dotted!r} (closest option: {closest(option)})")
    if dotted == "api.version":
        try:
            return dotted, tuple(int(p) for p in raw.strip().split("."))
        except ValueError:
            raise InvalidOptionError(option, f"expected a version like 2.8.0, got {raw!r}") from None
    default = defaults[key]
    kind = _NONE_DEFAULT_TYPES.get(dotted, type(default) if default is not None else str)
    if kind is bool:
        return dotted, parse_bool(option, raw)
    if kind is int:
        return dotted, parse_int(option, raw, minimum=0)
    if kind is str:
        return dotted, raw
    raise InvalidOptionError(option, "cannot be set as an option")  # pragma: no cover - table above


def parse_client(raw: str) -> ClientKind:
    """``kafka.client``: the executors' Kafka library, installed in the driver."""
    try:
        kind = ClientKind(raw.strip().lower())
    except ValueError:
        raise InvalidOptionError("kafka.client", f"expected {' or '.join(k.value for k in ClientKind)}, "
                                                 f"got {raw!r}") from None
    if kind is ClientKind.LIBRDKAFKA:
        import importlib.util

        if importlib.util.find_spec("confluent_kafka") is None:
            raise InvalidOptionError("kafka.client", "librdkafka needs confluent-kafka in the driver and on every "
                                                     "executor: pip install 'cr-consumer[librdkafka]', or set "
                                                     "kafka.client=kafka-python")
    return kind


def check_properties(bootstrap: str, client: ClientKind, kafka_props: dict[str, object]) -> None:
    """The properties together: accepted by the executors' librdkafka consumer (when it is the
    client), and the heartbeat below the session timeout."""
    if client is ClientKind.LIBRDKAFKA and kafka_props:
        from cr_consumer.spark.librdkafka_range import config_error

        problem = config_error(bootstrap, kafka_props)
        if problem is not None:
            raise InvalidOptionError("kafka.*", f"the executors' librdkafka consumer refuses these properties: "
                                                f"{problem} (set kafka.client=kafka-python to use kafka-python's)")
    session_ms = kafka_props.get("session.timeout.ms")
    heartbeat_ms = kafka_props.get("heartbeat.interval.ms")
    session_bound = session_ms if isinstance(session_ms, int) else MEMBER_SESSION_TIMEOUT_MS
    if isinstance(heartbeat_ms, int) and heartbeat_ms >= session_bound:
        raise InvalidOptionError("kafka.*", f"kafka.heartbeat.interval.ms ({heartbeat_ms}) must be lower than "
                                            f"kafka.session.timeout.ms ({session_bound})")
