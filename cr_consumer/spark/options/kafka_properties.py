"""The ``kafka.*`` options of the ``crkafka`` source: consumer properties and the client library.

The properties are checked by the rules both clients and the operator share
(:mod:`cr_consumer.kafka.property_rules`); what is the source's own here:

1. ``kafka.<dotted name>`` is a Kafka consumer property passed to every consumer
   of the query (:func:`parse_kafka_property`): its name is checked
   (``check_name``: the query's group members and probe are kafka-python
   consumers, so it must be a kafka-python setting whatever the executors'
   client), refused when the source owns it (:data:`RESERVED_KAFKA`) or when
   kafka-python takes a Python object for it (:data:`OBJECT_KAFKA`); the value
   is typed like kafka-python's default of the setting (bool, int >= 0, string;
   ``api.version`` a version tuple).
2. ``kafka.client`` picks the executors' Kafka library (:func:`parse_client`):
   librdkafka needs confluent-kafka in the driver (and on every executor).
3. :func:`check_properties` checks the properties together (``check_values``,
   with the members' session timeout as the default) and then, when librdkafka
   is the executors' client, builds its consumer once: the executors fail far
   from ``load()``, so a name librdkafka refuses fails here.
"""

from __future__ import annotations

from collections.abc import Mapping

from cr_consumer.kafka.client import ClientKind
from cr_consumer.kafka.property_rules import PropertyError, check_name, check_values
from cr_consumer.spark.options.values import InvalidOptionError, parse_bool, parse_int

#: Kafka consumer properties this source owns (as Spark's Kafka source does).
RESERVED_KAFKA = {
    "auto.offset.reset": "use startingOffsets (earliest, latest, committed or JSON per partition)",
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

#: The executors' Kafka library when ``kafka.client`` is not given: librdkafka, which
#: the ``spark`` extra installs, reads 2-3x the rows per second of kafka-python
#: (bench/bench_spark.py; BENCHMARKS.md). The driver's group members are kafka-python.
EXECUTOR_DEFAULT_CLIENT = ClientKind.LIBRDKAFKA

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


def kafka_defaults() -> dict[str, object]:
    """kafka-python's consumer settings and their defaults (keyword names)."""
    from cr_consumer.kafka.kafka_python.properties import DEFAULTS  # local: importing options must stay cheap

    return dict(DEFAULTS)


def parse_kafka_property(option: str, raw: str, defaults: Mapping[str, object]) -> tuple[str, object]:
    """``kafka.<dotted name>`` -> (dotted name, typed value); ``defaults`` from :func:`kafka_defaults`."""
    dotted = option[len("kafka.") :]
    if dotted in OBJECT_KAFKA:
        raise InvalidOptionError(option, "is a Python object in kafka-python and cannot be set as an option")
    try:
        check_name(dotted, clients={ClientKind.KAFKA_PYTHON}, reserved=RESERVED_KAFKA)
    except PropertyError as exc:
        raise InvalidOptionError(option, str(exc)) from None
    from cr_consumer.kafka.kafka_python.properties import kafka_python_name  # local: importing options must stay cheap

    if dotted == "api.version":
        try:
            return dotted, tuple(int(p) for p in raw.strip().split("."))
        except ValueError:
            raise InvalidOptionError(option, f"expected a version like 2.8.0, got {raw!r}") from None
    default = defaults[kafka_python_name(dotted)]
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
        raise InvalidOptionError(
            "kafka.client", f"expected {' or '.join(k.value for k in ClientKind)}, got {raw!r}"
        ) from None
    if kind is ClientKind.LIBRDKAFKA:
        import importlib.util

        if importlib.util.find_spec("confluent_kafka") is None:
            raise InvalidOptionError(
                "kafka.client",
                "librdkafka needs confluent-kafka in the driver and on every "
                "executor: pip install 'cr-consumer[librdkafka]', or set "
                "kafka.client=kafka-python",
            )
    return kind


def check_properties(bootstrap: str, client: ClientKind, kafka_props: dict[str, object]) -> None:
    """The properties together (module docstring, step 3)."""
    try:
        check_values(kafka_props, session_default_ms=MEMBER_SESSION_TIMEOUT_MS)
    except PropertyError as exc:
        raise InvalidOptionError("kafka.*" if exc.key is None else f"kafka.{exc.key}", str(exc)) from None
    if client is ClientKind.LIBRDKAFKA and kafka_props:
        from cr_consumer.kafka.librdkafka.ranges import config_error

        problem = config_error(bootstrap, kafka_props)
        if problem is not None:
            raise InvalidOptionError(
                "kafka.*",
                f"the executors' librdkafka consumer refuses these properties: "
                f"{problem} (set kafka.client=kafka-python to use kafka-python's)",
            )
