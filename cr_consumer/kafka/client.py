"""The Kafka client seam: what the operator's event thread and the Spark source need from a Kafka consumer.

Two implementations sit behind :class:`KafkaClient`:

* ``kafka_python.client.KafkaPythonClient`` (kafka-python, pure Python, the default);
* ``librdkafka.client.LibrdkafkaClient`` (confluent-kafka / librdkafka, the optional
  ``[librdkafka]`` extra: less CPU per record and more records per second than kafka-python;
  the measured figures are in README.md and BENCHMARKS.md, "Kafka clients").

:func:`cr_consumer.kafka.factory.make_client` builds either from one :class:`ClientKind` and one mapping of
Kafka properties under their standard dotted names (``session.timeout.ms``,
``fetch.max.wait.ms``, ...); each implementation maps the few names its library
spells differently.

The protocol of one client (every call on the thread that owns it, the event thread):

1. ``subscribe(topics or pattern, listener)``; nothing happens until ``poll``.
2. ``poll(timeout_ms, max_records)`` joins the group, runs the listener's
   callbacks (:class:`RebalanceListener`) *during* the poll, and returns at most
   ``max_records`` records grouped by partition, in offset order per partition.
   Callbacks may run on the client library's own thread while ``poll`` runs
   (kafka-python) or on the polling thread (librdkafka): they may call only
   ``pause``, ``resume`` and ``seek`` (client state, no broker round trip).
3. ``pause`` / ``resume`` / ``seek`` change what the next polls fetch; a seek
   made in ``on_assigned`` applies before anything of that partition is fetched.
4. ``commit(offsets, timeout_ms)`` commits synchronously: it returns once the
   broker accepted every offset; :class:`CommitRefused` when the group refused it
   because it is rebalancing (the offsets are NOT committed; the consumer keeps
   its partitions), and its subclass :class:`MemberFenced` when the group no
   longer knows this consumer in its current generation (evicted, stale
   generation, fenced: its partitions may be another member's already);
   :class:`ClientTimeout` when no answer came in time (outcome unknown).
5. ``close(timeout_ms)`` leaves the group (no commit) and frees the client.

A rebalance hold (``subscribe(..., hold=...)``, the Spark source's group
members; kafka-python only, librdkafka raises :class:`ClientUnavailable`):

1. After ``on_revoked`` (or ``on_lost``) of a non-empty set, the rebalance
   does not complete until ``hold.released(partitions)`` is true; an exception
   it raises ends the hold (the caller keeps it as its failure).
2. Meanwhile the client sends the commits ``hold.commits()`` hands it (each
   bounded by ``hold.commit_timeout_ms``; its outcome, None or the seam's
   error, goes to the commit's ``done``), waits ``hold.poll_s`` between two
   checks, and keeps the group's heartbeats going.

Without a group (``assign`` instead of ``subscribe``) the client fetches the
partitions it was given; with ``auto.offset.reset=none`` a position no longer
on the broker makes ``poll`` raise :class:`OffsetOutOfRange`.

Lookups (``topics``, ``position``, ``committed``, ``beginning_offsets``, ``end_offsets``,
``offsets_for_times``, ``subscribed_partitions``) may ask the broker and are
bounded by their ``timeout_ms`` (:class:`ClientTimeout`). ``end_offsets`` is the
broker's ListOffsets(latest) answer (tansu answers the base offset of the last
record batch there); ``highwater`` is the high watermark of the last fetch
response, which is right on every broker: use it for lag.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple, Protocol

import attrs


class ClientKind(enum.Enum):
    """Which Kafka client library a :class:`KafkaClient` uses."""

    KAFKA_PYTHON = "kafka-python"
    LIBRDKAFKA = "librdkafka"


#: The operator's client when none is chosen. The Spark source's executors default to
#: librdkafka instead (``spark/options/kafka_properties.py``, ``EXECUTOR_DEFAULT_CLIENT``).
DEFAULT_CLIENT = ClientKind.KAFKA_PYTHON


class TopicPartition(NamedTuple):
    """A partition. Equal to (and hashed like) kafka-python's ``TopicPartition``
    (both are ``(topic, partition)`` tuples), so maps keyed by either agree."""

    topic: str
    partition: int


class LibraryPartition(Protocol):
    """A client library's partition (kafka-python's and confluent-kafka's ``TopicPartition``)."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...


def topic_partition(partition: LibraryPartition) -> TopicPartition:
    """A library's partition as the seam's."""
    return TopicPartition(partition.topic, partition.partition)


def topic_partitions(partitions: Iterable[LibraryPartition]) -> frozenset[TopicPartition]:
    """A library's partitions (a rebalance callback's, an assignment) as the seam's."""
    return frozenset(map(topic_partition, partitions))


