"""The kafka-python implementation of :class:`~cr_consumer.kafka.client.KafkaClient`.

kafka-python is pure Python (installs everywhere) and the default client. Its
defects' work-arounds (``cr_consumer.kafka.kafka_python.compat``) stay inside this class:

1. at construction: keep a group join that completes between two polls
   (``keep_completed_joins``), and keep fetching the owned partitions during a
   cooperative join (``fetch_during_cooperative_joins``, cooperative assignors only),
   and answer "coordinator ready" without a thread hand-off while it is known and
   connected (``skip_known_coordinator_hop``);
2. before every poll: release partitions parked by pause() (``unstick_parked_fetches``);
3. ``request_rejoin``: the coordinator's own ``request_rejoin()``.

``group.id`` None makes a client without a group (``assign`` only; it may
still commit to a group named later by another client, never join one).

Properties: standard dotted names become kafka-python keyword arguments
(``fetch.max.wait.ms`` -> ``fetch_max_wait_ms``); the librdkafka spellings of the
security settings are mapped (:data:`RENAMED`); ``partition.assignment.strategy``
is read by :mod:`cr_consumer.kafka.assignors` and given as kafka-python's classes
(:data:`ASSIGNORS`); ``max.poll.records`` is the poll's cap.
Rebalance callbacks run on kafka-python's IO thread while ``poll`` runs.

A rebalance hold (``subscribe(..., hold=...)``) runs on that IO loop too. A
listener that blocks there stops every request of the consumer (a commit from
the polling thread fails with "Cannot block on net.run() from the IO
thread"), heartbeats included. So :class:`HoldingListener` is an
``AsyncConsumerRebalanceListener`` whose hold awaits the loop's sleep
(:func:`io_sleep`) and sends the hold's commits from the loop (the polling
thread is inside ``poll`` until the rebalance completes):

1. ``on_partitions_revoked`` / ``on_partitions_lost``: the seam listener's
   ``on_revoked`` / ``on_lost``, then, for a non-empty set, the hold.
2. Until ``hold.released(partitions)``: every commit of ``hold.commits()`` is
   sent with ``commit_async`` and awaited in steps of :data:`COMMIT_POLL_S`,
   bounded by ``hold.commit_timeout_ms`` (its outcome to the commit's ``done``);
   then one sleep of ``hold.poll_s`` on the loop.
3. ``on_partitions_assigned``: the seam listener's ``on_assigned``.

An exception of the seam listener or of the hold ends the listener call;
kafka-python logs it and completes the rebalance, so the hold's owner keeps it
itself. Like ``compat.py``, the hold uses kafka-python internals (the loop's
``KernelEvent``).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka import errors as kafka_errors
from kafka.consumer.fetcher import ConsumerRecord
from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener, ConsumerRebalanceListener
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.net.selector import KernelEvent
from kafka.structs import MemberState, OffsetAndMetadata

from cr_consumer.kafka.assignors import COOPERATIVE_STICKY, RANGE, ROUNDROBIN, parse_strategy, strategy_of
from cr_consumer.kafka.client import (
    ClientConfigError,
    ClientKind,
    ClientTimeout,
    CommitRefused,
    GroupMembership,
    Header,
    KafkaClientError,
    KafkaRecord,
    MemberFenced,
    OffsetOutOfRange,
    RebalanceHold,
    RebalanceListener,
    Subscriber,
    Subscription,
    TimestampType,
    TopicPartition,
    UnknownTopicOrPartition,
)
from cr_consumer.kafka.kafka_python.compat import (
    fetch_during_cooperative_joins,
    keep_completed_joins,
    request_rejoin,
    skip_known_coordinator_hop,
    unstick_parked_fetches,
)

log = logging.getLogger(__name__)

#: librdkafka's names of settings kafka-python spells otherwise (dotted -> dotted).
RENAMED: Mapping[str, str] = {
    "sasl.username": "sasl.plain.username",
    "sasl.password": "sasl.plain.password",
    "sasl.mechanisms": "sasl.mechanism",
    "ssl.ca.location": "ssl.cafile",
    "ssl.certificate.location": "ssl.certfile",
    "ssl.key.location": "ssl.keyfile",
    "ssl.key.password": "ssl.password",
    "socket.timeout.ms": "request.timeout.ms",
    "fetch.wait.max.ms": "fetch.max.wait.ms",
}

#: kafka-python's consumer settings and their defaults (keyword names: ``fetch_max_wait_ms``).
DEFAULTS: Mapping[str, object] = KafkaConsumer.DEFAULT_CONFIG
#: kafka-python's consumer settings (keyword names).
SETTINGS: frozenset[str] = frozenset(DEFAULTS)


def kafka_python_name(key: str) -> str:
    """kafka-python's keyword name of the dotted property ``key`` (librdkafka's spellings mapped)."""
    return RENAMED.get(key, key).replace(".", "_")


#: The standard assignor names (cr_consumer.kafka.assignors) -> kafka-python's classes.
ASSIGNORS: Mapping[str, type] = {
    RANGE: RangePartitionAssignor,
    ROUNDROBIN: RoundRobinPartitionAssignor,
    COOPERATIVE_STICKY: CooperativeStickyAssignor,
}

#: kafka-python errors that mean "the group refused the commit" (see commit_refusal).
_REFUSED = (
    kafka_errors.CommitFailedError,
    kafka_errors.RebalanceInProgressError,
    kafka_errors.IllegalGenerationError,
    kafka_errors.UnknownMemberIdError,
    kafka_errors.FencedInstanceIdError,
)
#: Of those, the ones that mean "this consumer is no longer the group's member".
_FENCED = (kafka_errors.IllegalGenerationError, kafka_errors.UnknownMemberIdError, kafka_errors.FencedInstanceIdError)


def commit_refusal(exc: BaseException) -> CommitRefused:
    """The seam's error for a refused commit. kafka-python wraps the broker's
    answer in CommitFailedError (its first argument): UNKNOWN_MEMBER_ID and
    ILLEGAL_GENERATION (it reset the generation: the member lost its
    partitions), REBALANCE_IN_PROGRESS (still a member: it keeps them); a
    CommitFailedError with a message only means "not part of an active group"
    (kicked out). Fenced or kicked out -> MemberFenced; a rebalance -> CommitRefused."""
    cause = exc.args[0] if isinstance(exc, kafka_errors.CommitFailedError) and exc.args else exc
    if isinstance(cause, kafka_errors.RebalanceInProgressError):
        return CommitRefused(f"commit refused by the group (rebalance): {exc!r}")
    if isinstance(cause, _FENCED) or isinstance(exc, kafka_errors.CommitFailedError):
        return MemberFenced(f"commit refused: the group no longer knows this consumer: {exc!r}")
    return CommitRefused(f"commit refused by the group (rebalance): {exc!r}")


def commit_error(exc: BaseException) -> KafkaClientError:
    """The seam's error for a failed commit: refused (:func:`commit_refusal`), not
    answered in time (ClientTimeout, outcome unknown), or any other failure."""
    if isinstance(exc, _REFUSED):
        return commit_refusal(exc)
    if isinstance(exc, kafka_errors.KafkaTimeoutError):
        return ClientTimeout(f"commit not answered in time (outcome unknown): {exc!r}")
    return KafkaClientError(f"commit failed: {exc!r}")


_TIMESTAMP_TYPES = {0: TimestampType.CREATE_TIME, 1: TimestampType.LOG_APPEND_TIME}
#: ``KafkaRecord`` from one tuple of its fields, without the NamedTuple's Python-level ``__new__``.
_new_record = functools.partial(tuple.__new__, KafkaRecord)


def to_kafka_records(records: Sequence[Any]) -> list[KafkaRecord]:
    """kafka-python's ``ConsumerRecord``s (one partition's, from one poll) as the
    seam's :class:`KafkaRecord`s: timestamp None when the record has none (kafka-python
    gives -1 or None), the timestamp type as :class:`TimestampType`, headers as a tuple.

    Column by column in C: ``zip(*records)`` transposes the batch, the columns that
    need a change are mapped as a whole (a column of one timestamp type, of no
    headers, of valid timestamps, the usual batch, is not touched per record), and
    ``zip`` + ``map`` build the records, with no Python-level loop per record
    (~0.16 us per record against ~0.21 for a list comprehension over the records)."""
    n = len(records)
    if not n:
        return []
    # the first 9 of ConsumerRecord's 13 fields (checksum and sizes unused: not transposed)
    topics, partitions, _epochs, offsets, timestamps, types, keys, values, headers = itertools.islice(zip(*records), 9)
    if None in timestamps or min(timestamps) < 0:
        timestamps = tuple(t if t is not None and t >= 0 else None for t in timestamps)
    first_type = types[0]
    type_column: Iterable[TimestampType]
    if types.count(first_type) == n:
        type_column = itertools.repeat(_TIMESTAMP_TYPES.get(first_type, TimestampType.NOT_AVAILABLE), n)
    else:
        type_column = [_TIMESTAMP_TYPES.get(t, TimestampType.NOT_AVAILABLE) for t in types]
    header_column: Iterable[tuple[Header, ...]]
    header_column = [tuple(h) if h else () for h in headers] if any(headers) else itertools.repeat((), n)
    return list(
        map(_new_record, zip(topics, partitions, offsets, timestamps, type_column, keys, values, header_column))
    )


def kafka_python_config(properties: Mapping[str, object]) -> dict[str, Any]:
    """kafka-python keyword arguments for ``properties``, checked by
    :mod:`cr_consumer.kafka.property_rules` (see the module docstring)."""
    cfg: dict[str, Any] = {"enable_auto_commit": False}
    for key, value in properties.items():
        name = kafka_python_name(key)
        if name not in SETTINGS:
            raise ClientConfigError(f"Kafka property {key!r} is not a kafka-python consumer setting")
        cfg[name] = value
    if "partition_assignment_strategy" in cfg:
        cfg["partition_assignment_strategy"] = tuple(
            ASSIGNORS[name] for name in parse_strategy(cfg["partition_assignment_strategy"]).names
        )
    return cfg


def _tp(tp: KafkaTopicPartition) -> TopicPartition:
    return TopicPartition(tp.topic, tp.partition)


def _tps(partitions: Iterable[KafkaTopicPartition]) -> frozenset[TopicPartition]:
    return frozenset(map(_tp, partitions))


def _ktp(tp: TopicPartition) -> KafkaTopicPartition:
    return KafkaTopicPartition(tp.topic, tp.partition)


def _commit_request(offsets: Mapping[TopicPartition, int]) -> dict[KafkaTopicPartition, OffsetAndMetadata]:
    return {_ktp(tp): OffsetAndMetadata(int(off), "", -1) for tp, off in offsets.items()}


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]  # kafka-python is untyped: its base class is Any
    """kafka-python's listener interface -> :class:`RebalanceListener` (IO thread)."""

    def __init__(self, listener: RebalanceListener) -> None:
        self._listener = listener

    def on_partitions_revoked(self, revoked: Iterable[KafkaTopicPartition]) -> None:
        self._listener.on_revoked(_tps(revoked))

    def on_partitions_lost(self, lost: Iterable[KafkaTopicPartition]) -> None:
        self._listener.on_lost(_tps(lost))

    def on_partitions_assigned(self, assigned: Iterable[KafkaTopicPartition]) -> None:
        self._listener.on_assigned(_tps(assigned))


