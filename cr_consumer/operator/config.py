"""Configuration of one consumer operator, validated when it is built.

``OperatorConfig`` is a frozen attrs class. Every field is checked at
construction; a wrong or contradictory setting raises :class:`ConfigError`
naming the setting and what to change, so a bad job fails at start-up rather
than in the middle of a region cycle.

The Kafka client is chosen by ``client``: ``"kafka-python"`` (the default, pure
Python) or ``"librdkafka"`` (confluent-kafka, the ``[librdkafka]`` extra, about
twice the throughput); both sit behind ``cr_consumer.kafka.client.KafkaClient``.

Kafka consumer properties that have no field of their own are passed through
by their standard dotted name (``"fetch.max.bytes"``, ``"session.timeout.ms"``)
in ``consumer_properties``; :meth:`OperatorConfig.client_properties` turns the
whole config into the client's dotted properties (each client maps the few
names its library spells otherwise) and derives the timeouts the way the
reference design does:

* ``max.poll.interval.ms`` >= 3 x max(drain timeout, reset timeout), so a
  member that stops polling for a drain or a reset is not evicted;
* ``metadata.max.age.ms`` <= 2000, so new partitions (pattern subscription)
  are seen quickly;
* ``fetch.max.bytes`` defaults to 1 MB (Kafka: 50 MB) with kafka-python, so no
  fetch response takes long to decode while a drain waits (see
  DEFAULT_FETCH_MAX_BYTES; librdkafka decodes outside the GIL and keeps its own
  default);
* ``enable.auto.commit`` is always false (the drain commits);
* ``crkafka.filter.aborted`` (the project's own property, with
  ``isolation.level=read_committed``) makes the source read committed records
  itself, for brokers whose ``read_committed`` cannot be trusted
  (:attr:`OperatorConfig.filter_aborted`); it is never given to the client,
  which then reads ``read_uncommitted``;
* eager assignors (range, round robin), or the cooperative sticky assignor
  alone (``partition.assignment.strategy=cooperative-sticky``, the switch for
  incremental rebalancing: see :attr:`OperatorConfig.cooperative` and
  rebalance.py); eager and cooperative assignors are never mixed.

The consumer properties are checked by the rules the Spark source and both
clients share (:mod:`cr_consumer.kafka.property_rules`), with the names the
operator sets itself (:data:`RESERVED`); each default derived here says which
failure it prevents. The start position is the type the Spark source uses too
(:mod:`cr_consumer.kafka.start_position`): EARLIEST, LATEST, COMMITTED (the
default) or TIMESTAMP with one time for every partition
(``StartPosition.at_time(ms)``); a position of one partition's offset
(SPECIFIC) means nothing to a group subscription and is refused. The
settings' enums and their converters (a setting given as a string,
``"earliest"``, ``"kafka-python"``, becomes its type) come first.
"""

from __future__ import annotations

import enum
import importlib.util
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import attrs

from coordinator.protocol.common.endpoints import parse_endpoints
from coordinator.protocol.common.gc_policy import GcPolicy
from cr_consumer.kafka.client import ClientKind
from cr_consumer.kafka.properties import redacted_repr
from cr_consumer.kafka.property_rules import (
    FILTER_ABORTED,
    PropertyError,
    assignor_names,
    check_properties,
    default_heartbeat_ms,
    filter_aborted,
)
from cr_consumer.kafka.start_position import StartKind, StartPosition

E = TypeVar("E", bound=enum.Enum)

#: A key or value deserialiser (``OperatorConfig.key_deserializer``): raw bytes
#: (None for null) to the user's type, hence Any.
Deserializer = Callable[[bytes | None], Any]


class ConfigError(ValueError):
    """A setting is unknown, out of range or contradicts another one."""


class RegionMode(enum.Enum):
    PERIODIC = "periodic"
    OPERATOR_DRIVEN = "operator_driven"


class MalformedPolicy(enum.Enum):
    """What to do with a record the deserialiser cannot decode."""

    SKIP = "skip"  # count it (nDroppedMalformedMessages) and go on
    FAIL = "fail"  # fail the operator, naming topic/partition/offset
    #: hand it downstream undecoded, as an ``Undecodable`` item (process_thread.py), for a
    #: pipeline's dead-letter sink (cr_consumer/runtime/pipeline/dead_letter.py)
    DEAD_LETTER = "dead_letter"