class TimestampType(enum.Enum):
    """What a record's timestamp means (Kafka's record attribute)."""

    NOT_AVAILABLE = "not_available"
    CREATE_TIME = "create_time"
    LOG_APPEND_TIME = "log_append_time"


#: A header: its name and its value (None for a null value).
Header = tuple[str, bytes | None]


class KafkaRecord(NamedTuple):
    """One consumed record, the same shape whichever client fetched it.

    ``timestamp`` is milliseconds since the epoch, None when the record has
    none (``timestamp_type`` NOT_AVAILABLE); ``key``/``value`` are the raw bytes
    (None for null); ``headers`` in record order.

    A NamedTuple, not an attrs class: one is built per consumed record, and a
    tuple costs ~0.08 us to build (``tuple.__new__(KafkaRecord, fields)``, what
    both clients do) against ~0.44 us for a frozen attrs instance; at 250k
    records/s that difference alone is a tenth of a core. Immutable like a frozen
    class; ``_replace`` makes the decoded copy (the operator's deserialisers)."""

    topic: str
    partition: int
    offset: int
    timestamp: int | None
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


class RebalanceProtocol(enum.Enum):
    """EAGER: every owned partition is revoked before each rebalance and the
    whole new assignment is given after it. COOPERATIVE (incremental): only the
    partitions that move are revoked, and ``on_assigned`` gets only the added
    ones (possibly none)."""

    EAGER = "eager"
    COOPERATIVE = "cooperative"


class RebalanceListener(Protocol):
    """Called by :meth:`KafkaClient.poll` (see the module docstring, step 2)."""

    def on_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        """Partitions now owned (eager: the whole assignment; cooperative: the added ones)."""
        ...

    def on_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        """Partitions given up in an orderly rebalance (their offsets could still be committed)."""
        ...

    def on_lost(self, partitions: frozenset[TopicPartition]) -> None:
        """Partitions lost without a rebalance (session expired, fenced): another
        member may own them already; a commit for them is refused."""
        ...


@attrs.frozen
class HeldCommit:
    """A commit sent while a rebalance is held: ``done`` gets None once the broker
    accepted ``offsets``, else the seam's error (CommitRefused, ClientTimeout, ...)."""

    offsets: Mapping[TopicPartition, int]
    done: Callable[[KafkaClientError | None], None]


class RebalanceHold(Protocol):
    """What holds a rebalance after a revocation (see the module docstring, "A rebalance hold")."""

    @property
    def poll_s(self) -> float:
        """The wait between two checks of :meth:`released`."""
        ...

    @property
    def commit_timeout_ms(self) -> int:
        """The bound on each commit sent during the hold."""
        ...

    def released(self, partitions: frozenset[TopicPartition]) -> bool:
        """True once the rebalance that took ``partitions`` may complete."""
        ...

    def commits(self) -> list[HeldCommit]:
        """The commits to send now (taken: each is handed out once)."""
        ...


@attrs.frozen
class GroupMembership:
    """The client's group membership as of the last poll.

    ``generation`` is None when the library does not expose it (librdkafka);
    ``rebalancing``: a join or rebalance is in progress (no stable assignment)."""

    member_id: str | None
    generation: int | None
    rebalancing: bool


# -- errors -------------------------------------------------------------------
class KafkaClientError(RuntimeError):
    """A Kafka client call failed; the message names the call and the library's error."""


class CommitRefused(KafkaClientError):
    """The group refused the commit because of a rebalance (rebalance in progress,
    stale generation, unknown or fenced member): nothing was committed."""


class MemberFenced(CommitRefused):
    """The group no longer knows this consumer as the member of its current
    generation (unknown member id, stale generation, fenced instance id, or
    not in an active group): the broker may have given its partitions to
    another member already, so what it processed since its last consistent
    checkpoint must not be committed or checkpointed by it."""


class ClientTimeout(KafkaClientError):
    """A bounded call got no answer within its timeout (a commit's outcome is then unknown)."""


class UnknownTopicOrPartition(KafkaClientError):
    """The broker does not know the topic or partition asked about."""


class OffsetOutOfRange(KafkaClientError):
    """A fetch position is no longer on the broker (retention deleted it, or the topic
    was created again): raised by ``poll`` when ``auto.offset.reset`` is ``none``."""


class ClientConfigError(ValueError):
    """A Kafka property the chosen client cannot use, or one that would break the
    operator's guarantees (the message names the property and what to do)."""


class ClientUnavailable(ImportError):
    """The chosen client's library is not installed (the message names the extra)."""


