"""Spark's option map -> :class:`SourceOptions`, or :class:`InvalidOptionError` naming the option.

1. The names are lower-cased (:mod:`.names`).
2. Every name is checked: an option of Spark's Kafka source crkafka does not
   offer, or an unknown one, fails (naming the closest valid one); each
   ``kafka.<property>`` is typed (:mod:`.kafka_properties`).
3. The connection options (bootstrap servers, group, coordinator: optional,
   since only a streaming query uses it, and ``members`` and ``regionIndex``,
   which are registered there, need it), the
   subscription (:func:`subscription`: ``subscribe``, a comma-separated list
   of topic names, none twice; ``subscribePattern``, a regular expression the
   group subscribes to; or ``assign``, JSON ``{"topic":[0,1]}``, fixed
   partitions without a group assignment, the group taking the commits only;
   exactly one), the offsets (:mod:`.offset_specs`) and the limits are parsed
   one by one; then the Kafka properties are checked together with the client
   library.

Nothing is built before every option has been checked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from cr_consumer.spark.options.kafka_properties import (
    EXECUTOR_DEFAULT_CLIENT,
    check_properties,
    kafka_defaults,
    parse_client,
    parse_kafka_property,
)
from cr_consumer.spark.options.offset_specs import ending, starting
from cr_consumer.spark.options.source_options import SourceOptions
from cr_consumer.spark.options.values import (
    SPELLING,
    TOPIC_RE,
    UNSUPPORTED,
    InvalidOptionError,
    closest,
    normalised,
    parse_bool,
    parse_int,
    required,
)


def parse_options(raw: Mapping[str, str]) -> SourceOptions:
    """Validate Spark's option map; raise :class:`InvalidOptionError` naming the option."""
    opts = normalised(raw)
    kafka_props = _kafka_properties(opts)
    bootstrap, group_id, prefix, coordinator = _connection(opts)
    topics, pattern, assign = subscription(opts)
    starting_offsets = starting(opts)
    ending_offsets = ending(opts)

    max_offsets = _optional_positive_int(opts, "maxOffsetsPerTrigger")
    min_partitions = _optional_positive_int(opts, "minPartitions")
    fail_on_data_loss = parse_bool("failOnDataLoss", opts.get("failondataloss", "true"))
    include_headers = parse_bool("includeHeaders", opts.get("includeheaders", "false"))
    commit_on_batch_read = parse_bool("commitOnBatchRead", opts.get("commitonbatchread", "false"))
    if commit_on_batch_read and group_id is None:
        raise InvalidOptionError(
            "commitOnBatchRead", "needs kafka.group.id: the group the read's end offsets are committed to"
        )
    for name in ("members", "regionIndex"):
        if coordinator is None and name.lower() in opts:
            raise InvalidOptionError(name, "needs coordinator: the query's group members are registered there")
    members = parse_int("members", opts.get("members", "1"), minimum=1)
    if members > 64:
        raise InvalidOptionError("members", f"at most 64 group members per query, got {members}")
    region_index = parse_int("regionIndex", opts.get("regionindex", "0"), minimum=0)
    metrics_port, metrics_host = _metrics_endpoint(opts)
    client = parse_client(opts.get("kafka.client", EXECUTOR_DEFAULT_CLIENT.value))
    check_properties(bootstrap, client, kafka_props)

    return SourceOptions(
        bootstrap_servers=bootstrap,
        coordinator=coordinator,
        group_id=group_id,
        group_id_prefix=prefix,
        topics=topics,
        pattern=pattern,
        assign=assign,
        starting=starting_offsets,
        ending=ending_offsets,
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


def _kafka_properties(opts: Mapping[str, str]) -> dict[str, object]:
    """Check every option name (step 2); the typed ``kafka.<property>`` options."""
    defaults = kafka_defaults()
    kafka_props: dict[str, object] = {}
    for name, value in opts.items():
        if name in ("kafka.bootstrap.servers", "kafka.group.id", "kafka.client"):
            continue
        if name in UNSUPPORTED:
            raise InvalidOptionError(
                name, f"is an option of Spark's Kafka source that crkafka does not offer: {UNSUPPORTED[name]}"
            )
        if name.startswith("kafka."):
            key, parsed = parse_kafka_property(name, value, defaults)
            kafka_props[key] = parsed
        elif name not in SPELLING:
            raise InvalidOptionError(name, f"unknown option; did you mean {closest(name)}?")
    return kafka_props


def bootstrap_servers(opts: Mapping[str, str]) -> str:
    """``kafka.bootstrap.servers`` of the lower-cased option map (the source's and the sink's)."""
    bootstrap = required(opts, "kafka.bootstrap.servers")
    for server in bootstrap.split(","):
        if not re.fullmatch(r"\s*[^\s:,]+:\d{1,5}\s*", server):
            raise InvalidOptionError("kafka.bootstrap.servers", f"expected host:port[,host:port...], got {bootstrap!r}")
    return bootstrap


def _connection(opts: Mapping[str, str]) -> tuple[str, str | None, str, str | None]:
    """(bootstrap servers, group id or None, group id prefix, coordinator endpoint or None)."""
    bootstrap = bootstrap_servers(opts)
    group_id = None
    if "kafka.group.id" in opts:
        group_id = required(opts, "kafka.group.id")
    prefix = opts.get("groupidprefix", "crkafka").strip()
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,200}", prefix):
        raise InvalidOptionError("groupIdPrefix", f"expected letters, digits, '.', '_' or '-', got {prefix!r}")
    if "coordinator" not in opts:
        return bootstrap, group_id, prefix, None
    coordinator = required(opts, "coordinator")
    if not re.fullmatch(r"(tcp|ipc|inproc)://\S+", coordinator):
        raise InvalidOptionError(
            "coordinator", f"expected a ZeroMQ endpoint like tcp://127.0.0.1:5570, got {coordinator!r}"
        )
    return bootstrap, group_id, prefix, coordinator


