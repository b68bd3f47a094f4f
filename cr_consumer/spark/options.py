"""Options of the ``crkafka`` Spark source: parsed and validated at ``load()``.

Spark hands a Python data source its options as a case-insensitive map of
strings (keys arrive lower-cased). :func:`parse_options` turns that map into a
frozen :class:`SourceOptions`, or raises :class:`InvalidOptionError` naming the
option and what to change. It runs in ``DataSource.__init__``, which Spark calls
while planning ``readStream...load()``, so a bad option fails ``load()`` and never
reaches a running query.

Options (names are case-insensitive)::

    kafka.bootstrap.servers   required   host:port[,host:port...]
    group.id                  required   the Kafka consumer group the members join
    subscribe                 one of     comma-separated topic names
    subscribePattern          these two  a regular expression over topic names
    coordinator               required   the coordinator endpoint, e.g. tcp://127.0.0.1:5570
    members                   1          consumer operators (group members) in the source runner
    startPosition             default    default | beginning | end | time
    startTime                 -          with startPosition=time: epoch milliseconds or ISO-8601
    maxRecordsPerBatch        200000     soft cap on the rows of one micro-batch (>= 1)
    regionIndex               0          the consistent-region index registered with the coordinator
    metricsPort               -          serve Prometheus /metrics of the source runner on this port
                                         (0: any free port, logged; absent: no endpoint)
    metricsHost               127.0.0.1  the address metricsPort binds (0.0.0.0: all interfaces)
    kafka.<consumer property> -          passed to every KafkaConsumer (members and replay),
                                         by its standard dotted name, e.g. kafka.session.timeout.ms
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Mapping

import attrs

from cr_consumer.kafka.properties import redacted_repr

#: The start positions accepted by ``startPosition`` (a specific offset is not one:
#: an offset belongs to one partition, and this source reads many).
START_POSITIONS = ("default", "beginning", "end", "time")

DEFAULT_MAX_RECORDS_PER_BATCH = 200_000

#: Kafka consumer properties this source owns; setting them would break the
#: exactly-once contract or duplicate another option.
_RESERVED_KAFKA = {
    "group.id": "use the option group.id",
    "enable.auto.commit": "offsets are committed by the source when Spark commits a batch",
    "auto.commit.interval.ms": "offsets are committed by the source when Spark commits a batch",
    "key.deserializer": "keys are delivered as binary",
    "value.deserializer": "values are delivered as binary",
    "consumer.timeout.ms": "the source controls its own polling",
}

#: Kafka consumer properties that are Python objects in kafka-python and cannot
#: be given as a string option.
_OBJECT_KAFKA = {
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


class InvalidOptionError(ValueError):
    """A ``crkafka`` option is missing, unknown or invalid; the message names it."""

    def __init__(self, option: str, problem: str) -> None:
        super().__init__(f"crkafka option {option!r}: {problem}")
        self.option = option


def _kafka_defaults() -> dict:
    from kafka import KafkaConsumer  # local: importing options must stay cheap

    return dict(KafkaConsumer.DEFAULT_CONFIG)


def _parse_bool(option: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise InvalidOptionError(option, f"expected true or false, got {raw!r}")


def _parse_int(option: str, raw: str, minimum: int | None = None) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidOptionError(option, f"expected an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise InvalidOptionError(option, f"must be >= {minimum}, got {value}")
    return value


def _parse_time(option: str, raw: str) -> int:
    """Epoch milliseconds from an integer or an ISO-8601 date-time (UTC if no zone)."""
    text = raw.strip()
    if re.fullmatch(r"-?\d+", text):
        value = int(text)
    else:
        try:
            moment = _dt.datetime.fromisoformat(text)
        except ValueError:
            raise InvalidOptionError(
                option, f"expected epoch milliseconds or an ISO-8601 date-time, got {raw!r}"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=_dt.UTC)
        value = int(moment.timestamp() * 1000)
    if value < 0:
        raise InvalidOptionError(option, f"must not be before 1970-01-01, got {raw!r}")
    return value


def _parse_kafka_property(option: str, raw: str, defaults: dict) -> tuple[str, object]:
    dotted = option[len("kafka.") :]
    if dotted in _RESERVED_KAFKA:
        raise InvalidOptionError(option, f"cannot be set: {_RESERVED_KAFKA[dotted]}")
    if dotted in _OBJECT_KAFKA:
        raise InvalidOptionError(option, "is a Python object in kafka-python and cannot be set as an option")
    key = dotted.replace(".", "_")
    if "_" in dotted or key not in defaults:
        raise InvalidOptionError(option, f"unknown Kafka consumer property {dotted!r}")
    if dotted == "api.version":
        try:
            return dotted, tuple(int(p) for p in raw.strip().split("."))
        except ValueError:
            raise InvalidOptionError(option, f"expected a version like 2.8.0, got {raw!r}") from None
    default = defaults[key]
    kind = _NONE_DEFAULT_TYPES.get(dotted, type(default) if default is not None else str)
    if kind is bool:
        return dotted, _parse_bool(option, raw)
    if kind is int:
        return dotted, _parse_int(option, raw, minimum=0)
    if kind is str:
        return dotted, raw
    raise InvalidOptionError(option, "cannot be set as an option")  # pragma: no cover - table above


@attrs.frozen
class SourceOptions:
    """The validated options of one ``crkafka`` stream (picklable, no live objects)."""

    bootstrap_servers: str
    group_id: str
    coordinator: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    members: int = 1
    start_position: str = "default"
    start_time_ms: int | None = None
    max_records_per_batch: int = DEFAULT_MAX_RECORDS_PER_BATCH
    region_index: int = 0
    #: Prometheus /metrics of the source runner (None: not served).
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    #: Spark's maxOffsetsPerTrigger (None: everything available).
    max_offsets_per_trigger: int | None = None
    #: Spark's minPartitions (None: one task per Kafka partition).
    min_partitions: int | None = None
    #: Spark's failOnDataLoss: a range no longer on the broker fails the task.
    fail_on_data_loss: bool = True
    #: Kafka consumer properties by dotted name (typed values), sorted (name, value) pairs;
    #: shown with secret values redacted.
    kafka_properties: tuple[tuple[str, object], ...] = attrs.field(default=(), repr=redacted_repr)

    @property
    def consumer_properties(self) -> dict:
        """The pass-through properties by their dotted Kafka names."""
        return dict(self.kafka_properties)

    @property
    def kafka_config(self) -> dict:
        """The pass-through properties as kafka-python keyword arguments."""
        return {k.replace(".", "_"): v for k, v in self.kafka_properties}

    def describe_subscription(self) -> str:
        return f"pattern {self.pattern!r}" if self.pattern is not None else f"topics {list(self.topics)}"


#: Known option names (lower-case, as Spark delivers them) other than kafka.*.
KNOWN_OPTIONS = (
    "kafka.bootstrap.servers",
    "group.id",
    "subscribe",
    "subscribepattern",
    "coordinator",
    "members",
    "startposition",
    "starttime",
    "maxrecordsperbatch",
    "regionindex",
    "metricsport",
    "metricshost",
)

#: Spark's own spelling of each option, for error messages.
_SPELLING = {
    "subscribepattern": "subscribePattern",
    "startposition": "startPosition",
    "starttime": "startTime",
    "maxrecordsperbatch": "maxRecordsPerBatch",
    "regionindex": "regionIndex",
    "metricsport": "metricsPort",
    "metricshost": "metricsHost",
}


def _required(opts: Mapping[str, str], name: str) -> str:
    value = opts.get(name)
    if value is None or not str(value).strip():
        raise InvalidOptionError(_SPELLING.get(name, name), "is required")
    return str(value).strip()


def parse_options(raw: Mapping[str, str]) -> SourceOptions:
    """Validate Spark's option map; raise :class:`InvalidOptionError` naming the option."""
    opts = {str(k).lower(): ("" if v is None else str(v)) for k, v in dict(raw).items()}
    defaults = _kafka_defaults()
    kafka_props: dict[str, object] = {}
    for name, value in opts.items():
        if name == "kafka.bootstrap.servers":
            continue
        if name.startswith("kafka."):
            key, parsed = _parse_kafka_property(name, value, defaults)
            kafka_props[key] = parsed
        elif name not in KNOWN_OPTIONS:
            known = ", ".join(sorted(_SPELLING.get(k, k) for k in KNOWN_OPTIONS))
            raise InvalidOptionError(name, f"unknown option (known: {known}, and kafka.<consumer property>)")

    bootstrap = _required(opts, "kafka.bootstrap.servers")
    for server in bootstrap.split(","):
        if not re.fullmatch(r"\s*[^\s:,]+:\d{1,5}\s*", server):
            raise InvalidOptionError("kafka.bootstrap.servers", f"expected host:port[,host:port...], got {bootstrap!r}")
    group_id = _required(opts, "group.id")
    coordinator = _required(opts, "coordinator")
    if not re.fullmatch(r"(tcp|ipc|inproc)://\S+", coordinator):
        raise InvalidOptionError("coordinator", f"expected a ZeroMQ endpoint like tcp://127.0.0.1:5570, got {coordinator!r}")

    has_topics = "subscribe" in opts
    has_pattern = "subscribepattern" in opts
    if has_topics == has_pattern:
        raise InvalidOptionError("subscribe", "exactly one of subscribe and subscribePattern must be given")
    topics: tuple[str, ...] = ()
    pattern = None
    if has_topics:
        topics = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not topics:
            raise InvalidOptionError("subscribe", "names no topic")
        for topic in topics:
            if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", topic):
                raise InvalidOptionError("subscribe", f"{topic!r} is not a valid Kafka topic name")
        if len(set(topics)) != len(topics):
            raise InvalidOptionError("subscribe", f"lists a topic twice: {opts['subscribe']!r}")
    else:
        pattern = opts["subscribepattern"]
        if not pattern:
            raise InvalidOptionError("subscribePattern", "is empty")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise InvalidOptionError("subscribePattern", f"is not a valid regular expression: {exc}") from None

    members = _parse_int("members", opts.get("members", "1"), minimum=1)
    start_position = opts.get("startposition", "default").strip().lower()
    if start_position not in START_POSITIONS:
        raise InvalidOptionError(
            "startPosition", f"expected one of {', '.join(START_POSITIONS)}, got {opts['startposition']!r}"
        )
    start_time_ms = None
    if start_position == "time":
        start_time_ms = _parse_time("startTime", _required(opts, "starttime"))
    elif "starttime" in opts:
        raise InvalidOptionError("startTime", "is only allowed with startPosition=time")
    max_records = _parse_int(
        "maxRecordsPerBatch", opts.get("maxrecordsperbatch", str(DEFAULT_MAX_RECORDS_PER_BATCH)), minimum=1
    )
    region_index = _parse_int("regionIndex", opts.get("regionindex", "0"), minimum=0)
    metrics_port = None
    if "metricsport" in opts:
        metrics_port = _parse_int("metricsPort", opts["metricsport"], minimum=0)
        if metrics_port > 65535:
            raise InvalidOptionError("metricsPort", f"expected a port 0..65535, got {metrics_port}")
    metrics_host = opts.get("metricshost", "127.0.0.1").strip()
    if not metrics_host or any(c.isspace() for c in metrics_host):
        raise InvalidOptionError("metricsHost", f"expected a host name or address, got {opts['metricshost']!r}")

    return SourceOptions(
        bootstrap_servers=bootstrap,
        group_id=group_id,
        coordinator=coordinator,
        topics=topics,
        pattern=pattern,
        members=members,
        start_position=start_position,
        start_time_ms=start_time_ms,
        max_records_per_batch=max_records,
        region_index=region_index,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        kafka_properties=tuple(sorted(kafka_props.items())),
    )
