"""The one set of rules for Kafka client properties (standard dotted names): the consumer's and,
at the end, the transactional producer's.

The operator (``OperatorConfig.consumer_properties``) and the Spark source
(its ``kafka.*`` options) check their users' properties here, before anything
is built; the client factory checks what it hands a client here too. Each
client then maps the checked properties to its library's names in its own
package (``kafka_python.properties.kafka_python_config``,
``librdkafka.properties.librdkafka_config``).

:func:`check_properties`, the owner's check (``OperatorConfig``; the Spark
source's options, name by name with :func:`check_name`, then together with
:func:`check_values`):

1. Every name is dotted (``fetch.max.bytes``, not ``fetch_max_bytes``).
2. A name the owner sets itself (its ``reserved`` table: a field or option of
   its own) is refused with the owner's reason. A name in the project's own
   namespace (``crkafka.``, :data:`PROJECT_PROPERTIES`: read by the source, never
   given to a client) is accepted only from an owner that reads it (``own``).
3. A name no client may be given (:data:`NEVER_SET`: the guarantee properties,
   whose value the exactly-once contract fixes, and the deserialisers) is
   refused at any value.
4. When kafka-python is among the clients that get the properties: a
   Java-client-only name (:data:`JVM_ONLY`) is refused naming kafka-python's
   equivalent, and any other name must be one of kafka-python's settings
   (or a librdkafka spelling it maps). librdkafka checks its names itself when
   a consumer is built: it has no list to check against before.
5. ``partition.assignment.strategy`` names eager assignors or the cooperative
   sticky assignor alone (:mod:`cr_consumer.kafka.assignors`, the clients' own
   table, so the owners accept exactly what both clients accept).
6. ``auto.offset.reset`` is ``earliest``, ``latest`` or ``none``.
7. ``heartbeat.interval.ms`` is lower than ``session.timeout.ms`` (the owner's
   default session timeout when none is given).
8. ``crkafka.filter.aborted`` is true or false, and true only together with
   ``isolation.level=read_committed``: the source then gives that guarantee
   itself, from the log's markers (a ``read_uncommitted`` source wants records of
   open and aborted transactions, which the filter would withhold).

:func:`client_checked`, the factory's check of one client's properties: the
guarantee properties given at their safe value are dropped (the clients set
it themselves), any other value, the deserialisers and the project's own
names are refused.

Every refusal is a :class:`PropertyError` naming the property (``key``; None
for a rule across properties); the owners turn it into their own error.

:func:`check_producer_properties`, the Kafka sink's check of its producer
properties, rules 1 and 4 as above (4 against kafka-python's producer settings
for a kafka-python producer; librdkafka checks names and values itself, on a
producer built and dropped at once), then:

9. a name the sink sets itself (:data:`PRODUCER_NEVER_SET`: the transactional
   id, which the sink derives per interval, and the serialisers, which the sink
   replaces by its own encoding) is refused at any value;
10. ``enable.idempotence`` may only be true and ``acks`` only ``all`` (or ``-1``):
    a transaction needs both (:data:`PRODUCER_GUARANTEES`);
11. ``transaction.timeout.ms`` is a positive integer.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from cr_consumer.kafka.assignors import KEY as STRATEGY_KEY
from cr_consumer.kafka.assignors import parse_strategy
from cr_consumer.kafka.client import DEFAULT_CLIENT, ClientConfigError, ClientKind


class PropertyError(ClientConfigError):
    """A Kafka property refused by a rule of the module docstring; ``key`` names it
    (None when the rule spans several properties)."""

    def __init__(self, key: str | None, message: str) -> None:
        super().__init__(message)
        self.key = key


#: Properties whose value the exactly-once contract fixes: the safe value (what
#: both clients use) and why any other breaks it. A client is given the safe
#: value at most; an owner refuses the name at any value.
GUARANTEE_PROPERTIES: Mapping[str, tuple[object, str]] = {
    "enable.auto.commit": (
        False,
        "offsets are committed explicitly once what was read is processed (the "
        "operator's drain, the Spark source's batch commit); auto commit would commit "
        "records not yet processed",
    ),
    "enable.auto.offset.store": (
        False,
        "explicit offsets are committed; auto offset store would track fetched, not processed, records",
    ),
    "auto.commit.interval.ms": (None, "offsets are committed explicitly, not on a timer"),
    "enable.partition.eof": (False, "end-of-partition events are not records; lag is read from the high watermark"),
}
#: Names no client is given, and why (rule 3 of the module docstring).
NEVER_SET: Mapping[str, str] = {
    **{key: reason for key, (_safe, reason) in GUARANTEE_PROPERTIES.items()},
    "key.deserializer": "records carry raw bytes; decode keys in the operator "
    "(OperatorConfig.key_deserializer) or in the Spark query",
    "value.deserializer": "records carry raw bytes; decode values in the operator "
    "(OperatorConfig.value_deserializer) or in the Spark query",
}

#: Java-client property names that kafka-python has no equivalent of under the
#: same name -> what to set instead (docs/operations.md, "Connecting to a real
#: cluster"). kafka-python reads PEM files, not JKS/PKCS12 stores.
JVM_ONLY: Mapping[str, str] = {
    "sasl.jaas.config": "sasl.plain.username and sasl.plain.password (PLAIN, SCRAM-SHA-256/512) "
    "or sasl.kerberos.service.name (GSSAPI)",
    "sasl.client.callback.handler.class": "sasl.oauth.token.provider (an object, from Python)",
    "sasl.login.callback.handler.class": "sasl.oauth.token.provider (an object, from Python)",
    "ssl.truststore.location": "ssl.cafile (the CA certificates as a PEM file)",
    "ssl.truststore.password": "nothing: ssl.cafile is a PEM file without a password",
    "ssl.truststore.type": "ssl.cafile (PEM)",
    "ssl.truststore.certificates": "ssl.cafile (PEM)",
    "ssl.keystore.location": "ssl.certfile and ssl.keyfile (PEM files)",
    "ssl.keystore.password": "ssl.password (the password of ssl.keyfile)",
    "ssl.keystore.type": "ssl.certfile and ssl.keyfile (PEM)",
    "ssl.keystore.key": "ssl.keyfile (PEM)",
    "ssl.keystore.certificate.chain": "ssl.certfile (PEM)",
    "ssl.key.password": "ssl.password",
    "ssl.endpoint.identification.algorithm": "ssl.check.hostname (true, or false for an empty algorithm)",
    "ssl.enabled.protocols": "ssl.context (an ssl.SSLContext, from Python)",
    "ssl.protocol": "ssl.context (an ssl.SSLContext, from Python)",
    "ssl.cipher.suites": "ssl.ciphers (OpenSSL cipher list syntax)",
}

#: The project's own namespace of consumer properties (rule 2).
PROJECT_PREFIX = "crkafka."
#: The source reads committed records itself, from the log's markers (rule 8;
#: ``cr_consumer/kafka/kafka_python/aborted_records.py``): for brokers whose ``read_committed``
#: cannot be trusted (the test broker). Off by default: a real cluster's is right, and the
#: filter reads the log a second time.
FILTER_ABORTED = "crkafka.filter.aborted"
#: Every property of the project's namespace, and what it does.
PROJECT_PROPERTIES: Mapping[str, str] = {
    FILTER_ABORTED: "the source reads committed records itself, from the log's control markers",
}
#: The isolation level ``crkafka.filter.aborted`` needs (rule 8).
READ_COMMITTED = "read_committed"

#: Accepted values of ``auto.offset.reset`` (rule 6).
AUTO_OFFSET_RESETS = ("earliest", "latest", "none")
#: Kafka's heartbeat interval (ms) when the session timeout allows it.
DEFAULT_HEARTBEAT_INTERVAL_MS = 3000


def _check_dotted(key: object, example: str) -> str:
    """Rule 1: a property is named by its standard dotted Kafka name (``example`` shows one)."""
    if not isinstance(key, str) or "_" in key:
        raise PropertyError(str(key), f"Kafka property {key!r}: use the standard dotted Kafka name (e.g. {example!r})")
    return key


def check_name(
    name: object, *, clients: Collection[ClientKind], reserved: Mapping[str, str], own: Collection[str] = ()
) -> None:
    """Rules 1-4 of the module docstring for one property name (``own``: the project's
    properties the owner reads)."""
    key = _check_dotted(name, "fetch.max.bytes")
    if key in reserved:
        raise PropertyError(key, f"Kafka property {key!r} cannot be set here: {reserved[key]}")
    if key.startswith(PROJECT_PREFIX):
        if key not in PROJECT_PROPERTIES:
            known = ", ".join(sorted(PROJECT_PROPERTIES))
            raise PropertyError(key, f"unknown property {key!r} (the project's properties: {known})")
        if key not in own:
            raise PropertyError(key, f"property {key!r} is read by the consumer operator only, not here")
        return
    if key in NEVER_SET:
        raise PropertyError(key, f"Kafka property {key!r} cannot be set: {NEVER_SET[key]}")
    if ClientKind.KAFKA_PYTHON in clients:
        if key in JVM_ONLY:
            raise PropertyError(
                key,
                f"Kafka property {key!r} is a Java client setting that kafka-python does not "
                f"read; use {JVM_ONLY[key]} (docs/operations.md, Connecting to a real cluster)",
            )
        from cr_consumer.kafka.kafka_python.properties import SETTINGS, kafka_python_name  # lazily: kafka is heavy

        if kafka_python_name(key) not in SETTINGS:
            raise PropertyError(key, f"unknown consumer property {key!r} (not a kafka-python consumer setting)")


def check_values(properties: Mapping[str, object], *, session_default_ms: int) -> None:
    """Rules 5-8 of the module docstring."""
    if STRATEGY_KEY in properties:
        assignor_names(properties[STRATEGY_KEY])
    reset = properties.get("auto.offset.reset")
    if reset is not None and reset not in AUTO_OFFSET_RESETS:
        raise PropertyError("auto.offset.reset", f"auto.offset.reset must be earliest, latest or none, got {reset!r}")
    session = int_property(properties, "session.timeout.ms", session_default_ms)
    heartbeat = int_property(properties, "heartbeat.interval.ms", default_heartbeat_ms(session))
    if heartbeat >= session:
        raise PropertyError(
            None, f"heartbeat.interval.ms ({heartbeat}) must be lower than session.timeout.ms ({session})"
        )
    if filter_aborted(properties) and properties.get("isolation.level") != READ_COMMITTED:
        raise PropertyError(
            FILTER_ABORTED,
            f"{FILTER_ABORTED}=true needs isolation.level={READ_COMMITTED} (got"
            f" {properties.get('isolation.level', 'read_uncommitted')!r}): the filter decides the records such a"
            " consumer must return itself, from the log's markers",
        )


def check_properties(
    properties: Mapping[str, object],
    *,
    clients: Collection[ClientKind],
    reserved: Mapping[str, str],
    session_default_ms: int,
    own: Collection[str] = (),
) -> None:
    """Rules 1-8 of the module docstring: ``clients`` are the libraries that will be
    given the properties, ``reserved`` the owner's own names and why, ``own`` the
    project's properties the owner reads."""
    for key in properties:
        check_name(key, clients=clients, reserved=reserved, own=own)
    check_values(properties, session_default_ms=session_default_ms)