def enum_value(cls: type[E], value: object) -> E:
    """``value`` as a member of ``cls``: the member itself, or its value as a string
    (case and surrounding blanks ignored); ConfigError naming the choices otherwise."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        try:
            return cls(value.strip().lower())
        except ValueError:
            pass
    choices = ", ".join(m.value for m in cls)
    raise ConfigError(f"{cls.__name__}: {value!r} is not one of {choices}")


def as_start_position(value: object) -> StartPosition:
    """A StartPosition as it is, or a StartKind (or its value as a string) without values."""
    if isinstance(value, StartPosition):
        return value
    return StartPosition(enum_value(StartKind, value))


def as_region_mode(value: object) -> RegionMode:
    return enum_value(RegionMode, value)


def as_malformed_policy(value: object) -> MalformedPolicy:
    return enum_value(MalformedPolicy, value)


def as_gc_policy(value: object) -> GcPolicy:
    return enum_value(GcPolicy, value)


def as_client_kind(value: object) -> ClientKind:
    """The Kafka client library; ``kafka_python`` and ``KafkaPython`` name kafka-python too."""
    if isinstance(value, str) and value.strip().lower().replace("_", "-") in ("kafka-python", "kafkapython"):
        return ClientKind.KAFKA_PYTHON
    return enum_value(ClientKind, value)


def as_topics(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """One topic name or several as a tuple (none: empty)."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(value)


def as_properties(value: Mapping[str, object]) -> dict[str, Any]:
    """Kafka consumer properties by their dotted names, copied (the caller's
    mapping may change later). Any: a property's value is whatever type the
    Kafka client takes for it (str, int, bool, a list of assignors)."""
    return dict(value)


#: The extra that installs the librdkafka client (named in the error when it is missing).
LIBRDKAFKA_EXTRA = "cr-consumer[librdkafka]"

#: Upper bound of the operator's durations (a day): a larger drain, reset,
#: commit or coordinator timeout is a unit error or ``inf``, which would make a
#: wait that must end (a drain, a reset, a coordinator call) effectively unbounded.
MAX_DURATION_S = 86_400.0

#: Kafka properties that have a field of their own: setting them through
#: consumer_properties is an error.
RESERVED = {
    "bootstrap.servers": "use OperatorConfig(bootstrap_servers=...)",
    "group.id": "use OperatorConfig(group_id=...)",
    "max.poll.records": "use OperatorConfig(max_poll_records=...)",
}

#: Cap on metadata.max.age.ms: a newly created topic matching the pattern (or
#: new partitions) must be seen within ~2 s, as in the reference.
METADATA_MAX_AGE_CAP_MS = 2000
DEFAULT_SESSION_TIMEOUT_MS = 20000
#: fetch.max.wait.ms unless set: a fetch at the log end waits this long in the
#: broker, and a partition seeked by a reset is not fetched again until that
#: fetch returns; Kafka's 500 ms default would add up to 500 ms to every reset.
DEFAULT_FETCH_MAX_WAIT_MS = 100
#: fetch.max.bytes unless set: kafka-python decodes a fetch response on its IO
#: thread, holding the GIL ~2-3 ms per MB, and a drain's commit response (or
#: the poll the drain waits for) queues behind it. With Kafka's 50 MB default
#: a broker that ignores max.partition.fetch.bytes (tansu) answers with ~5 MB
#: responses whose decoding stalled drains for 10-25 ms (the drain-latency
#: p99). With 1 MB the drain p99 is ~12 ms at the same throughput (BENCHMARKS.md).
DEFAULT_FETCH_MAX_BYTES = 1024 * 1024


