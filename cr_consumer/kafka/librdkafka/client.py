"""The librdkafka (confluent-kafka) implementation of :class:`~cr_consumer.kafka.client.KafkaClient`.

Installed with the ``[librdkafka]`` extra; importing this module without it raises
:class:`~cr_consumer.kafka.client.ClientUnavailable` naming the extra.

Of the seam's calls, holding a rebalance and ``assign`` (no group) are
kafka-python's only: here they raise :class:`ClientUnavailable`.

How the seam's protocol maps onto librdkafka:

1. Rebalance callbacks run inside ``poll`` on the polling thread. During
   ``on_assigned`` a ``seek`` or ``pause`` of a partition being assigned is
   collected and applied by the assignment itself (the seek as the partition's
   start offset, the pause right after it, before any record of it is handed
   out): librdkafka refuses a seek of a partition whose fetcher has not started.
   The wrapper then calls ``assign`` (eager) or ``incremental_assign``
   (cooperative), and ``unassign`` / ``incremental_unassign`` after ``on_revoked``
   / ``on_lost``.
   A seek of a *paused* partition is kept and applied right after its
   ``resume``: librdkafka resumes a partition from the position it saved when
   it was paused (for a partition paused before it fetched anything: the
   committed offset, else ``auto.offset.reset``), not from a seek made while it
   was paused, so such a seek could be lost and the partition start at the log
   end.
2. ``position`` after a seek is the seeked offset and after a poll the last
   returned offset + 1 (kept here: librdkafka reports no position before it has
   returned a record); otherwise the committed offset, else ``auto.offset.reset``.
3. ``commit`` is librdkafka's synchronous commit, bounded by ``timeout_ms`` on
   a thread of this client's own (:mod:`cr_consumer.kafka.librdkafka.commit`,
   :mod:`cr_consumer.kafka.librdkafka.bounded_call`); ``close`` is bounded the same way
   and does not call the listener (the operator is closing).
4. ``highwater`` is librdkafka's cached high watermark of the last fetch
   response; the lookups (``committed``, ``end_offsets``, ...) ask the broker
   (:mod:`cr_consumer.kafka.librdkafka.offsets`).
5. A commit that got no answer in time stays inside librdkafka, and every
   other call on the consumer would block behind it: each call passes the
   :class:`~cr_consumer.kafka.librdkafka.bounded_call.CallGate` first (a poll returns
   nothing meanwhile; past its limit every call fails and the operator with it).
6. A fatal librdkafka error (``error_cb``) fails the next ``poll``; other errors
   are logged (librdkafka retries them itself); errors map onto the seam's
   exceptions in :mod:`cr_consumer.kafka.librdkafka.errors`.

The records of a poll are built by :func:`~cr_consumer.kafka.librdkafka.records.records_by_partition`;
the rebalance callbacks of step 1 are :class:`~cr_consumer.kafka.librdkafka.rebalance.RebalanceCallbacks`.
The partition bookkeeping of steps 1 and 2 (assignment, positions, pauses,
deferred seeks) is :class:`~cr_consumer.kafka.librdkafka.partitions.PartitionStates`.

Properties: standard dotted names, mapped by
:mod:`cr_consumer.kafka.librdkafka.properties`; librdkafka refuses names it does not know (:class:`ClientConfigError`). A pattern is
subscribed as ``^pattern``: write it in the syntax both Python's ``re`` and
librdkafka's regex engine read (``. * + ? [] () | $``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence

from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_fixed

from cr_consumer.kafka.assignors import strategy_of
from cr_consumer.kafka.client import (
    ClientConfigError,
    ClientKind,
    ClientTimeout,
    ClientUnavailable,
    GroupMembership,
    KafkaClientError,
    KafkaRecord,
    RebalanceHold,
    RebalanceListener,
    TopicPartition,
    check_subscription,
)

try:
    from confluent_kafka import Consumer, KafkaError, KafkaException
    from confluent_kafka.admin import ClusterMetadata
except ImportError as exc:  # the optional extra
    raise ClientUnavailable(
        "the librdkafka Kafka client needs the confluent-kafka package: "
        "pip install 'cr-consumer[librdkafka]' (or choose the kafka-python client)"
    ) from exc

from cr_consumer.kafka.librdkafka.bounded_call import BoundedCaller, CallGate
from cr_consumer.kafka.librdkafka.commit import commit_offsets
from cr_consumer.kafka.librdkafka.errors import call_mapped, error_of, fetcher_not_started, raise_for
from cr_consumer.kafka.librdkafka.offsets import NO_OFFSET, OffsetLookups, ck
from cr_consumer.kafka.librdkafka.partitions import PartitionStates
from cr_consumer.kafka.librdkafka.properties import librdkafka_config
from cr_consumer.kafka.librdkafka.rebalance import RebalanceCallbacks
from cr_consumer.kafka.librdkafka.records import records_by_partition

log = logging.getLogger(__name__)

#: How long a seek is retried while librdkafka answers ``_STATE`` ("Erroneous
#: state": the partition was just assigned or resumed and its fetcher has not
#: started yet; its broker thread starts it without a poll). Failing at once
#: lost the seek (the operator's region reset); a seek that still fails after
#: this is an error (the partition is not ours).
SEEK_STATE_WAIT_S = 5.0
#: Pause between two seek attempts while the fetcher starts.
SEEK_STATE_RETRY_S = 0.005


class LibrdkafkaClient:
    """:class:`~cr_consumer.kafka.client.KafkaClient` on librdkafka (see the module docstring)."""

    #: Assignment, positions, pauses and deferred seeks (polling thread; the
    #: assignment is read on any thread): :mod:`cr_consumer.kafka.librdkafka.partitions`.
    _parts: PartitionStates
    #: The rebalance callbacks given to librdkafka's subscribe, and the group state
    #: they keep (polling thread): :mod:`cr_consumer.kafka.librdkafka.rebalance`.
    _rebalance: RebalanceCallbacks
    #: The first fatal error reported by librdkafka (its thread); raised by poll.
    _fatal: KafkaError | None

    kind = ClientKind.LIBRDKAFKA
    #: librdkafka purges a paused partition's prefetched records.
    pause_drops_fetched = True

    def __init__(self, properties: Mapping[str, object]) -> None:
        cfg = librdkafka_config(properties)
        self.rebalance_protocol = strategy_of(properties).protocol
        cfg["error_cb"] = self._on_error
        cfg["logger"] = logging.getLogger("cr_consumer.kafka.librdkafka")
        self._fatal = None
        try:
            self._consumer = Consumer(cfg)
        except KafkaException as exc:
            err = error_of(exc)
            raise ClientConfigError(f"librdkafka refused the properties: {err.str() if err else exc}") from exc
        self._lookups = OffsetLookups(self._consumer, str(cfg.get("auto.offset.reset", "latest")))
        self._closing = False
        self._parts = PartitionStates()
        self._rebalance = RebalanceCallbacks(self._parts, self._lookups, self.rebalance_protocol)
        self._topics: tuple[str, ...] = ()
        self._pattern: re.Pattern[str] | None = None
        #: The group member id as last asked (group(); polling thread only).
        self._member_id: str | None = None
        # The thread for the calls librdkafka cannot bound (commit, close); owned here,
        # shut down by close().
        self._caller = BoundedCaller("cr-librdkafka-calls")
        self._gate = CallGate(self._caller)

    # -- subscription -------------------------------------------------------------
    def subscribe(
        self,
        topics: Sequence[str] = (),
        *,
        pattern: str | None = None,
        listener: RebalanceListener,
        hold: RebalanceHold | None = None,
    ) -> None:
        """librdkafka's subscribe, with this client's rebalance callbacks; a hold is
        refused (:class:`ClientUnavailable`)."""
        check_subscription(topics, pattern)
        if hold is not None:
            raise ClientUnavailable(
                "holding a rebalance (the Spark source's group members) needs the kafka-python "
                "client: the librdkafka client does not offer it"
            )
        if pattern:
            self._pattern = re.compile(pattern)
            names = [pattern if pattern.startswith("^") else "^" + pattern]
        else:
            self._topics = tuple(topics)
            names = list(topics)
        callbacks = self._rebalance
        callbacks.listen(listener)
        self._consumer.subscribe(
            names, on_assign=callbacks.on_assign, on_revoke=callbacks.on_revoke, on_lost=callbacks.on_lost
        )

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        raise ClientUnavailable(
            "fetching partitions without a group (assign) needs the kafka-python client: the "
            "librdkafka client tracks its partitions through the group's assignments"
        )

    def _metadata(self, timeout_ms: int) -> ClusterMetadata:
        """The cluster's metadata (every topic), bounded by ``timeout_ms``."""
        self._gate.require("metadata", timeout_ms / 1000)
        metadata: ClusterMetadata = call_mapped(
            "metadata", lambda: self._consumer.list_topics(timeout=timeout_ms / 1000)
        )
        return metadata

    def topics(self, timeout_ms: int) -> dict[str, set[int]]:
        return {
            name: set(topic.partitions)
            for name, topic in self._metadata(timeout_ms).topics.items()
            if topic.error is None
        }

    def subscribed_partitions(self, timeout_ms: int) -> set[TopicPartition]:
        metadata = self._metadata(timeout_ms)
        out: set[TopicPartition] = set()
        for name, topic in metadata.topics.items():
            wanted = (
                (self._pattern.match(name) is not None and not name.startswith("__"))
                if self._pattern
                else name in self._topics
            )
            if wanted and topic.error is None:
                out.update(TopicPartition(name, p) for p in topic.partitions)
        return out

    # -- fetching ---------------------------------------------------------------
    def poll(self, timeout_ms: int, max_records: int) -> dict[TopicPartition, list[KafkaRecord]]:
        if self._fatal is not None:
            raise KafkaClientError(f"librdkafka fatal error: {self._fatal.name()} ({self._fatal.str()})")
        self._rebalance.check()
        if not self._gate.wait("poll", timeout_ms / 1000):
            return {}
        messages = self._consumer.consume(max_records, timeout_ms / 1000)
        return records_by_partition(messages, self._parts, self._message_error) if messages else {}

    def _message_error(self, err: KafkaError) -> None:
        if err.fatal():
            raise_for("poll", err)
        log.warning("librdkafka: %s (%s)", err.name(), err.str())

    def _on_error(self, err: KafkaError) -> None:
        """librdkafka's error callback (served during poll)."""
        if err.fatal():
            log.error("librdkafka fatal error: %s (%s)", err.name(), err.str())
            if self._fatal is None:
                self._fatal = err
        else:
            log.warning("librdkafka: %s (%s)", err.name(), err.str())

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        tps = self._parts.pause(partitions)
        if tps:
            self._gate.wait("pause", None)
            self._consumer.pause([ck(tp) for tp in sorted(tps)])

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        # Only what is paused: librdkafka before 2.4 could restart a partition that was
        # resumed without being paused from an older position (records handed out twice).
        tps = self._parts.resume(partitions)
        if tps:
            self._gate.wait("resume", None)
            self._consumer.resume([ck(tp) for tp in sorted(tps)])
            for tp, offset in self._parts.take_seeks(tps).items():
                self._seek_now(tp, offset)

    def paused(self) -> set[TopicPartition]:
        return set(self._parts.paused)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        if self._parts.seek(partition, offset):
            self._seek_now(partition, offset)

    def _seek_now(self, partition: TopicPartition, offset: int) -> None:
        seek = Retrying(
            stop=stop_after_delay(SEEK_STATE_WAIT_S),
            wait=wait_fixed(SEEK_STATE_RETRY_S),
            retry=retry_if_exception(fetcher_not_started),
            reraise=True,
        )
        self._gate.wait("seek", None)
        try:
            seek(self._consumer.seek, ck(partition, offset))
        except KafkaException as exc:
            err = error_of(exc)
            raise KafkaClientError(f"seek {partition} to {offset}: {err.str() if err else exc}") from exc
        self._parts.sought(partition, offset)

    def position(self, partition: TopicPartition, timeout_ms: int) -> int:
        known = self._parts.positions.get(partition)
        if known is not None:
            return known
        self._gate.require("position", timeout_ms / 1000)
        [pos] = self._consumer.position([ck(partition)])
        if pos.offset >= NO_OFFSET:
            return int(pos.offset)
        committed = self.committed([partition], timeout_ms)[partition]
        if committed is not None:
            return committed
        return self._lookups.reset_offset(partition, timeout_ms)

    # -- offsets ----------------------------------------------------------------
    def commit(self, offsets: Mapping[TopicPartition, int], timeout_ms: int) -> None:
        """Synchronous, on this client's caller thread, bounded by ``timeout_ms``
        (:func:`~cr_consumer.kafka.librdkafka.commit.commit_offsets`)."""
        commit_offsets(self._consumer, self._caller, offsets, timeout_ms)

    def committed(self, partitions: Iterable[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int | None]:
        self._gate.require("committed", timeout_ms / 1000)
        return self._lookups.committed(partitions, timeout_ms)

    def beginning_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int]:
        self._gate.require("beginning offsets", timeout_ms / 1000)
        return self._lookups.beginning_offsets(partitions, timeout_ms)

    def end_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int]:
        self._gate.require("end offsets", timeout_ms / 1000)
        return self._lookups.end_offsets(partitions, timeout_ms)

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], timeout_ms: int
    ) -> dict[TopicPartition, int | None]:
        self._gate.require("offsets for times", timeout_ms / 1000)
        return self._lookups.offsets_for_times(timestamps, timeout_ms)

    def highwater(self, partition: TopicPartition) -> int | None:
        if not self._gate.wait("highwater", 0.0):
            return None  # not known without blocking
        try:
            _low, high = self._consumer.get_watermark_offsets(ck(partition), cached=True)
        except KafkaException:
            return None  # not assigned (any more): no fetch response to read
        return int(high) if high is not None and high >= NO_OFFSET else None

    # -- group --------------------------------------------------------------------
    def assignment(self) -> set[TopicPartition]:
        """As set by the rebalance callbacks (no librdkafka call: asking librdkafka
        from another thread while a poll is inside a rebalance callback blocks)."""
        return set(self._parts.assigned)

    def group(self) -> GroupMembership:
        """The member id is asked from librdkafka only while unknown or after a
        rebalance callback (when it may have changed): each ask is a round trip
        through librdkafka's main thread, and the event thread calls this after
        every poll (thousands of times a second at full speed)."""
        if (self._member_id is None or self._rebalance.member_changed) and self._gate.wait("member id", 0.0):
            self._rebalance.member_id_read()
            try:
                self._member_id = self._consumer.memberid() or None
            except (KafkaException, RuntimeError):
                self._member_id = None
        return GroupMembership(member_id=self._member_id, generation=None, rebalancing=self._rebalance.rebalancing)

    def request_rejoin(self) -> bool:
        """librdkafka has no call for it: False (the broker starts the rebalance)."""
        return False

    def close(self, timeout_ms: int) -> None:
        """Leave the group and free the client; a second call does nothing."""
        if self._closing:
            return
        self._closing = True
        self._rebalance.mute()
        try:
            self._caller.run(self._consumer.close, timeout_ms / 1000, "close")
        except ClientTimeout:
            log.error("librdkafka consumer did not close within %d ms; its caller thread finishes it", timeout_ms)
            raise
        except (KafkaException, RuntimeError) as exc:
            raise KafkaClientError(f"close: {exc!r}") from exc
        finally:
            self._caller.shutdown()


__all__ = ["LibrdkafkaClient"]