#: Step 2's wait while a commit sent from the IO loop is in flight.
COMMIT_POLL_S = 0.002


def io_sleep(delay_s: float) -> KernelEvent:
    """An awaitable pause on kafka-python's IO loop (its ``sleep`` kernel call): a
    listener awaiting it lets the loop serve heartbeats and other threads' requests."""
    return KernelEvent("_sleep", delay_s)


class HoldingListener(AsyncConsumerRebalanceListener):  # type: ignore[misc]  # kafka-python is untyped: its base class is Any
    """The seam's listener and hold on kafka-python's IO loop (see the module docstring)."""

    def __init__(self, consumer: KafkaConsumer, listener: RebalanceListener, hold: RebalanceHold) -> None:
        self._consumer = consumer
        self._listener = listener
        self._hold = hold

    async def on_partitions_revoked(self, revoked: Iterable[KafkaTopicPartition]) -> None:
        tps = _tps(revoked)
        self._listener.on_revoked(tps)
        await self._hold_while(tps)

    async def on_partitions_lost(self, lost: Iterable[KafkaTopicPartition]) -> None:
        tps = _tps(lost)
        self._listener.on_lost(tps)
        await self._hold_while(tps)

    async def on_partitions_assigned(self, assigned: Iterable[KafkaTopicPartition]) -> None:
        self._listener.on_assigned(_tps(assigned))

    async def _hold_while(self, tps: frozenset[TopicPartition]) -> None:
        """Step 2."""
        if not tps:
            return
        while not self._hold.released(tps):
            for commit in self._hold.commits():
                commit.done(await self._commit(commit.offsets))
            await io_sleep(self._hold.poll_s)

    async def _commit(self, offsets: Mapping[TopicPartition, int]) -> KafkaClientError | None:
        timeout_ms = self._hold.commit_timeout_ms
        sent = self._consumer.commit_async(_commit_request(offsets))
        deadline = time.monotonic() + timeout_ms / 1000
        while not sent.is_done and time.monotonic() < deadline:
            await io_sleep(COMMIT_POLL_S)
        if not sent.is_done:
            return ClientTimeout(
                f"a commit during a held rebalance not answered within {timeout_ms} ms (outcome unknown)"
            )
        if sent.failed():
            return commit_error(sent.exception)
        return None