def assignor_names(strategy: object) -> tuple[str, ...]:
    """The assignors of ``partition.assignment.strategy`` by their standard names
    (range, roundrobin, cooperative-sticky); PropertyError naming the accepted
    spellings for anything :func:`~cr_consumer.kafka.assignors.parse_strategy` refuses."""
    try:
        return parse_strategy(strategy).names
    except ClientConfigError as exc:
        raise PropertyError(STRATEGY_KEY, str(exc)) from None


def int_property(properties: Mapping[str, object], key: str, default: int) -> int:
    """The integer value of ``key`` (``default`` when not given); PropertyError for a non-integer."""
    value = properties.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise PropertyError(key, f"Kafka property {key!r} must be an integer, got {value!r}")
    try:
        return int(value)
    except ValueError:
        raise PropertyError(key, f"Kafka property {key!r} must be an integer, got {value!r}") from None


def bool_property(properties: Mapping[str, object], key: str, default: bool) -> bool:
    """The boolean value of ``key`` (``default`` when not given): a bool, or ``true`` /
    ``false`` in any case (a properties file's spelling); PropertyError for anything else."""
    value = properties.get(key, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise PropertyError(key, f"property {key!r} must be true or false, got {value!r}")


def filter_aborted(properties: Mapping[str, object]) -> bool:
    """Whether ``crkafka.filter.aborted`` is on (rule 8 checks its value)."""
    return bool_property(properties, FILTER_ABORTED, False)


def default_heartbeat_ms(session_ms: int) -> int:
    """heartbeat.interval.ms unless set: Kafka's 3 s, or a third of a shorter session timeout."""
    return min(DEFAULT_HEARTBEAT_INTERVAL_MS, session_ms // 3)


def _is_false(value: object) -> bool:
    return value is False or (isinstance(value, str) and value.strip().lower() == "false") or value == 0


def client_checked(properties: Mapping[str, object]) -> dict[str, object]:
    """``properties`` for one client: a guarantee property at its safe value is
    dropped; any other value of it, and a deserialiser, is refused (PropertyError)."""
    out: dict[str, object] = {}
    for key, value in properties.items():
        if key in GUARANTEE_PROPERTIES:
            safe, reason = GUARANTEE_PROPERTIES[key]
            if safe is False and _is_false(value):
                continue
            raise PropertyError(key, f"Kafka property {key}={value!r} cannot be used: {reason}")
        if key in NEVER_SET:
            raise PropertyError(key, f"Kafka property {key!r} cannot be used: {NEVER_SET[key]}")
        if key.startswith(PROJECT_PREFIX):
            raise PropertyError(key, f"property {key!r} is read by the source, never given to a Kafka client")
        out[key] = value
    return out


#: Producer properties the Kafka sink sets itself, and why (rule 9).
PRODUCER_NEVER_SET: Mapping[str, str] = {
    "transactional.id": "the sink derives two transactional ids from the group, the member and the sink "
    "name and alternates them per checkpoint interval (cr_consumer/runtime/pipeline/kafka_sink.py)",
    "key.serializer": "the sink encodes keys itself (str as UTF-8, bytes as they are, other values as JSON)",
    "value.serializer": "the sink encodes values itself (str as UTF-8, bytes as they are, other values as JSON)",
}
#: Producer properties a transaction needs at one value (rule 10): the accepted spellings and why.
PRODUCER_GUARANTEES: Mapping[str, tuple[tuple[object, ...], str]] = {
    "enable.idempotence": ((True, "true", 1), "a transactional producer is idempotent"),
    "acks": (("all", "-1", -1), "a transaction's records must be on every in-sync replica before its commit"),
}


def check_producer_properties(properties: Mapping[str, object], client: ClientKind = DEFAULT_CLIENT) -> None:
    """Rules 1, 4 and 9-11 of the module docstring for the Kafka sink's producer properties
    (rule 4 against kafka-python's settings for a kafka-python producer; librdkafka checks its
    own names and values, ``librdkafka.producer_settings.check_settings``)."""
    for name, value in properties.items():
        key = _check_dotted(name, "linger.ms")
        if key in PRODUCER_NEVER_SET:
            raise PropertyError(key, f"Kafka property {key!r} cannot be set on a Kafka sink: {PRODUCER_NEVER_SET[key]}")
        if key in JVM_ONLY:
            raise PropertyError(key, f"Kafka property {key!r} is a Java client setting; use {JVM_ONLY[key]}")
        if client is ClientKind.KAFKA_PYTHON:
            from cr_consumer.kafka.kafka_python.producer import PRODUCER_SETTINGS, producer_name  # lazily: heavy

            if producer_name(key) not in PRODUCER_SETTINGS:
                raise PropertyError(key, f"unknown producer property {key!r} (not a kafka-python producer setting)")
        if key in PRODUCER_GUARANTEES:
            accepted, reason = PRODUCER_GUARANTEES[key]
            if (isinstance(value, bool) and value is not True) or value not in accepted:
                raise PropertyError(
                    key,
                    f"Kafka property {key}={value!r} cannot be used on a Kafka sink: {reason} ({key}={accepted[0]})",
                )
    if "transaction.timeout.ms" in properties:
        timeout = int_property(properties, "transaction.timeout.ms", 0)
        if timeout <= 0:
            raise PropertyError("transaction.timeout.ms", f"transaction.timeout.ms must be positive, got {timeout}")
    if client is ClientKind.LIBRDKAFKA:
        from cr_consumer.kafka.librdkafka.producer_settings import check_settings  # lazily: confluent-kafka is optional

        refused = check_settings(properties)
        if refused is not None:
            raise PropertyError(None, f"librdkafka refuses the Kafka sink's producer properties: {refused}")


__all__ = [
    "AUTO_OFFSET_RESETS",
    "DEFAULT_HEARTBEAT_INTERVAL_MS",
    "FILTER_ABORTED",
    "GUARANTEE_PROPERTIES",
    "JVM_ONLY",
    "NEVER_SET",
    "PRODUCER_GUARANTEES",
    "PRODUCER_NEVER_SET",
    "PROJECT_PREFIX",
    "PROJECT_PROPERTIES",
    "READ_COMMITTED",
    "PropertyError",
    "assignor_names",
    "bool_property",
    "check_name",
    "check_producer_properties",
    "check_properties",
    "check_values",
    "client_checked",
    "default_heartbeat_ms",
    "filter_aborted",
    "int_property",
]
