"""Options and input schema of the ``crkafka`` sink, with the names of Spark's Kafka sink.

pyspark lower-cases option names before the sink sees them; an error names the option as
written here. :func:`parse_sink_options` checks the whole map before anything is built:

1. ``kafka.bootstrap.servers`` (required, ``host:port[,host:port...]``).
2. ``topic``: where every row goes; when given it overrides the input's ``topic`` column (as in
   Spark's Kafka sink); without it every row must name its topic.
3. ``kafka.<dotted name>``: a kafka-python producer property, typed like kafka-python's default
   of the setting and checked by the rules the pipeline's Kafka sink shares
   (``property_rules.check_producer_properties``: the transactional id, idempotence and acks
   belong to the sink).
4. ``decisionTopicPrefix`` (default ``crkafka-sink-decisions``): the query's decision log is the
   topic ``<prefix>-<query id>`` (``decisions.py``).
5. ``checkpointLocation`` is Spark's; any other name fails, listing the valid ones.

:func:`input_columns` checks the input schema (Spark's Kafka sink's): ``value`` (string or
binary) required; ``key`` (string or binary), ``topic`` (string), ``partition`` (int) and
``headers`` (array of struct<key: string, value: binary>) optional; other columns are ignored,
as Spark's Kafka sink does.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from cr_consumer.kafka.property_rules import PropertyError, check_producer_properties
from cr_consumer.spark.options.parse import bootstrap_servers
from cr_consumer.spark.options.values import TOPIC_RE, InvalidOptionError, parse_bool, parse_int

#: The decision log's topic prefix when ``decisionTopicPrefix`` is not given.
DEFAULT_DECISION_PREFIX = "crkafka-sink-decisions"
#: The options besides ``kafka.*``, lower-cased -> Spark's spelling.
SINK_OPTIONS = {
    "kafka.bootstrap.servers": "kafka.bootstrap.servers",
    "topic": "topic",
    "decisiontopicprefix": "decisionTopicPrefix",
    "checkpointlocation": "checkpointLocation",
}


@attrs.frozen
class SinkOptions:
    """The validated options (module docstring)."""

    bootstrap_servers: str
    topic: str | None
    decision_prefix: str
    #: Producer properties by dotted name, typed, sorted.
    kafka_properties: tuple[tuple[str, object], ...]

    def properties(self) -> dict[str, object]:
        return dict(self.kafka_properties)


def _typed(option: str, raw: str) -> object:
    """Step 3's typing: like kafka-python's default of the setting (an unknown name stays a
    string and is refused by the producer rules)."""
    from cr_consumer.kafka.kafka_python.producer import producer_default  # local: the options import cheaply

    default = producer_default(option[len("kafka.") :])
    if isinstance(default, bool):
        return parse_bool(option, raw)
    if isinstance(default, int):
        return parse_int(option, raw, minimum=0)
    return raw


def parse_sink_options(raw: Mapping[str, str]) -> SinkOptions:
    """Steps 1-5; :class:`InvalidOptionError` naming the option."""
    opts = {str(k).lower(): str(v) for k, v in raw.items()}
    props: dict[str, object] = {}
    for name, value in opts.items():
        if name in SINK_OPTIONS:
            continue
        if name.startswith("kafka."):
            props[name[len("kafka.") :]] = _typed(name, value)
        else:
            raise InvalidOptionError(
                name, f"unknown option of the crkafka sink; valid: {', '.join(SINK_OPTIONS.values())}, kafka.*"
            )
    try:
        check_producer_properties(props)
    except PropertyError as exc:
        raise InvalidOptionError("kafka.*" if exc.key is None else f"kafka.{exc.key}", str(exc)) from None
    bootstrap = bootstrap_servers(opts)
    topic = opts.get("topic")
    if topic is not None:
        topic = topic.strip()
        if not TOPIC_RE.fullmatch(topic):
            raise InvalidOptionError("topic", f"{topic!r} is not a valid Kafka topic name")
    prefix = opts.get("decisiontopicprefix", DEFAULT_DECISION_PREFIX).strip()
    # The log's name is the prefix, '-' and a 36-character query id: within Kafka's 249.
    if not TOPIC_RE.fullmatch(prefix) or len(prefix) > 249 - 37:
        raise InvalidOptionError("decisionTopicPrefix", f"{prefix!r} cannot start a Kafka topic name of 249 characters")
    return SinkOptions(bootstrap, topic, prefix, tuple(sorted(props.items())))


@attrs.frozen
class InputColumns:
    """Where each of Spark's Kafka sink columns is in the input (None: absent)."""

    value: int
    key: int | None
    topic: int | None
    partition: int | None
    headers: int | None


_HEADERS = ArrayType(StructType().add("key", StringType(), nullable=True).add("value", BinaryType(), nullable=True))


def _same_headers(kind: DataType) -> bool:
    if not isinstance(kind, ArrayType) or not isinstance(kind.elementType, StructType):
        return False
    element = kind.elementType
    return [(f.name, type(f.dataType)) for f in element.fields] == [("key", StringType), ("value", BinaryType)]


def input_columns(schema: StructType, options: SinkOptions) -> InputColumns:
    """The input schema check of the module docstring; :class:`InvalidOptionError` (naming the
    column) for a missing ``value``, a column of the wrong type, or no topic anywhere."""
    index = {f.name.lower(): (i, f.dataType) for i, f in enumerate(schema.fields)}

    def column(name: str, kinds: tuple[type[DataType], ...], what: str) -> int | None:
        found = index.get(name)
        if found is None:
            return None
        i, kind = found
        if not isinstance(kind, kinds):
            raise InvalidOptionError(f"column {name}", f"must be {what}, got {kind.simpleString()}")
        return i

    value = column("value", (StringType, BinaryType), "string or binary")
    if value is None:
        raise InvalidOptionError("column value", f"is required (input schema: {schema.simpleString()})")
    key = column("key", (StringType, BinaryType), "string or binary")
    topic = None if options.topic is not None else column("topic", (StringType,), "string")
    if options.topic is None and topic is None:
        raise InvalidOptionError("topic", "is required when the input has no topic column")
    partition = column("partition", (IntegerType,), "int")
    headers = None
    if "headers" in index:
        i, kind = index["headers"]
        if not _same_headers(kind):
            raise InvalidOptionError("column headers", f"must be {_HEADERS.simpleString()}, got {kind.simpleString()}")
        headers = i
    return InputColumns(value, key, topic, partition, headers)


__all__ = ["DEFAULT_DECISION_PREFIX", "InputColumns", "SinkOptions", "input_columns", "parse_sink_options"]