def _optional_positive_int(opts: Mapping[str, str], name: str) -> int | None:
    """The option ``name`` (Spark's spelling) as an int >= 1; None when not given."""
    key = name.lower()
    if key not in opts:
        return None
    return parse_int(name, opts[key], minimum=1)


def _metrics_endpoint(opts: Mapping[str, str]) -> tuple[int | None, str]:
    """(metrics port or None, metrics host)."""
    metrics_port = None
    if "metricsport" in opts:
        metrics_port = parse_int("metricsPort", opts["metricsport"], minimum=0)
        if metrics_port > 65535:
            raise InvalidOptionError("metricsPort", f"expected a port 0..65535, got {metrics_port}")
    metrics_host = opts.get("metricshost", "127.0.0.1").strip()
    if not metrics_host or any(c.isspace() for c in metrics_host):
        raise InvalidOptionError("metricsHost", f"expected a host name or address, got {opts['metricshost']!r}")
    return metrics_port, metrics_host


#: (topics, pattern, assigned partitions): one of them is given, the others empty.
Subscription = tuple[tuple[str, ...], str | None, tuple[tuple[str, int], ...]]


def subscription(opts: Mapping[str, str]) -> Subscription:
    """The subscription of the lower-cased option map ``opts``."""
    given = [name for name in ("subscribe", "subscribepattern", "assign") if name in opts]
    if len(given) != 1:
        raise InvalidOptionError("subscribe", "exactly one of subscribe, subscribePattern and assign must be given")
    if "subscribe" in opts:
        return _subscribe(opts["subscribe"]), None, ()
    if "subscribepattern" in opts:
        return (), _subscribe_pattern(opts["subscribepattern"]), ()
    return (), None, _assign(opts["assign"])


def _subscribe(value: str) -> tuple[str, ...]:
    topics = tuple(t.strip() for t in value.split(",") if t.strip())
    if not topics:
        raise InvalidOptionError("subscribe", "names no topic")
    for topic in topics:
        if not TOPIC_RE.fullmatch(topic):
            raise InvalidOptionError("subscribe", f"{topic!r} is not a valid Kafka topic name")
    if len(set(topics)) != len(topics):
        raise InvalidOptionError("subscribe", f"lists a topic twice: {value!r}")
    return topics


def _subscribe_pattern(pattern: str) -> str:
    if not pattern:
        raise InvalidOptionError("subscribePattern", "is empty")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise InvalidOptionError("subscribePattern", f"is not a valid regular expression: {exc}") from None
    return pattern


def _assign(value: str) -> tuple[tuple[str, int], ...]:
    try:
        doc = json.loads(value)
    except ValueError as exc:
        raise InvalidOptionError("assign", f'expected JSON like {{"topic":[0,1]}}: {exc}') from None
    if not isinstance(doc, dict) or not doc:
        raise InvalidOptionError("assign", 'expected a non-empty JSON object like {"topic":[0,1]}')
    tps = set()
    for topic, parts in doc.items():
        if not TOPIC_RE.fullmatch(str(topic)) or not isinstance(parts, list) or not parts:
            raise InvalidOptionError("assign", f"topic {topic!r}: expected a valid topic name and a list of partitions")
        for part in parts:
            if isinstance(part, bool) or not isinstance(part, int) or part < 0:
                raise InvalidOptionError("assign", f"{topic}: partition {part!r} is not a partition number")
            tps.add((topic, part))
    return tuple(sorted(tps))
