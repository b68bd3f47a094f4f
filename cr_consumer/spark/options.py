"""Options of the ``crkafka`` Spark source: Spark's Kafka source names, validated at ``load()``.

Spark hands a Python data source its options as a case-insensitive map
(pyspark lower-cases the names before the source sees them, so an error
names the option lower-cased). :func:`parse_options` turns the map into a
frozen :class:`SourceOptions`, or raises :class:`InvalidOptionError` naming
the option and what to change; ``DataSource.schema()`` calls it, so a bad
option fails ``load()`` and never reaches a running query.

Spark's names (``format("kafka")``), see docs/spark.md for the table::

    kafka.bootstrap.servers      required   host:port[,host:port...]
    subscribe | subscribePattern | assign   exactly one: topic list, regular
                                            expression, or JSON {"topic":[0,1]}
    startingOffsets              latest (*) earliest | latest | committed |
                                            JSON {"topic":{"0":23,"1":-2}} (-2 earliest, -1 latest)
    startingTimestamp            -          epoch ms (or ISO-8601): every partition
    startingOffsetsByTimestamp   -          JSON {"topic":{"0":<epoch ms>}}
    endingOffsets                latest     batch queries only: latest | JSON (-1 latest)
    commitOnBatchRead            false      batch queries only: commit each partition's end to
                                            kafka.group.id once its task has read it
    maxOffsetsPerTrigger         -          records per micro-batch (all partitions)
    minPartitions                -          Spark tasks per batch at least (ranges split)
    failOnDataLoss               true       fail when a range is no longer on the broker
    includeHeaders               false      add the headers column
    kafka.group.id               -          the consumer group (default: groupIdPrefix-<query id>)
    groupIdPrefix                crkafka    prefix of the generated group id
    kafka.<consumer property>    -          passed to every consumer by its dotted name
    kafka.client                 librdkafka the executors' Kafka library: librdkafka (confluent-kafka,
                                            the ``librdkafka`` extra) or kafka-python

(*) a batch read (``spark.read``) starts at earliest by default, as in Spark.

crkafka's own::

    coordinator                  required   the coordinator endpoint, e.g. tcp://127.0.0.1:5570
    members                      1          group members in the driver (hold partitions, commit)
    regionIndex                  0          the region index registered with the coordinator
    metricsPort / metricsHost    - / 127.0.0.1   Prometheus /metrics of the source runner

Earlier names, still accepted as documented aliases: ``group.id`` (=
``kafka.group.id``), ``startPosition`` ``beginning|end|default|time`` (=
``startingOffsets`` ``earliest|latest|committed``, ``time`` with ``startTime``
= ``startingTimestamp``), ``maxRecordsPerBatch`` (= ``maxOffsetsPerTrigger``).
An unknown option fails, naming the closest valid one.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import enum
import json
import re
from collections.abc import Mapping

import attrs

from cr_consumer.kafka.client import ClientKind
from cr_consumer.kafka.properties import redacted_repr

#: Kafka consumer properties this source owns (as Spark's Kafka source does);
#: setting them would break the exactly-once contract or duplicate an option.
_RESERVED_KAFKA = {
    "enable.auto.commit": "offsets are committed by the source when Spark commits a batch",
    "auto.commit.interval.ms": "offsets are committed by the source when Spark commits a batch",
    "auto.offset.reset": "use startingOffsets (earliest, latest, committed or JSON per partition)",
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
        raise InvalidOptionError(option, f"unknown Kafka consumer property {dotted!r} (closest option: {_closest(option)})")
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




class StartKind(enum.Enum):
    """Where a partition starts the first time the query sees it (``startingOffsets`` ...)."""

    EARLIEST = "earliest"
    LATEST = "latest"
    #: crkafka's addition: the group's committed offset; a partition without one starts at earliest.
    COMMITTED = "committed"
    #: JSON per partition: an offset, -2 (earliest) or -1 (latest); partitions not listed start at latest.
    SPECIFIC = "specific"
    #: ``startingTimestamp`` / ``startingOffsetsByTimestamp``: the first offset at or after the
    #: timestamp; a partition with no record that late starts at latest.
    TIMESTAMP = "timestamp"


#: In a JSON offset map: the partition's earliest / latest offset (Spark's values).
EARLIEST_OFFSET = -2
LATEST_OFFSET = -1

PartitionValues = tuple[tuple[tuple[str, int], int], ...]


@attrs.frozen
class StartingOffsets:
    kind: StartKind = StartKind.LATEST
    #: SPECIFIC: ((topic, partition), offset) pairs; TIMESTAMP: ((topic, partition), epoch ms)
    #: pairs, or empty with ``timestamp_ms`` for every partition.
    values: PartitionValues = ()
    timestamp_ms: int | None = None

    def value_of(self, topic: str, partition: int) -> int | None:
        return dict(self.values).get((topic, partition), self.timestamp_ms)


@attrs.frozen
class SourceOptions:
    """The validated options of one ``crkafka`` source (picklable, no live objects)."""

    bootstrap_servers: str
    coordinator: str
    #: The consumer group (kafka.group.id); None: ``<group_id_prefix>-<query id>``, fixed per checkpoint.
    group_id: str | None = None
    group_id_prefix: str = "crkafka"
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    #: ``assign``: fixed partitions, no group assignment (the group is used for commits only).
    assign: tuple[tuple[str, int], ...] = ()
    #: None: not given (streaming starts at latest, a batch read at earliest, as in Spark).
    starting: StartingOffsets | None = None
    #: Batch queries: ((topic, partition), offset or -1) pairs; empty: latest everywhere.
    ending: PartitionValues = ()
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    #: Batch reads: commit each partition's end to the group once read (``commitOnBatchRead``).
    commit_on_batch_read: bool = False
    include_headers: bool = False
    members: int = 1
    region_index: int = 0
    #: Prometheus /metrics of the source runner (None: not served).
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    #: ``kafka.client``: the Kafka library of the executors' range reads.
    client: ClientKind = ClientKind.LIBRDKAFKA
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

    def groupless_config(self, client_id: str) -> dict:
        """kafka-python keyword arguments of a consumer outside the query's group
        (assign + seek: the executors' range reads, the planner's watermark
        probe): no group, no auto commit, and no offset reset, so that a
        missing offset is an error the caller handles, never a silent jump."""
        config = self.kafka_config
        config.pop("group_instance_id", None)
        config.update(bootstrap_servers=self.bootstrap_servers.split(","), group_id=None,
                      enable_auto_commit=False, auto_offset_reset="none", client_id=client_id)
        return config

    def starting_or(self, default: StartKind) -> StartingOffsets:
        return self.starting if self.starting is not None else StartingOffsets(default)

    def group_for(self, query: str) -> str:
        """The consumer group of the query with id ``query``."""
        return self.group_id if self.group_id is not None else f"{self.group_id_prefix}-{query or 'noquery'}"

    def describe_subscription(self) -> str:
        if self.assign:
            return f"assign {[f'{t}:{p}' for t, p in self.assign]}"
        return f"pattern {self.pattern!r}" if self.pattern is not None else f"topics {list(self.topics)}"


#: Every option by its lower-cased name -> its spelling (kafka.* aside).
SPELLING = {name.lower(): name for name in (
    "kafka.bootstrap.servers", "subscribe", "subscribePattern", "assign", "startingOffsets", "startingTimestamp",
    "startingOffsetsByTimestamp", "endingOffsets", "commitOnBatchRead", "maxOffsetsPerTrigger", "minPartitions", "failOnDataLoss",
    "includeHeaders", "kafka.group.id", "groupIdPrefix", "coordinator", "members", "regionIndex", "metricsPort",
    "metricsHost", "kafka.client",
)}

#: Earlier crkafka names -> the option they stand for (documented aliases).
ALIASES = {"group.id": "kafka.group.id", "startposition": "startingOffsets", "starttime": "startingTimestamp",
           "maxrecordsperbatch": "maxOffsetsPerTrigger"}

#: Options of Spark's Kafka source that crkafka does not offer, and why.
UNSUPPORTED = {
    "endingtimestamp": "batch reads end at endingOffsets",
    "endingoffsetsbytimestamp": "batch reads end at endingOffsets",
    "startingoffsetsbytimestampstrategy": "a partition with no record at or after the timestamp starts at latest",
    "minoffsetspertrigger": "every trigger reads what is available (up to maxOffsetsPerTrigger)",
    "maxtriggerdelay": "every trigger reads what is available (up to maxOffsetsPerTrigger)",
    "kafkaconsumer.polltimeoutms": "executors bound each range read themselves",
    "fetchoffset.numretries": "end offsets are read from a fetch's high watermark",
    "fetchoffset.retryintervalms": "end offsets are read from a fetch's high watermark",
    "maxrecordsperpartition": "use maxOffsetsPerTrigger",
}

_TOPIC_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")


def _closest(name: str) -> str:
    candidates = list(SPELLING) + list(ALIASES)
    match = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    if not match and name.startswith("kafka."):
        return "kafka.<a Kafka consumer property>"
    if not match:
        return "none close; valid: " + ", ".join(sorted(SPELLING.values()))
    return SPELLING.get(match[0], match[0]) if match[0] not in ALIASES else ALIASES[match[0]]


def _required(opts: Mapping[str, str], name: str) -> str:
    value = opts.get(name.lower())
    if value is None or not str(value).strip():
        raise InvalidOptionError(name, "is required")
    return str(value).strip()


def _json_map(option: str, raw: str, *, minimum: int) -> PartitionValues:
    """``{"topic": {"0": value, ...}, ...}`` as sorted ((topic, partition), value) pairs."""
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise InvalidOptionError(option, f'expected JSON like {{"topic":{{"0":23}}}}: {exc}') from None
    if not isinstance(doc, dict) or not doc:
        raise InvalidOptionError(option, 'expected a non-empty JSON object like {"topic":{"0":23}}')
    out = {}
    for topic, parts in doc.items():
        if not _TOPIC_RE.fullmatch(str(topic)) or not isinstance(parts, dict) or not parts:
            raise InvalidOptionError(option, f"topic {topic!r}: expected a valid topic name and an object of partitions")
        for part, value in parts.items():
            if not str(part).isdigit() or isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise InvalidOptionError(option, f"{topic}:{part} = {value!r}: expected a partition number and an "
                                                 f"integer >= {minimum}")
            out[(topic, int(part))] = value
    return tuple(sorted(out.items()))


def _subscription(opts: Mapping[str, str]) -> tuple[tuple[str, ...], str | None, tuple[tuple[str, int], ...]]:
    given = [name for name in ("subscribe", "subscribepattern", "assign") if name in opts]
    if len(given) != 1:
        raise InvalidOptionError("subscribe", "exactly one of subscribe, subscribePattern and assign must be given")
    if "subscribe" in opts:
        topics = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not topics:
            raise InvalidOptionError("subscribe", "names no topic")
        for topic in topics:
            if not _TOPIC_RE.fullmatch(topic):
                raise InvalidOptionError("subscribe", f"{topic!r} is not a valid Kafka topic name")
        if len(set(topics)) != len(topics):
            raise InvalidOptionError("subscribe", f"lists a topic twice: {opts['subscribe']!r}")
        return topics, None, ()
    if "subscribepattern" in opts:
        pattern = opts["subscribepattern"]
        if not pattern:
            raise InvalidOptionError("subscribePattern", "is empty")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise InvalidOptionError("subscribePattern", f"is not a valid regular expression: {exc}") from None
        return (), pattern, ()
    try:
        doc = json.loads(opts["assign"])
    except ValueError as exc:
        raise InvalidOptionError("assign", f'expected JSON like {{"topic":[0,1]}}: {exc}') from None
    if not isinstance(doc, dict) or not doc:
        raise InvalidOptionError("assign", 'expected a non-empty JSON object like {"topic":[0,1]}')
    tps = set()
    for topic, parts in doc.items():
        if not _TOPIC_RE.fullmatch(str(topic)) or not isinstance(parts, list) or not parts:
            raise InvalidOptionError("assign", f"topic {topic!r}: expected a valid topic name and a list of partitions")
        for part in parts:
            if isinstance(part, bool) or not isinstance(part, int) or part < 0:
                raise InvalidOptionError("assign", f"{topic}: partition {part!r} is not a partition number")
            tps.add((topic, part))
    return (), None, tuple(sorted(tps))


def _starting(opts: Mapping[str, str]) -> StartingOffsets | None:
    given = [n for n in ("startingoffsets", "startingtimestamp", "startingoffsetsbytimestamp", "startposition")
             if n in opts]
    if len(given) > 1:
        names = [ALIASES.get(n) and f"{n} (alias of {ALIASES[n]})" or SPELLING[n] for n in given]
        raise InvalidOptionError(SPELLING.get(given[1], given[1]), f"give only one of {', '.join(names)}")
    if "starttime" in opts and opts.get("startposition", "").strip().lower() != "time":
        raise InvalidOptionError("startTime", "is an alias of startingTimestamp used with startPosition=time; "
                                              "give startingTimestamp instead")
    if "startposition" in opts:  # the earlier name
        raw = opts["startposition"].strip().lower()
        if raw == "time":
            return StartingOffsets(StartKind.TIMESTAMP, timestamp_ms=_parse_time("startTime", _required(opts, "startTime")))
        mapped = {"beginning": StartKind.EARLIEST, "end": StartKind.LATEST, "default": StartKind.COMMITTED}.get(raw)
        if mapped is None:
            raise InvalidOptionError("startPosition", f"expected beginning, end, default or time, got "
                                                      f"{opts['startposition']!r} (the option is now startingOffsets)")
        return StartingOffsets(mapped)
    if "startingtimestamp" in opts:
        return StartingOffsets(StartKind.TIMESTAMP, timestamp_ms=_parse_time("startingTimestamp", opts["startingtimestamp"]))
    if "startingoffsetsbytimestamp" in opts:
        return StartingOffsets(StartKind.TIMESTAMP, values=_json_map("startingOffsetsByTimestamp",
                                                                     opts["startingoffsetsbytimestamp"], minimum=0))
    if "startingoffsets" not in opts:
        return None
    raw = opts["startingoffsets"].strip()
    kinds = {k.value: k for k in (StartKind.EARLIEST, StartKind.LATEST, StartKind.COMMITTED)}
    if raw.lower() in kinds:
        return StartingOffsets(kinds[raw.lower()])
    if not raw.startswith("{"):
        raise InvalidOptionError("startingOffsets", f"expected earliest, latest, committed or JSON per partition, "
                                                    f"got {raw!r}")
    return StartingOffsets(StartKind.SPECIFIC, values=_json_map("startingOffsets", raw, minimum=EARLIEST_OFFSET))


def _ending(opts: Mapping[str, str]) -> PartitionValues:
    raw = opts.get("endingoffsets", "latest").strip()
    if raw.lower() == "latest":
        return ()
    if not raw.startswith("{"):
        raise InvalidOptionError("endingOffsets", f"expected latest or JSON per partition, got {raw!r}")
    values = _json_map("endingOffsets", raw, minimum=LATEST_OFFSET)
    return values


#: The executors' Kafka library when ``kafka.client`` is not given (the faster one
#: in bench/bench_spark.py; docs/spark.md has the figures).
DEFAULT_CLIENT = ClientKind.LIBRDKAFKA


def _client(raw: str) -> ClientKind:
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


def parse_options(raw: Mapping[str, str]) -> SourceOptions:
    """Validate Spark's option map; raise :class:`InvalidOptionError` naming the option."""
    opts = {str(k).lower(): ("" if v is None else str(v)) for k, v in dict(raw).items()}
    if "group.id" in opts:
        if "kafka.group.id" in opts:
            raise InvalidOptionError("group.id", "is an alias of kafka.group.id; give only kafka.group.id")
        opts["kafka.group.id"] = opts.pop("group.id")
    if "maxrecordsperbatch" in opts:
        if "maxoffsetspertrigger" in opts:
            raise InvalidOptionError("maxRecordsPerBatch", "is an alias of maxOffsetsPerTrigger; give only that")
        opts["maxoffsetspertrigger"] = opts.pop("maxrecordsperbatch")
    defaults = _kafka_defaults()
    kafka_props: dict[str, object] = {}
    for name, value in opts.items():
        if name in ("kafka.bootstrap.servers", "kafka.group.id", "kafka.client"):
            continue
        if name in UNSUPPORTED:
            raise InvalidOptionError(name, f"is an option of Spark's Kafka source that crkafka does not offer: "
                                           f"{UNSUPPORTED[name]}")
        if name.startswith("kafka."):
            key, parsed = _parse_kafka_property(name, value, defaults)
            kafka_props[key] = parsed
        elif name not in SPELLING and name not in ("startposition", "starttime"):
            raise InvalidOptionError(name, f"unknown option; did you mean {_closest(name)}?")

    bootstrap = _required(opts, "kafka.bootstrap.servers")
    for server in bootstrap.split(","):
        if not re.fullmatch(r"\s*[^\s:,]+:\d{1,5}\s*", server):
            raise InvalidOptionError("kafka.bootstrap.servers", f"expected host:port[,host:port...], got {bootstrap!r}")
    group_id = None
    if "kafka.group.id" in opts:
        group_id = _required(opts, "kafka.group.id")
    prefix = opts.get("groupidprefix", "crkafka").strip()
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,200}", prefix):
        raise InvalidOptionError("groupIdPrefix", f"expected letters, digits, '.', '_' or '-', got {prefix!r}")
    coordinator = _required(opts, "coordinator")
    if not re.fullmatch(r"(tcp|ipc|inproc)://\S+", coordinator):
        raise InvalidOptionError("coordinator", f"expected a ZeroMQ endpoint like tcp://127.0.0.1:5570, got {coordinator!r}")
    topics, pattern, assign = _subscription(opts)
    starting = _starting(opts)
    ending = _ending(opts)

    max_offsets = None
    if "maxoffsetspertrigger" in opts:
        max_offsets = _parse_int("maxOffsetsPerTrigger", opts["maxoffsetspertrigger"], minimum=1)
    min_partitions = None
    if "minpartitions" in opts:
        min_partitions = _parse_int("minPartitions", opts["minpartitions"], minimum=1)
    fail_on_data_loss = _parse_bool("failOnDataLoss", opts.get("failondataloss", "true"))
    include_headers = _parse_bool("includeHeaders", opts.get("includeheaders", "false"))
    commit_on_batch_read = _parse_bool("commitOnBatchRead", opts.get("commitonbatchread", "false"))
    if commit_on_batch_read and group_id is None:
        raise InvalidOptionError("commitOnBatchRead", "needs kafka.group.id: the group the read's end offsets are "
                                                      "committed to")
    members = _parse_int("members", opts.get("members", "1"), minimum=1)
    if members > 64:
        raise InvalidOptionError("members", f"at most 64 group members per query, got {members}")
    region_index = _parse_int("regionIndex", opts.get("regionindex", "0"), minimum=0)
    metrics_port = None
    if "metricsport" in opts:
        metrics_port = _parse_int("metricsPort", opts["metricsport"], minimum=0)
        if metrics_port > 65535:
            raise InvalidOptionError("metricsPort", f"expected a port 0..65535, got {metrics_port}")
    metrics_host = opts.get("metricshost", "127.0.0.1").strip()
    if not metrics_host or any(c.isspace() for c in metrics_host):
        raise InvalidOptionError("metricsHost", f"expected a host name or address, got {opts['metricshost']!r}")
    client = _client(opts.get("kafka.client", DEFAULT_CLIENT.value))
    if client is ClientKind.LIBRDKAFKA and kafka_props:
        from cr_consumer.spark.librdkafka_range import config_error

        problem = config_error(bootstrap, kafka_props)
        if problem is not None:
            raise InvalidOptionError("kafka.*", f"the executors' librdkafka consumer refuses these properties: "
                                                f"{problem} (set kafka.client=kafka-python to use kafka-python's)")
    session_ms = kafka_props.get("session.timeout.ms")
    heartbeat_ms = kafka_props.get("heartbeat.interval.ms")
    if isinstance(heartbeat_ms, int) and heartbeat_ms >= (session_ms if isinstance(session_ms, int) else 10_000):
        raise InvalidOptionError("kafka.*", f"kafka.heartbeat.interval.ms ({heartbeat_ms}) must be lower than "
                                            f"kafka.session.timeout.ms ({session_ms or 10_000})")

    return SourceOptions(
        bootstrap_servers=bootstrap,
        coordinator=coordinator,
        group_id=group_id,
        group_id_prefix=prefix,
        topics=topics,
        pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        max_offsets_per_trigger=max_offsets,
        min_partitions=min_partitions,
        fail_on_data_loss=fail_on_data_loss,
        commit_on_batch_read=commit_on_batch_read,
        include_headers=include_headers,
        members=members,
        region_index=region_index,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        client=client,
        kafka_properties=tuple(sorted(kafka_props.items())),
    )
