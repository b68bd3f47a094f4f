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
(:mod:`cr_consumer.kafka.kafka_python.properties`); ``max.poll.records`` is the poll's cap.
Rebalance callbacks run on kafka-python's IO thread while ``poll`` runs, a
rebalance hold with them (:mod:`cr_consumer.kafka.kafka_python.listeners`).
kafka-python's errors map onto the seam's in :mod:`cr_consumer.kafka.kafka_python.errors`,
its records in :mod:`cr_consumer.kafka.kafka_python.records`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence

from kafka import KafkaConsumer
from kafka import errors as kafka_errors
from kafka.structs import MemberState

from cr_consumer.kafka.assignors import strategy_of
from cr_consumer.kafka.client import (
    ClientKind,
    ClientTimeout,
    GroupMembership,
    KafkaRecord,
    OffsetOutOfRange,
    RebalanceHold,
    RebalanceListener,
    TopicPartition,
    check_subscription,
    topic_partition,
)
from cr_consumer.kafka.kafka_python.compat import (
    fetch_during_cooperative_joins,
    keep_completed_joins,
    request_rejoin,
    skip_known_coordinator_hop,
    unstick_parked_fetches,
)
from cr_consumer.kafka.kafka_python.errors import commit_error, lookup_errors
from cr_consumer.kafka.kafka_python.listeners import HoldingListener, SeamListener
from cr_consumer.kafka.kafka_python.partitions import commit_request, library_partition
from cr_consumer.kafka.kafka_python.properties import kafka_python_config
from cr_consumer.kafka.kafka_python.records import to_kafka_records


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

    def subscribe(
        self,
        topics: Sequence[str] = (),
        *,
        pattern: str | None = None,
        listener: RebalanceListener,
        hold: RebalanceHold | None = None,
    ) -> None:
        """kafka-python's subscribe, with the listener wrapped for its IO thread
        (holding each rebalance when ``hold`` is given)."""
        check_subscription(topics, pattern)
        wrapped = SeamListener(listener) if hold is None else HoldingListener(self._consumer, listener, hold)
        self._consumer.subscribe(topics=list(topics), pattern=pattern, listener=wrapped)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        self._consumer.assign([library_partition(tp) for tp in partitions])

    def topics(self, timeout_ms: int) -> dict[str, set[int]]:
        with lookup_errors("topics"):
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
        tps = [library_partition(tp) for tp in partitions]
        if tps:
            self._consumer.pause(*tps)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        tps = [library_partition(tp) for tp in partitions]
        if tps:
            self._consumer.resume(*tps)

    def paused(self) -> set[TopicPartition]:
        return {topic_partition(tp) for tp in self._consumer.paused()}

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._consumer.seek(library_partition(partition), offset)

    def position(self, partition: TopicPartition, timeout_ms: int) -> int:
        with lookup_errors(f"position of {partition}"):
            pos = self._consumer.position(library_partition(partition), timeout_ms=timeout_ms)
        if pos is None:
            raise ClientTimeout(f"position of {partition}: not known within {timeout_ms} ms")
        return int(pos)

    def commit(self, offsets: Mapping[TopicPartition, int], timeout_ms: int) -> None:
        try:
            self._consumer.commit(commit_request(offsets), timeout_ms=timeout_ms)
        except kafka_errors.KafkaError as exc:
            raise commit_error(exc) from exc

    def committed(self, partitions: Iterable[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int | None]:
        end = time.monotonic() + timeout_ms / 1000  # one timeout shared by the partitions' lookups
        out: dict[TopicPartition, int | None] = {}
        with lookup_errors("committed offsets"):
            for tp in partitions:
                left_ms = max(1, int((end - time.monotonic()) * 1000))
                out[tp] = self._consumer.committed(library_partition(tp), timeout_ms=left_ms)
        return out

    def beginning_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int]:
        with lookup_errors("beginning offsets"):
            found = self._consumer.beginning_offsets(
                [library_partition(tp) for tp in partitions], timeout_ms=timeout_ms
            )
        return {topic_partition(tp): int(off) for tp, off in found.items()}

    def end_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int]:
        with lookup_errors("end offsets"):
            found = self._consumer.end_offsets([library_partition(tp) for tp in partitions], timeout_ms=timeout_ms)
        return {topic_partition(tp): int(off) for tp, off in found.items()}

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout_ms: int
    ) -> dict[TopicPartition, int | None]:
        with lookup_errors("offsets for times"):
            found = self._consumer.offsets_for_times(
                {library_partition(tp): ts for tp, ts in timestamps.items()}, timeout_ms=timeout_ms
            )
        return {topic_partition(tp): (ot.offset if ot is not None else None) for tp, ot in found.items()}

    def highwater(self, partition: TopicPartition) -> int | None:
        try:
            mark: int | None = self._consumer.highwater(library_partition(partition))  # kafka-python is untyped
            return mark
        except kafka_errors.IllegalStateError:
            return None  # not assigned (any more): no fetch response to read

    def assignment(self) -> set[TopicPartition]:
        return {topic_partition(tp) for tp in self._consumer.assignment()}

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


__all__ = ["KafkaPythonClient"]
