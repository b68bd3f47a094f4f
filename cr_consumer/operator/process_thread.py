"""The process thread: takes batches from the message queue and submits them.

For each batch (one partition's records from one poll):

1. take it from the message queue (waiting at most :data:`GET_TIMEOUT_S`);
   there is no separate drain buffer: records fetched before a drain stay in
   the queue and are submitted after it, in fetch order (see handlers.py);
2. drop it if it was polled before the last reset (its epoch is older);
3. acquire the region permit (retrying every :data:`PERMIT_TIMEOUT_S` while the
   runtime holds it for a drain/checkpoint/reset: the batch is kept, so a batch
   taken before a drain is submitted after it, and dropped after a reset
   because the epoch check is repeated under the permit); further batches
   that are already queued are submitted under the same permit unless the
   runtime is waiting for it (fewer thread hand-offs);
4. in operator-driven mode cut the batch at the trigger-count boundary;
5. decode keys/values if deserialisers are configured (a malformed record is
   counted and skipped, fails the operator naming topic/partition/offset, or
   goes downstream as an :class:`Undecodable` item, by ``on_malformed``);
6. submit: ``submit_batch(records)`` if given (the fast path), else
   ``submit(record)`` per record;
7. record the batch's end in the offset manager (once per batch): last offset + 1, or past
   the aborted records and markers the source dropped after it (``Batch.end``);
8. release the permit; in operator-driven mode, when trigger-count tuples were
   submitted since the last drain, ask the region for a drain and wait for it.

Records are :class:`~cr_consumer.kafka.client.KafkaRecord` NamedTuples (topic,
partition, offset, timestamp, timestamp_type, key, value, headers), the same
shape whichever Kafka client fetched them, passed on without copies unless
decoded (a decoded record is the same type with key/value replaced).
An exception from submit (or a malformed record under policy FAIL) is fatal:
it is logged and handed to ``on_failure``; the thread ends.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from typing import Any

import attrs

from cr_consumer.kafka.client import KafkaRecord
from cr_consumer.operator.config import Deserializer, MalformedPolicy
from cr_consumer.operator.message_queue import Batch, BatchQueue
from cr_consumer.operator.offset_manager import OffsetManager
from cr_consumer.operator.region import RegionPermit

log = logging.getLogger(__name__)

#: Wait for the next batch; bounds how late the thread notices a stop request.
GET_TIMEOUT_S = 0.1
#: Wait for the permit while the runtime holds it; bounds the reaction to stop.
PERMIT_TIMEOUT_S = 0.1


class MalformedRecord(ValueError):
    """A record's key or value could not be deserialised."""


@attrs.frozen
class Undecodable:
    """A record the deserialisers could not decode, as it was fetched, and the deserialiser's
    error: what the decoder submits in its place under ``MalformedPolicy.DEAD_LETTER``."""

    record: KafkaRecord
    error: Exception


#: What submits records downstream: Any, the records (KafkaRecord, or decoded
#: copies whose key/value are the deserialisers' types).
SubmitRecord = Callable[[Any], object]
SubmitBatch = Callable[[list[Any]], object]


class Decoder:
    """Applies the configured deserialisers to a batch (process thread)."""

    def __init__(self, key_fn: Deserializer | None, value_fn: Deserializer | None, policy: MalformedPolicy) -> None:
        self.key_fn = key_fn
        self.value_fn = value_fn
        self.policy = policy
        self.n_dropped = 0

    def __call__(self, records: list[KafkaRecord]) -> list[Any]:
        """The decoded copies (Any: their key and value are the deserialisers' types)."""
        key_fn, value_fn = self.key_fn, self.value_fn
        out: list[Any] = []
        for r in records:
            try:
                changes: dict[str, Any] = {}
                if key_fn is not None:
                    changes["key"] = key_fn(r.key)
                if value_fn is not None:
                    changes["value"] = value_fn(r.value)
            except Exception as exc:  # handed downstream, counted/skipped or re-raised below
                if self.policy is MalformedPolicy.DEAD_LETTER:
                    out.append(Undecodable(r, exc))
                    continue
                self.n_dropped += 1
                where = f"topic {r.topic} partition {r.partition} offset {r.offset}"
                if self.policy is MalformedPolicy.FAIL:
                    raise MalformedRecord(f"cannot deserialise the record at {where}: {exc!r}") from exc
                log.warning("dropping malformed record at %s: %r", where, exc)
                continue
            out.append(r._replace(**changes))
        return out


