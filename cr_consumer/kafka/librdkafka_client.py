"""The librdkafka (confluent-kafka) implementation of :class:`~cr_consumer.kafka.client.KafkaClient`.

Installed with the ``[librdkafka]`` extra; importing this module without it raises
:class:`~cr_consumer.kafka.client.ClientUnavailable` naming the extra.

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
3. ``commit`` is librdkafka's synchronous commit, run on this client's worker
   thread so that it is bounded by ``timeout_ms`` (librdkafka's synchronous
   commit takes no timeout); a commit still running after its timeout
   (:class:`ClientTimeout`, outcome unknown) finishes on the worker. ``close``
   is bounded the same way and does not call the listener (the operator is closing).
4. ``highwater`` is librdkafka's cached high watermark of the last fetch
   response; ``end_offsets`` asks the broker (ListOffsets).
5. A fatal librdkafka error (``error_cb``) fails the next ``poll``; other errors
   are logged (librdkafka retries them itself).

Properties: standard dotted names; the adapter's defaults for librdkafka
settings (:data:`DEFAULTS`) apply unless given; kafka-python's and the Java client's
spellings of the few settings librdkafka names otherwise are mapped
(:data:`RENAMED`); ``partition.assignment.strategy`` is read by
:mod:`cr_consumer.kafka.assignors` (librdkafka's names are the standard ones);
``metadata.max.age.ms`` also sets how often a pattern
subscription looks for new topics; anything else is passed to librdkafka, which
refuses names it does not know (:class:`ClientConfigError`). A pattern is
subscribed as ``^pattern``: write it in the syntax both Python's ``re`` and
librdkafka's regex engine read (``. * + ? [] () | $``).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TypeVar

from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_fixed

from cr_consumer.kafka.assignors import parse_strategy, strategy_of
from cr_consumer.kafka.client import (
    ClientConfigError,
    ClientKind,
    ClientTimeout,
    ClientUnavailable,
    CommitRefused,
    GroupMembership,
    KafkaClientError,
    KafkaRecord,
    MemberFenced,
    RebalanceListener,
    RebalanceProtocol,
    TimestampType,
    TopicPartition,
    UnknownTopicOrPartition,
    check_guarantees,
)
from cr_consumer.kafka.subscription import check_subscription

try:
    from confluent_kafka import Consumer, KafkaError, KafkaException
    from confluent_kafka import TopicPartition as CkTopicPartition
except ImportError as exc:  # the optional extra
    raise ClientUnavailable(
        "the librdkafka Kafka client needs the confluent-kafka package: "
        "pip install 'cr-consumer[librdkafka]' (or choose the kafka-python client)") from exc

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Other clients' names of settings librdkafka spells otherwise (dotted -> librdkafka).
RENAMED: Mapping[str, str] = {
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "request.timeout.ms": "socket.timeout.ms",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
    "sasl.mechanism": "sasl.mechanisms",
    "sasl.plain.username": "sasl.username",
    "sasl.plain.password": "sasl.password",
    "ssl.cafile": "ssl.ca.location",
    "ssl.certfile": "ssl.certificate.location",
    "ssl.keyfile": "ssl.key.location",
    "ssl.password": "ssl.key.password",
    "ssl.crlfile": "ssl.crl.location",
    "ssl.ciphers": "ssl.cipher.suites",
}
#: librdkafka settings this adapter sets unless the properties give them (docs/clients.md):
#:
#: * ``fetch.queue.backoff.ms`` (librdkafka: 1000): how long a partition's next
#:   fetch waits once the local queue holds more than ``queued.min.messages``
#:   (100k) records. One fetch response from a broker with a backlog holds
#:   ~50k 100-byte records (1 MB per partition), so two or three responses
#:   pass that mark and the fetcher then idles for a whole second while the
#:   application drains the queue in a fraction of it: a bare consume loop got
#:   ~220k records/s from the embedded broker with the library's value and
#:   0.8-1.5M with 20 ms (BENCHMARKS.md, pacing). 20 ms rechecks the queue
#:   often enough for millions of records/s; a recheck costs a timer wake-up
#:   of librdkafka's broker thread, nothing else.
DEFAULTS: Mapping[str, object] = {"fetch.queue.backoff.ms": 20}
#: Settings this class uses itself (not passed to librdkafka): the poll's record cap
#: is the ``max_records`` argument of poll.
CONSUMED = frozenset({"max.poll.records"})
#: Settings that make no sense for a client that hands out raw bytes.
UNSUPPORTED: Mapping[str, str] = {
    "key.deserializer": "records carry raw bytes; decode in the operator (OperatorConfig.key_deserializer)",
    "value.deserializer": "records carry raw bytes; decode in the operator (OperatorConfig.value_deserializer)",
}
#: librdkafka's errors that mean "the group refused the commit because of a rebalance".
_REFUSED_CODES = frozenset(
    getattr(KafkaError, name) for name in (
        "REBALANCE_IN_PROGRESS", "ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "FENCED_INSTANCE_ID",
        "STALE_MEMBER_EPOCH", "_ASSIGNMENT_LOST")
    if hasattr(KafkaError, name))
#: Of those, the ones that mean "this consumer is no longer the group's member"
#: (MemberFenced): everything but a rebalance in progress.
_FENCED_CODES = _REFUSED_CODES - {KafkaError.REBALANCE_IN_PROGRESS}
_UNKNOWN_CODES = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION})
#: How long a seek is retried while librdkafka answers ``_STATE`` ("Erroneous
#: state": the partition was just assigned or resumed and its fetcher has not
#: started yet; its broker thread starts it without a poll). Failing at once
#: lost the seek (the operator's region reset); a seek that still fails after
#: this is an error (the partition is not ours).
SEEK_STATE_WAIT_S = 5.0
#: Pause between two seek attempts while the fetcher starts.
SEEK_STATE_RETRY_S = 0.005
#: Bound on resolving the absolute start offsets of an assignment
#: (LibrdkafkaClient._start_offsets: OffsetFetch, then ListOffsets): a broker
#: that does not answer fails the poll instead of stalling the group join
#: (whose rebalance timeout is max.poll.interval.ms, minutes).
ASSIGN_LOOKUP_TIMEOUT_MS = 10_000
#: librdkafka's timestamp type (0 none, 1 create, 2 log append) -> TimestampType.
_TIMESTAMP_TYPES = (TimestampType.NOT_AVAILABLE, TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME)
#: Offsets below 0 are librdkafka's "no offset" markers (OFFSET_INVALID, _END, ...).
_NO_OFFSET = 0


def librdkafka_config(properties: Mapping[str, object]) -> dict[str, object]:
    """librdkafka settings for ``properties`` (see the module docstring)."""
    cfg: dict[str, object] = {}
    for key, value in check_guarantees(properties).items():
        if key in UNSUPPORTED:
            raise ClientConfigError(f"Kafka property {key!r}: {UNSUPPORTED[key]}")
        if key in CONSUMED:
            continue
        if key == "ssl.check.hostname":
            cfg["ssl.endpoint.identification.algorithm"] = "https" if value in (True, "true", "True", 1) else "none"
            continue
        cfg[RENAMED.get(key, key)] = value
    if "partition.assignment.strategy" in cfg:
        cfg["partition.assignment.strategy"] = str(parse_strategy(cfg["partition.assignment.strategy"]))
    if "metadata.max.age.ms" in cfg:
        cfg.setdefault("topic.metadata.refresh.interval.ms", cfg["metadata.max.age.ms"])
    for key, value in DEFAULTS.items():
        cfg.setdefault(key, value)
    cfg.update({"enable.auto.commit": False, "enable.auto.offset.store": False, "enable.partition.eof": False})
    return cfg


def _ck(tp: TopicPartition, offset: int | None = None) -> CkTopicPartition:
    if offset is None:
        return CkTopicPartition(tp.topic, tp.partition)
    return CkTopicPartition(tp.topic, tp.partition, offset)


def _tps(partitions: Iterable[CkTopicPartition]) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(p.topic, p.partition) for p in partitions)


def _fetcher_not_started(exc: BaseException) -> bool:
    """librdkafka's ``_STATE`` answer to a seek: the partition's fetcher is not running yet."""
    err = _error_of(exc) if isinstance(exc, KafkaException) else None
    return err is not None and err.code() == KafkaError._STATE


def _error_of(exc: KafkaException) -> KafkaError | None:
    err = exc.args[0] if exc.args else None
    return err if isinstance(err, KafkaError) else None


def _refusal(err: KafkaError, what: str) -> CommitRefused:
    """CommitRefused for a rebalance in progress (the consumer keeps its
    partitions), MemberFenced for the others (it lost them)."""
    if err.code() in _FENCED_CODES:
        return MemberFenced(f"{what} refused: the group no longer knows this consumer: {err.name()} ({err.str()})")
    return CommitRefused(f"{what} refused by the group (rebalance): {err.name()} ({err.str()})")


def _raise_for(what: str, err: KafkaError, cause: BaseException | None = None) -> None:
    code = err.code()
    message = f"{what}: {err.name()} ({err.str()})"
    if code == KafkaError._TIMED_OUT:
        raise ClientTimeout(message) from cause
    if code in _UNKNOWN_CODES:
        raise UnknownTopicOrPartition(message) from cause
    raise KafkaClientError(message) from cause


class LibrdkafkaClient:
    """:class:`~cr_consumer.kafka.client.KafkaClient` on librdkafka (see the module docstring)."""

    #: Set while an assignment callback runs (polling thread): seeks and pauses of
    #: these partitions are collected into _pending_seeks / _pending_pauses.
    _assigning: frozenset[TopicPartition] | None
    #: Next offset per partition as the caller sees it (polling thread only).
    _positions: dict[TopicPartition, int]
    #: The assignment: replaced (never mutated) by the rebalance callbacks on the
    #: polling thread, so a reader on any thread sees a whole set.
    _assigned: set[TopicPartition]
    #: The first fatal error reported by librdkafka (its thread); raised by poll.
    _fatal: KafkaError | None

    def __init__(self, properties: Mapping[str, object]) -> None:
        cfg = librdkafka_config(properties)
        self._auto_offset_reset = str(cfg.get("auto.offset.reset", "latest"))
        self._protocol = strategy_of(properties).protocol
        cfg["error_cb"] = self._on_error
        cfg["logger"] = logging.getLogger("cr_consumer.kafka.librdkafka")
        self._fatal = None
        try:
            self._consumer = Consumer(cfg)
        except KafkaException as exc:
            err = _error_of(exc)
            raise ClientConfigError(f"librdkafka refused the properties: {err.str() if err else exc}") from exc
        self._listener: RebalanceListener | None = None
        self._closing = False
        self._assigning = None
        self._pending_seeks: dict[TopicPartition, int] = {}
        #: Seeks of paused partitions, applied right after their resume (module docstring, step 1).
        self._seek_on_resume: dict[TopicPartition, int] = {}
        self._pending_pauses: set[TopicPartition] = set()
        self._paused: set[TopicPartition] = set()
        self._assigned: set[TopicPartition] = set()
        self._positions = {}
        self._topics: tuple[str, ...] = ()
        self._pattern: re.Pattern[str] | None = None
        self._rebalancing = True
        # One worker for the calls librdkafka cannot bound (commit, close); owned here,
        # shut down by close().
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cr-librdkafka")

    @property
    def kind(self) -> ClientKind:
        return ClientKind.LIBRDKAFKA

    @property
    def rebalance_protocol(self) -> RebalanceProtocol:
        return self._protocol

    @property
    def pause_drops_fetched(self) -> bool:
        """librdkafka purges a paused partition's prefetched records (client.py)."""
        return True

    # -- subscription and rebalance callbacks ---------------------------------
    def subscribe(self, topics: Sequence[str] = (), *, pattern: str | None = None,
                  listener: RebalanceListener) -> None:
        check_subscription(topics, pattern)
        self._listener = listener
        if pattern:
            self._pattern = re.compile(pattern)
            subscription = [pattern if pattern.startswith("^") else "^" + pattern]
        else:
            self._topics = tuple(topics)
            subscription = list(topics)
        self._rebalancing = True
        self._consumer.subscribe(subscription, on_assign=self._on_assign, on_revoke=self._on_revoke,
                                 on_lost=self._on_lost)

    def _on_assign(self, consumer: Consumer, partitions: list[CkTopicPartition]) -> None:
        tps = _tps(partitions)
        self._pending_seeks, self._pending_pauses = {}, set()
        self._assigning = tps
        try:
            if self._listener is not None and not self._closing:
                self._listener.on_assigned(tps)
        finally:
            self._assigning = None
            seeks, pauses = self._pending_seeks, self._pending_pauses
            self._pending_seeks, self._pending_pauses = {}, set()
            starts = {**self._start_offsets(tps - seeks.keys()), **seeks}
            start = [_ck(tp, starts[tp]) if tp in starts else _ck(tp) for tp in sorted(tps)]
            if self._protocol is RebalanceProtocol.COOPERATIVE:
                consumer.incremental_assign(start)
            else:
                consumer.assign(start)
            self._positions.update(starts)
            self._assigned = self._assigned | tps if self._protocol is RebalanceProtocol.COOPERATIVE else set(tps)
            if pauses:
                consumer.pause([_ck(tp) for tp in sorted(pauses)])
                self._paused |= pauses
            self._rebalancing = False

    def _start_offsets(self, tps: frozenset[TopicPartition] | set[TopicPartition]) -> dict[TopicPartition, int]:
        """Absolute start offsets of partitions assigned without a seek: the
        committed offset, else what ``auto.offset.reset`` names (the low or high
        watermark); none for a policy that is neither (librdkafka then reports
        the partition's error itself).

        Assigned at a logical offset, librdkafka looks the offset up itself, and a
        seek made while that lookup is in flight (the operator seeks a partition it
        held at the assignment once the region tells it where) makes the lookup's
        answer outdated: librdkafka then re-arms the lookup of the same logical
        offset on a timer and, half a second after the seek, moves the fetch to
        the log end, skipping every record in between while the operator's
        offsets (and so its commits) follow. Assigned at an absolute offset, no
        lookup is ever started. Runs in the assignment callback (the polling
        thread), bounded by :data:`ASSIGN_LOOKUP_TIMEOUT_MS`; a failed lookup fails
        the poll (the operator fails and is restarted: never a silent skip)."""
        if not tps:
            return {}
        out = {tp: off for tp, off in self.committed(tps, ASSIGN_LOOKUP_TIMEOUT_MS).items() if off is not None}
        rest = set(tps) - out.keys()
        if rest and self._auto_offset_reset in ("earliest", "smallest", "beginning"):
            out.update(self.beginning_offsets(rest, ASSIGN_LOOKUP_TIMEOUT_MS))
        elif rest and self._auto_offset_reset in ("latest", "largest", "end"):
            out.update(self.end_offsets(rest, ASSIGN_LOOKUP_TIMEOUT_MS))
        return out

    def _on_revoke(self, consumer: Consumer, partitions: list[CkTopicPartition]) -> None:
        self._give_up(consumer, partitions, lost=False)

    def _on_lost(self, consumer: Consumer, partitions: list[CkTopicPartition]) -> None:
        self._give_up(consumer, partitions, lost=True)

    def _give_up(self, consumer: Consumer, partitions: list[CkTopicPartition], *, lost: bool) -> None:
        tps = _tps(partitions)
        self._rebalancing = True
        try:
            if self._listener is not None and not self._closing:
                if lost:
                    self._listener.on_lost(tps)
                else:
                    self._listener.on_revoked(tps)
        finally:
            if self._protocol is RebalanceProtocol.COOPERATIVE:
                consumer.incremental_unassign(partitions)
            else:
                consumer.unassign()
            self._assigned = self._assigned - tps if self._protocol is RebalanceProtocol.COOPERATIVE else set()
            self._paused -= tps
            for tp in tps:
                self._positions.pop(tp, None)
                self._seek_on_resume.pop(tp, None)

    def subscribed_partitions(self, timeout_ms: int) -> set[TopicPartition]:
        try:
            metadata = self._consumer.list_topics(timeout=timeout_ms / 1000)
        except KafkaException as exc:
            err = _error_of(exc)
            if err is None:
                raise KafkaClientError(f"metadata: {exc!r}") from exc
            _raise_for("metadata", err, exc)
        out: set[TopicPartition] = set()
        for name, topic in metadata.topics.items():
            wanted = (self._pattern.match(name) is not None and not name.startswith("__")) if self._pattern \
                else name in self._topics
            if wanted and topic.error is None:
                out.update(TopicPartition(name, p) for p in topic.partitions)
        return out

    # -- fetching ---------------------------------------------------------------
    def poll(self, timeout_ms: int, max_records: int) -> dict[TopicPartition, list[KafkaRecord]]:
        if self._fatal is not None:
            raise KafkaClientError(f"librdkafka fatal error: {self._fatal.name()} ({self._fatal.str()})")
        messages = self._consumer.consume(max_records, timeout_ms / 1000)
        out: dict[TopicPartition, list[KafkaRecord]] = {}
        if not messages:
            return out
        types = _TIMESTAMP_TYPES
        new, record = tuple.__new__, KafkaRecord  # the NamedTuple without its Python-level __new__
        last_topic: str | None = None
        last_partition = -1
        bucket: list[KafkaRecord] | None = None
        refetch: dict[TopicPartition, int] = {}
        # A message without an error always has its topic, partition and offset (the
        # library's types say "or None" for error events): hence the ignores below.
        for m in messages:
            err = m.error()
            if err is not None:
                self._message_error(err)
                continue
            topic: str = m.topic()  # type: ignore[assignment]
            partition: int = m.partition()  # type: ignore[assignment]
            if partition != last_partition or topic != last_topic:
                last_topic, last_partition = topic, partition
                tp = TopicPartition(topic, partition)
                # a paused partition yields nothing (what kafka-python does); its
                # records are fetched again after resume (the seek back below)
                bucket = None if tp in self._paused else out.setdefault(tp, [])
            if bucket is None:
                refetch.setdefault(TopicPartition(topic, partition), m.offset())  # type: ignore[arg-type]
                continue
            ts_type, ts = m.timestamp()
            headers = m.headers()
            bucket.append(new(record, (topic, partition, m.offset(), ts if ts_type else None,
                                       types[ts_type], m.key(), m.value(), tuple(headers) if headers else ())))
        for tp, records in out.items():
            self._positions[tp] = records[-1].offset + 1
        for tp, offset in refetch.items():
            log.debug("records of paused %s from offset %d are fetched again after resume", tp, offset)
            # an earlier seek (or refetch) of the paused partition is the lower position: it stays
            self._positions[tp] = self._seek_on_resume.setdefault(tp, offset)
        return {tp: records for tp, records in out.items() if records}

    def _message_error(self, err: KafkaError) -> None:
        if err.fatal():
            _raise_for("poll", err)
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
        tps = set(partitions)
        if self._assigning is not None:
            self._pending_pauses |= tps & self._assigning
            tps -= self._assigning
        if tps:
            self._consumer.pause([_ck(tp) for tp in sorted(tps)])
            self._paused |= tps

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        tps = set(partitions)
        if self._assigning is not None:
            self._pending_pauses -= tps
        # Only what is paused: librdkafka before 2.4 could restart a partition that was
        # resumed without being paused from an older position (records handed out twice).
        tps &= self._paused
        if tps:
            self._consumer.resume([_ck(tp) for tp in sorted(tps)])
            self._paused -= tps
            for tp in sorted(tps & self._seek_on_resume.keys()):
                self._seek_now(tp, self._seek_on_resume.pop(tp))

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        if self._assigning is not None and partition in self._assigning:
            self._pending_seeks[partition] = offset
            return
        if partition in self._paused:
            self._seek_on_resume[partition] = offset
            self._positions[partition] = offset
            return
        self._seek_on_resume.pop(partition, None)
        self._seek_now(partition, offset)

    def _seek_now(self, partition: TopicPartition, offset: int) -> None:
        seek = Retrying(stop=stop_after_delay(SEEK_STATE_WAIT_S), wait=wait_fixed(SEEK_STATE_RETRY_S),
                        retry=retry_if_exception(_fetcher_not_started), reraise=True)
        try:
            seek(self._consumer.seek, _ck(partition, offset))
        except KafkaException as exc:
            err = _error_of(exc)
            raise KafkaClientError(f"seek {partition} to {offset}: {err.str() if err else exc}") from exc
        self._positions[partition] = offset

    def position(self, partition: TopicPartition, timeout_ms: int) -> int:
        known = self._positions.get(partition)
        if known is not None:
            return known
        [pos] = self._consumer.position([_ck(partition)])
        if pos.offset >= _NO_OFFSET:
            return int(pos.offset)
        committed = self.committed([partition], timeout_ms)[partition]
        if committed is not None:
            return committed
        if self._auto_offset_reset in ("earliest", "smallest", "beginning"):
            return self.beginning_offsets([partition], timeout_ms)[partition]
        if self._auto_offset_reset in ("latest", "largest", "end"):
            return self.end_offsets([partition], timeout_ms)[partition]
        raise KafkaClientError(f"position of {partition}: no committed offset and auto.offset.reset is "
                               f"{self._auto_offset_reset!r}")

    # -- offsets ----------------------------------------------------------------
    def commit(self, offsets: Mapping[TopicPartition, int], timeout_ms: int) -> None:
        request = [_ck(tp, int(off)) for tp, off in sorted(offsets.items())]
        if not request:
            return
        try:
            result = self._bounded(lambda: self._consumer.commit(offsets=request, asynchronous=False), timeout_ms,
                                   "commit (outcome unknown)")
        except KafkaException as exc:
            err = _error_of(exc)
            if err is not None and err.code() in _REFUSED_CODES:
                raise _refusal(err, "commit") from exc
            if err is None:
                raise KafkaClientError(f"commit failed: {exc!r}") from exc
            _raise_for("commit", err, exc)
        for p in result or ():
            if p.error is not None:
                if p.error.code() in _REFUSED_CODES:
                    raise _refusal(p.error, f"commit of {p.topic}[{p.partition}]")
                _raise_for(f"commit of {p.topic}[{p.partition}]", p.error)

    def _bounded(self, call: Callable[[], T], timeout_ms: int, what: str) -> T:
        """Run ``call`` on the worker thread; ClientTimeout after ``timeout_ms`` (it goes on there)."""
        future: Future[T] = self._worker.submit(call)
        try:
            return future.result(timeout_ms / 1000)
        except FutureTimeout:
            raise ClientTimeout(f"{what}: no answer within {timeout_ms} ms") from None

    def committed(self, partitions: Iterable[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int | None]:
        request = [_ck(tp) for tp in partitions]
        if not request:
            return {}
        found = self._lookup("committed offsets", lambda: self._consumer.committed(request, timeout=timeout_ms / 1000))
        out: dict[TopicPartition, int | None] = {}
        for p in found:
            if p.error is not None:
                _raise_for(f"committed offset of {p.topic}[{p.partition}]", p.error)
            out[TopicPartition(p.topic, p.partition)] = p.offset if p.offset >= _NO_OFFSET else None
        return out

    def _watermarks(self, partitions: Iterable[TopicPartition], timeout_ms: int) -> dict[TopicPartition, tuple[int, int]]:
        end = time.monotonic() + timeout_ms / 1000
        out = {}
        for tp in partitions:
            left = max(0.001, end - time.monotonic())

            def query(tp: TopicPartition = tp, left: float = left) -> tuple[int, int]:
                low, high = self._consumer.get_watermark_offsets(_ck(tp), timeout=left)
                return int(low), int(high)

            out[tp] = self._lookup(f"watermarks of {tp}", query)
        return out

    def beginning_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int]:
        return {tp: low for tp, (low, _high) in self._watermarks(partitions, timeout_ms).items()}

    def end_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: int) -> dict[TopicPartition, int]:
        return {tp: high for tp, (_low, high) in self._watermarks(partitions, timeout_ms).items()}

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int],
                          timeout_ms: int) -> dict[TopicPartition, int | None]:
        request = [_ck(tp, int(ts)) for tp, ts in timestamps.items()]
        if not request:
            return {}
        found = self._lookup("offsets for times",
                             lambda: self._consumer.offsets_for_times(request, timeout=timeout_ms / 1000))
        out: dict[TopicPartition, int | None] = {}
        for p in found:
            if p.error is not None:
                _raise_for(f"offset for time of {p.topic}[{p.partition}]", p.error)
            out[TopicPartition(p.topic, p.partition)] = p.offset if p.offset >= _NO_OFFSET else None
        return out

    @staticmethod
    def _lookup(what: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except KafkaException as exc:
            err = _error_of(exc)
            if err is None:
                raise KafkaClientError(f"{what}: {exc!r}") from exc
            _raise_for(what, err, exc)
            raise  # unreachable: _raise_for always raises

    def highwater(self, partition: TopicPartition) -> int | None:
        try:
            _low, high = self._consumer.get_watermark_offsets(_ck(partition), cached=True)
        except KafkaException:
            return None  # not assigned (any more): no fetch response to read
        return int(high) if high is not None and high >= _NO_OFFSET else None

    # -- group --------------------------------------------------------------------
    def assignment(self) -> set[TopicPartition]:
        """As set by the rebalance callbacks (no librdkafka call: asking librdkafka
        from another thread while a poll is inside a rebalance callback blocks)."""
        return set(self._assigned)

    def group(self) -> GroupMembership:
        try:
            member = self._consumer.memberid()
        except (KafkaException, RuntimeError):
            member = None
        return GroupMembership(member_id=member or None, generation=None, rebalancing=self._rebalancing)

    def request_rejoin(self) -> bool:
        """librdkafka has no call for it: False (the broker starts the rebalance)."""
        return False

    def close(self, timeout_ms: int) -> None:
        """Leave the group and free the client; a second call does nothing."""
        if self._closing:
            return
        self._closing = True
        try:
            self._bounded(self._consumer.close, timeout_ms, "close")
        except ClientTimeout:
            log.error("librdkafka consumer did not close within %d ms; its worker thread finishes it", timeout_ms)
            raise
        except (KafkaException, RuntimeError) as exc:
            raise KafkaClientError(f"close: {exc!r}") from exc
        finally:
            self._worker.shutdown(wait=False)


__all__ = ["DEFAULTS", "LibrdkafkaClient", "RENAMED", "librdkafka_config"]