# -- the subscribe call ----------------------------------------------------------
def check_subscription(topics: Sequence[str], pattern: str | None) -> None:
    """ValueError unless ``topics`` (non-empty strings) or ``pattern`` (non-empty) is
    given, exactly one, checked the same way by both clients before either library
    sees them: both, or neither, would leave which topics the member consumes to the
    library's own rule; a single string as ``topics`` is refused (a library would
    read it as its characters, one topic each)."""
    if isinstance(topics, str):
        raise ValueError(f"subscribe: topics must be a sequence of topic names, not the string {topics!r}")
    if bool(topics) == bool(pattern):
        raise ValueError("subscribe: give topics or a pattern (exactly one)")
    for topic in topics:
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"subscribe: a topic name must be a non-empty string, got {topic!r}")


class KafkaClient(Protocol):
    """A consumer as the operator's event thread and the Spark source use it (see the module docstring)."""

    @property
    def kind(self) -> ClientKind: ...

    @property
    def rebalance_protocol(self) -> RebalanceProtocol:
        """Which kind of rebalance the configured assignors run."""
        ...

    @property
    def pause_drops_fetched(self) -> bool:
        """True when ``pause`` discards the records the client has already
        fetched ahead for the partition (they are fetched again after
        ``resume``: librdkafka), so pausing for backpressure costs a refetch;
        the event thread then stops polling for a while instead of pausing."""
        ...

    def subscribe(
        self,
        topics: Sequence[str] = (),
        *,
        pattern: str | None = None,
        listener: RebalanceListener,
        hold: RebalanceHold | None = None,
    ) -> None:
        """Subscribe to ``topics`` or to every topic ``pattern`` matches (a Python
        regular expression matched at the start of the name, as ``re.match``);
        ``hold`` holds each rebalance after a revocation (see the module docstring).
        Both clients check the arguments with :func:`check_subscription` first (a
        ValueError leaves the client as it was)."""
        ...

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Take ``partitions`` without a group assignment (instead of ``subscribe``):
        they are fetched until the next ``assign``; ``assign(())`` gives them up."""
        ...

    def topics(self, timeout_ms: int) -> dict[str, set[int]]:
        """Every topic of the cluster's metadata, with its partitions."""
        ...

    def subscribed_partitions(self, timeout_ms: int) -> set[TopicPartition]:
        """Every partition of the subscription in the current metadata."""
        ...

    def poll(self, timeout_ms: int, max_records: int) -> dict[TopicPartition, list[KafkaRecord]]: ...

    def pause(self, partitions: Iterable[TopicPartition]) -> None: ...

    def resume(self, partitions: Iterable[TopicPartition]) -> None: ...

    def paused(self) -> set[TopicPartition]: ...

    def seek(self, partition: TopicPartition, offset: int) -> None: ...

    def position(self, partition: TopicPartition, timeout_ms: int) -> int:
        """The offset of the next record ``poll`` returns for ``partition``."""
        ...

    def commit(self, offsets: Mapping[TopicPartition, int], timeout_ms: int) -> None:
        """Commit ``offsets`` (next offset to read) synchronously; raises CommitRefused
        or ClientTimeout (see the module docstring, step 4)."""
        ...

    def committed(self, partitions: Iterable[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int | None]: ...

    def beginning_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int]: ...

    def end_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int]: ...

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout_ms: int
    ) -> dict[TopicPartition, int | None]:
        """The first offset whose timestamp is >= the given one; None past the end."""
        ...

    def highwater(self, partition: TopicPartition) -> int | None:
        """The high watermark of the last fetch response (no broker request); None before one."""
        ...

    def assignment(self) -> set[TopicPartition]: ...

    def group(self) -> GroupMembership: ...

    def request_rejoin(self) -> bool:
        """Rejoin the group at the next poll; False when the library cannot (the
        rebalance then comes when the broker starts it)."""
        ...

    def close(self, timeout_ms: int) -> None:
        """Leave the group (no commit) and free the client."""
        ...


__all__ = [
    "DEFAULT_CLIENT",
    "ClientConfigError",
    "ClientKind",
    "ClientTimeout",
    "ClientUnavailable",
    "CommitRefused",
    "GroupMembership",
    "Header",
    "HeldCommit",
    "KafkaClient",
    "KafkaClientError",
    "KafkaRecord",
    "LibraryPartition",
    "MemberFenced",
    "OffsetOutOfRange",
    "RebalanceHold",
    "RebalanceListener",
    "RebalanceProtocol",
    "TimestampType",
    "TopicPartition",
    "UnknownTopicOrPartition",
    "check_subscription",
    "topic_partition",
    "topic_partitions",
]