def per_record(submit: SubmitRecord) -> SubmitBatch:
    """submit(record) for each record of a batch, without a Python-level loop per record."""

    def submit_each(records: list[Any]) -> None:
        collections.deque(map(submit, records), maxlen=0)

    return submit_each


class ProcessThread:
    """The thread that submits queued batches (see the module docstring).

    Injected: the queue, permit and offset manager it shares with the other
    parts; ``epoch()`` (the current reset epoch); ``submit``/``submit_batch``;
    ``on_trigger()`` (operator-driven: called after the permit is released,
    may block until the drain); ``on_failure(exc)``, called once if the loop dies.
    """

    #: Tuples submitted since the last drain (operator-driven mode): written by
    #: this thread under the permit, and set to 0 by reset_trigger() from the
    #: handler caller during a drain, which holds the permit blocked: the two
    #: never write at once, so no lock.
    _since_drain: int
    #: Counters this thread writes and metrics read.
    n_submitted: int
    n_dropped_stale: int
    #: The fatal error, if any; written once by this thread.
    failure: BaseException | None

    def __init__(
        self,
        name: str,
        *,
        queue: BatchQueue,
        permit: RegionPermit,
        offsets: OffsetManager,
        epoch: Callable[[], int],
        submit_batch: SubmitBatch,
        decoder: Decoder | None,
        trigger_count: int | None,
        on_trigger: Callable[[], None],
        on_failure: Callable[[BaseException], None],
    ) -> None:
        self.name = name
        self._queue = queue
        self._permit = permit
        self._offsets = offsets
        self._epoch = epoch
        self._submit_batch = submit_batch
        self._decoder = decoder
        self._trigger = trigger_count
        self._on_trigger = on_trigger
        self._on_failure = on_failure
        self._since_drain = 0
        self._stop = threading.Event()
        self.n_submitted = 0
        self.n_dropped_stale = 0
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"cr-process-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.error("%s: process thread did not stop within %.1fs (submit blocked?)", self.name, timeout)

    def reset_trigger(self) -> None:
        """A drain happened: count trigger-count tuples from zero again."""
        self._since_drain = 0

    def _next(self, wait: bool = True) -> Batch | None:
        return self._queue.get(GET_TIMEOUT_S if wait else 0.0)

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # kept and reported as the operator's failure
            log.exception("%s: process thread failed", self.name)
            self.failure = exc
            self._on_failure(exc)

    def _loop(self) -> None:
        permit = self._permit
        pending: Batch | None = None
        while not self._stop.is_set():
            if pending is None:
                pending = self._next()
                if pending is None:
                    continue
            if pending.epoch != self._epoch():
                self.n_dropped_stale += len(pending.records)
                pending = None
                continue
            if not permit.acquire(PERMIT_TIMEOUT_S):
                continue
            triggered = False
            try:
                if pending.epoch != self._epoch():  # a reset ran while we waited
                    self.n_dropped_stale += len(pending.records)
                    pending = None
                    continue
                pending, triggered = self._process(pending)
                # More batches ready? Submit them under the same permit, unless
                # the runtime is waiting for it (drain/checkpoint/reset).
                while pending is None and not triggered and not permit.blocked:
                    nxt = self._next(wait=False)
                    if nxt is None:
                        break
                    if nxt.epoch != self._epoch():
                        self.n_dropped_stale += len(nxt.records)
                        continue
                    pending, triggered = self._process(nxt)
            finally:
                permit.release()
            if triggered:
                self._on_trigger()

    def _process(self, batch: Batch) -> tuple[Batch | None, bool]:
        records = batch.records
        rest = None
        triggered = False
        if self._trigger is not None:
            room = self._trigger - self._since_drain
            if records and len(records) >= room:
                records, rest = records[:room], records[room:]
                triggered = True
                self._since_drain = 0
            else:
                self._since_drain += len(records)
        end = records[-1].offset + 1 if rest else batch.end
        out = self._decoder(records) if self._decoder is not None else records
        if out:
            self._submit_batch(out)
            self.n_submitted += len(out)
        self._offsets.update(batch.tp, end)
        if rest:
            return Batch(batch.epoch, batch.tp, rest, batch.end), triggered
        return None, triggered


__all__ = ["Decoder", "MalformedRecord", "ProcessThread", "SubmitBatch", "SubmitRecord", "Undecodable", "per_record"]