class KafkaPythonClient:
    """:class:`~cr_consumer.kafka.client.KafkaClient` on kafka-python (see the module docstring)."""

    kind = ClientKind.KAFKA_PYTHON
    #: kafka-python fetches little ahead (one response per partition): pausing is cheap.
    pause_drops_fetched = False

    def __init__(self, properties: Mapping[str, object]) -> None:
        cfg = kafka_python_config(properties)
        self.rebalance_protocol = strategy_of(properties).protocol
        self._consumer = KafkaConsumer(**cfg)
        keep_completed_joins(self._consumer)
        fetch_during_cooperative_joins(self._consumer)
        skip_known_coordinator_hop(self._consumer)
        self.subscribe = Subscriber(self._subscribe)

    def _subscribe(self, subscription: Subscription) -> None:
        """kafka-python's subscribe, with the listener wrapped for its IO thread
        (holding each rebalance when the subscription has a hold)."""
        listener, hold = subscription.listener, subscription.hold
        wrapped = _Listener(listener) if hold is None else HoldingListener(self._consumer, listener, hold)
        self._consumer.subscribe(topics=list(subscription.topics), pattern=subscription.pattern, listener=wrapped)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._consumer.assign([_ktp(tp) for tp in partitions])

    def topics(self, timeout_ms: int) -> dict[str, set[int]]:
        with _errors("topics"):
            names = self._consumer.topics()
        return {topic: set(self._consumer.partitions_for_topic(topic) or ()) for topic in names}

    def subscribed_partitions(self, timeout_ms: int) -> set[TopicPartition]:
        out: set[TopicPartition] = set()
        for topic in self._consumer.subscription() or ():
            out.update(TopicPartition(topic, p) for p in self._consumer.partitions_for_topic(topic) or ())
        return out

    def poll(self, timeout_ms: int, max_records: int) -> dict[TopicPartition, list[KafkaRecord]]:
        unstick_parked_fetches(self._consumer)
        try:
            raw = self._consumer.poll(timeout_ms=timeout_ms, max_records=max_records)
        except kafka_errors.OffsetOutOfRangeError as exc:
            raise OffsetOutOfRange(str(exc)) from exc
        return {TopicPartition(ktp.topic, ktp.partition): to_kafka_records(records) for ktp, records in raw.items()}

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        tps = [_ktp(tp) for tp in partitions]
        if tps:
            self._consumer.pause(*tps)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        tps = [_ktp(tp) for tp in partitions]
        if tps:
            self._consumer.resume(*tps)

    def paused(self) -> set[TopicPartition]:
        return {_tp(tp) for tp in self._consumer.paused()}

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._consumer.seek(_ktp(partition), offset)

    def position(self, partition: TopicPartition, timeout_ms: int) -> int:
        with _errors(f"position of {partition}"):
            pos = self._consumer.position(_ktp(partition), timeout_ms=timeout_ms)
        if pos is None:
            raise ClientTimeout(f"position of {partition}: not known within {timeout_ms} ms")
        return int(pos)

    def commit(self, offsets: Mapping[TopicPartition, int], timeout_ms: int) -> None:
        try:
            self._consumer.commit(_commit_request(offsets), timeout_ms=timeout_ms)
        except kafka_errors.KafkaError as exc:
            raise commit_error(exc) from exc

    def committed(self, partitions: Iterable[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int | None]:
        end = time.monotonic() + timeout_ms / 1000  # one timeout shared by the partitions' lookups
        out: dict[TopicPartition, int | None] = {}
        with _errors("committed offsets"):
            for tp in partitions:
                left_ms = max(1, int((end - time.monotonic()) * 1000))
                out[tp] = self._consumer.committed(_ktp(tp), timeout_ms=left_ms)
        return out

    def beginning_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int]:
        with _errors("beginning offsets"):
            found = self._consumer.beginning_offsets([_ktp(tp) for tp in partitions], timeout_ms=timeout_ms)
        return {_tp(tp): int(off) for tp, off in found.items()}

    def end_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int]:
        with _errors("end offsets"):
            found = self._consumer.end_offsets([_ktp(tp) for tp in partitions], timeout_ms=timeout_ms)
        return {_tp(tp): int(off) for tp, off in found.items()}

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout_ms: int
    ) -> dict[TopicPartition, int | None]:
        with _errors("offsets for times"):
            found = self._consumer.offsets_for_times(
                {_ktp(tp): ts for tp, ts in timestamps.items()}, timeout_ms=timeout_ms
            )
        return {_tp(tp): (ot.offset if ot is not None else None) for tp, ot in found.items()}

    def highwater(self, partition: TopicPartition) -> int | None:
        try:
            mark: int | None = self._consumer.highwater(_ktp(partition))  # kafka-python is untyped
            return mark
        except kafka_errors.IllegalStateError:
            return None  # not assigned (any more): no fetch response to read

    def assignment(self) -> set[TopicPartition]:
        return {_tp(tp) for tp in self._consumer.assignment()}

    def group(self) -> GroupMembership:
        meta = self._consumer.group_metadata()
        return GroupMembership(
            member_id=meta.member_id or None,
            generation=meta.generation_id if meta.generation_id >= 0 else None,
            rebalancing=meta.state is not MemberState.STABLE,
        )

    def request_rejoin(self) -> bool:
        return request_rejoin(self._consumer)

    def close(self, timeout_ms: int) -> None:
        self._consumer.close(autocommit=False, timeout_ms=timeout_ms)


@contextlib.contextmanager
def _errors(what: str) -> Iterator[None]:
    """Turn kafka-python's errors of a lookup into the seam's error types."""
    try:
        yield
    except kafka_errors.KafkaTimeoutError as exc:
        raise ClientTimeout(f"{what}: no answer in time: {exc!r}") from exc
    except kafka_errors.UnknownTopicOrPartitionError as exc:
        raise UnknownTopicOrPartition(f"{what}: {exc!r}") from exc
    except kafka_errors.KafkaError as exc:
        raise KafkaClientError(f"{what}: {exc!r}") from exc


__all__ = [
    "ASSIGNORS",
    "COMMIT_POLL_S",
    "DEFAULTS",
    "RENAMED",
    "SETTINGS",
    "ConsumerRecord",
    "HoldingListener",
    "KafkaPythonClient",
    "commit_error",
    "commit_refusal",
    "io_sleep",
    "kafka_python_config",
    "kafka_python_name",
    "to_kafka_records",
]