@attrs.frozen(kw_only=True)
class OperatorConfig:
    bootstrap_servers: str
    group_id: str
    operator_name: str
    #: Coordinator endpoint (tcp://host:port); None runs with control variables
    #: and checkpoint merges kept in this process (one member only).
    coordinator: str | None = None
    topics: tuple[str, ...] = attrs.field(default=(), converter=as_topics)
    pattern: str | None = None
    region_index: int = 0
    #: Where a partition starts the first time the job sees it (module docstring);
    #: a StartPosition, or a StartKind or its value ("earliest") without values.
    start_position: StartPosition = attrs.field(default=StartPosition(StartKind.COMMITTED), converter=as_start_position)
    region_mode: RegionMode = attrs.field(default=RegionMode.PERIODIC, converter=as_region_mode)
    trigger_count: int | None = None
    max_poll_records: int = 500
    #: Records the message queue holds; default 100 x max_poll_records.
    queue_capacity: int | None = None
    drain_timeout_s: float = 180.0
    reset_timeout_s: float = 20.0
    key_deserializer: Deserializer | None = None
    value_deserializer: Deserializer | None = None
    on_malformed: MalformedPolicy = attrs.field(default=MalformedPolicy.SKIP, converter=as_malformed_policy)
    #: Standalone use (no region runtime): drain and commit this often.
    commit_period_s: float = 5.0
    #: Timeout of one coordinator request (the client retries inside it).
    coordinator_timeout_s: float = 10.0
    #: Shown with secret values redacted (cr_consumer.kafka.properties.is_secret).
    consumer_properties: Mapping[str, Any] = attrs.field(factory=dict, converter=as_properties, repr=redacted_repr)
    #: What start() does with the cyclic garbage collector (coordinator.protocol.common.gc_policy):
    #: "freeze" keeps the start-up heap out of its scans; "none" leaves it to the program.
    gc_policy: GcPolicy = attrs.field(default=GcPolicy.FREEZE, converter=as_gc_policy)
    #: The Kafka client library: "kafka-python" (pure Python, always installed) or
    #: "librdkafka" (confluent-kafka: the [librdkafka] extra; ~2x the throughput).
    client: ClientKind = attrs.field(default=ClientKind.KAFKA_PYTHON, converter=as_client_kind)

    def __attrs_post_init__(self) -> None:
        self._check_identity()
        self._check_client()
        self._check_subscription()
        self._check_start()
        self._check_region()
        self._check_numbers()
        self._check_properties()

    # -- validation -------------------------------------------------------
    def _check_identity(self) -> None:
        for name in ("bootstrap_servers", "group_id", "operator_name"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise ConfigError(f"{name} must be a non-empty string, got {value!r}")
        if self.coordinator is not None:
            try:
                parse_endpoints(self.coordinator)
            except ValueError as exc:
                raise ConfigError(f"coordinator: {exc}") from None
        if not isinstance(self.region_index, int) or self.region_index < 0:
            raise ConfigError(f"region_index must be an integer >= 0, got {self.region_index!r}")

    def _check_client(self) -> None:
        if self.client is ClientKind.LIBRDKAFKA and importlib.util.find_spec("confluent_kafka") is None:
            raise ConfigError(
                f"client librdkafka needs the confluent-kafka package: pip install "
                f"'{LIBRDKAFKA_EXTRA}' (or use client='kafka-python')"
            )

    def _check_subscription(self) -> None:
        if self.topics and self.pattern:
            raise ConfigError("give either topics or pattern, not both")
        if not self.topics and not self.pattern:
            raise ConfigError("no subscription: give topics=[...] or pattern='regex'")
        for t in self.topics:
            if not isinstance(t, str) or not t:
                raise ConfigError(f"topics must be non-empty strings, got {t!r}")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ConfigError(f"pattern {self.pattern!r} is not a valid regular expression: {exc}") from None

    def _check_start(self) -> None:
        pos = self.start_position
        if pos.kind is StartKind.SPECIFIC or pos.values:
            raise ConfigError(
                f"start_position {pos.kind.value} per partition is not supported: an offset or time belongs to one "
                "partition, and a group subscription spans many partitions whose assignment changes; use "
                "earliest, latest, committed or StartPosition.at_time(ms)"
            )
        if pos.kind is StartKind.TIMESTAMP:
            stamp = pos.timestamp_ms
            if not isinstance(stamp, int) or isinstance(stamp, bool) or stamp < 0:
                raise ConfigError(
                    "start_position timestamp needs a time: StartPosition.at_time(ms), milliseconds since "
                    f"the epoch (int >= 0), got {stamp!r}"
                )
        elif pos.timestamp_ms is not None:
            raise ConfigError(f"start_position {pos.kind.value} takes no time (only timestamp does)")

    def _check_region(self) -> None:
        if self.region_mode is RegionMode.OPERATOR_DRIVEN:
            if not isinstance(self.trigger_count, int) or self.trigger_count <= 0:
                raise ConfigError(f"region_mode operator_driven needs trigger_count > 0, got {self.trigger_count!r}")
        elif self.trigger_count is not None:
            raise ConfigError("trigger_count is only used with region_mode operator_driven")

    def _check_numbers(self) -> None:
        if not isinstance(self.max_poll_records, int) or self.max_poll_records <= 0:
            raise ConfigError(f"max_poll_records must be an integer > 0, got {self.max_poll_records!r}")
        if self.queue_capacity is not None and (
            not isinstance(self.queue_capacity, int) or self.queue_capacity < self.max_poll_records
        ):
            raise ConfigError(
                f"queue_capacity must be an integer >= max_poll_records ({self.max_poll_records}), "
                f"got {self.queue_capacity!r}"
            )
        for name in ("drain_timeout_s", "reset_timeout_s", "commit_period_s", "coordinator_timeout_s"):
            value = getattr(self, name)
            # NaN fails every comparison, so the range test also refuses it
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_DURATION_S:
                raise ConfigError(f"{name} must be a number of seconds in (0, {MAX_DURATION_S:g}], got {value!r}")
        for name in ("key_deserializer", "value_deserializer"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise ConfigError(f"{name} must be callable (bytes -> object), got {value!r}")

    def _check_properties(self) -> None:
        try:
            check_properties(
                self.consumer_properties,
                clients={self.client},
                reserved=RESERVED,
                session_default_ms=DEFAULT_SESSION_TIMEOUT_MS,
                own=(FILTER_ABORTED,),
            )
        except PropertyError as exc:
            raise ConfigError(str(exc)) from None

    @property
    def cooperative(self) -> bool:
        """Incremental (cooperative) rebalancing: survivors keep their partitions
        through a rebalance; only the partitions that move are revoked (and a
        revocation after records were fetched still resets the region)."""
        return "cooperative-sticky" in self.assignor_names

    @property
    def filter_aborted(self) -> bool:
        """The source reads committed records itself (``crkafka.filter.aborted``, for brokers
        whose ``read_committed`` cannot be trusted: ``kafka_python/aborted_records.py``)."""
        return filter_aborted(self.consumer_properties)

    # -- derived values ---------------------------------------------------
    @property
    def effective_queue_capacity(self) -> int:
        return self.queue_capacity if self.queue_capacity is not None else 100 * self.max_poll_records

    @property
    def session_timeout_ms(self) -> int:
        return int(self.consumer_properties.get("session.timeout.ms", DEFAULT_SESSION_TIMEOUT_MS))

    @property
    def max_poll_interval_ms(self) -> int:
        floor = int(3 * max(self.drain_timeout_s, self.reset_timeout_s) * 1000)
        return max(int(self.consumer_properties.get("max.poll.interval.ms", 300000)), floor)

    @property
    def merge_timeout_s(self) -> float:
        """How long a reset waits for the other members' checkpoints."""
        return min(self.reset_timeout_s / 2, self.max_poll_interval_ms / 2000, 15.0)

    @property
    def auto_offset_reset(self) -> str:
        return str(self.consumer_properties.get("auto.offset.reset", "latest"))

    @property
    def assignor_names(self) -> tuple[str, ...]:
        """The configured assignors by their standard names (range, roundrobin,
        cooperative-sticky), validated; range and roundrobin unless set."""
        return assignor_names(self.consumer_properties.get("partition.assignment.strategy", ("range", "roundrobin")))

    def client_properties(self) -> dict[str, Any]:
        """The Kafka properties (standard dotted names) of the operator's client:
        ``consumer_properties`` with the derived values (module docstring)."""
        props: dict[str, Any] = dict(self.consumer_properties)
        session = self.session_timeout_ms
        props.update(
            {
                "bootstrap.servers": self.bootstrap_servers,
                "group.id": self.group_id,
                "client.id": props.get("client.id", f"cr-{self.operator_name}"),
                "max.poll.records": self.max_poll_records,
                "session.timeout.ms": session,
                "heartbeat.interval.ms": int(props.get("heartbeat.interval.ms", default_heartbeat_ms(session))),
                "max.poll.interval.ms": self.max_poll_interval_ms,
                "metadata.max.age.ms": min(
                    int(props.get("metadata.max.age.ms", METADATA_MAX_AGE_CAP_MS)), METADATA_MAX_AGE_CAP_MS
                ),
                "partition.assignment.strategy": ",".join(self.assignor_names),
                "auto.offset.reset": self.auto_offset_reset,
                "fetch.max.wait.ms": int(
                    props.get("fetch.max.wait.ms", props.get("fetch.wait.max.ms", DEFAULT_FETCH_MAX_WAIT_MS))
                ),
            }
        )
        props.pop("fetch.wait.max.ms", None)
        if filter_aborted(props):
            # the source is read_committed itself (kafka_python/aborted_records.py): the client
            # must return records of open transactions, which the source holds back
            props["isolation.level"] = "read_uncommitted"
        props.pop(FILTER_ABORTED, None)  # read by the source (filter_aborted), not by the client
        if self.client is ClientKind.KAFKA_PYTHON:
            props["fetch.max.bytes"] = int(props.get("fetch.max.bytes", DEFAULT_FETCH_MAX_BYTES))
        return props


__all__ = [
    "DEFAULT_FETCH_MAX_BYTES",
    "DEFAULT_FETCH_MAX_WAIT_MS",
    "DEFAULT_SESSION_TIMEOUT_MS",
    "LIBRDKAFKA_EXTRA",
    "MAX_DURATION_S",
    "METADATA_MAX_AGE_CAP_MS",
    "RESERVED",
    "ClientKind",
    "ConfigError",
    "GcPolicy",
    "MalformedPolicy",
    "OperatorConfig",
    "RegionMode",
    "StartKind",
    "StartPosition",
]
