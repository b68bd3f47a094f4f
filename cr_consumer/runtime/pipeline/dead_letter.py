"""A pipeline's dead-letter path: records whose processing fails go to a dead-letter sink.

A pipeline has one of two error policies (``docs/pipelines.md``, "Errors and the dead-letter
sink"): *fail* (the default), where an exception of any stage fails the whole batch (the member
is marked broken and the region resets), or *dead-letter*, chosen by giving the pipeline a
dead-letter sink (``Pipeline(source, dead_letter=sink)``). Under dead-letter, one batch goes
through :meth:`DeadLetterRouter.process` on the source's process thread:

1. Records the source could not deserialise come as ``Undecodable`` items (the source's
   ``on_malformed`` policy ``dead_letter``, which the pipeline sets by default): they are taken
   out of the batch first, as rejects of the stage :data:`DESERIALIZE_STAGE`.
2. Each stage gets the batch through ``Operator.process_isolated(records, reject)``: a stage that
   calls a function per record (map, filter, flat_map, the aggregate's key, update and output
   functions, a user's ``RecordOperator``) catches an ``Exception`` per record, leaves that record out of
   its output and hands it to ``reject(record, error)``; a stage that works on the whole batch
   (a sink, a user's plain ``Operator``) fails the batch as under *fail*.
3. ``reject`` turns the record into a dead-letter record (:func:`dead_letter_record`): the
   failing record's key, value and timestamp, its provenance as topic, partition and offset, and
   its headers followed by the :data:`HEADERS` naming the stage (its operator id), the error's
   type and its message (at most :data:`MAX_MESSAGE_CHARS`) and the provenance.
4. After the last stage, the batch's dead-letter records go to the dead-letter sink in one
   ``process_batch`` call. The sink is one of the pipeline's operators (last in
   ``Pipeline.operators``), so it drains, checkpoints, resets and publishes with the region:
   a dead-letter record is output exactly once, like the interval's other output. A sink that
   raises fails the batch (the member is marked broken and the region resets): a rejected record
   is never dropped silently.
5. The records handed to the sink are counted per stage and error type (:attr:`counts`, exported
   by :meth:`DeadLetterRouter.collector`); the error types are bounded by :data:`MAX_ERROR_TYPES`.
   The first record of each (stage, error type) is logged as a warning, naming its provenance
   and the error; later ones only count (a stream of poison records must not flood the log).

Provenance: a stage's record keeps the topic, partition and offset of the source record it came
from (``records.replace``). An item without them (a user's function returned a bare value) is
dead-lettered with the source batch's topic and partition, offset -1, and the bare value as its
value.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry

from cr_consumer.kafka.client import Header
from cr_consumer.operator.metrics import LabelledCounters
from cr_consumer.operator.process_thread import Undecodable
from cr_consumer.runtime.pipeline.operators import Operator, Reject
from cr_consumer.runtime.pipeline.records import Record

log = logging.getLogger(__name__)

#: Header names of a dead-letter record, after the failing record's own headers.
HEADER_STAGE = "crkafka.error.stage"
HEADER_TYPE = "crkafka.error.type"
HEADER_MESSAGE = "crkafka.error.message"
HEADER_TOPIC = "crkafka.source.topic"
HEADER_PARTITION = "crkafka.source.partition"
HEADER_OFFSET = "crkafka.source.offset"
HEADERS = (HEADER_STAGE, HEADER_TYPE, HEADER_MESSAGE, HEADER_TOPIC, HEADER_PARTITION, HEADER_OFFSET)
#: The stage name of records the source could not deserialise.
DESERIALIZE_STAGE = "00-deserialize"
#: Longest error message kept in :data:`HEADER_MESSAGE` (characters; longer ones are cut and end
#: in "..."): an exception that quotes a whole record must not make each dead-letter record
#: several times the size of the record (or past a Kafka topic's max.message.bytes).
MAX_MESSAGE_CHARS = 1000
#: Most distinct error types counted by name; further types are counted as :data:`OTHER_TYPE`
#: (so at most this many plus one label values).
#: Bounds the metric's label set (stages x types): a function raising a new class per record
#: cannot grow the scrape without limit.
MAX_ERROR_TYPES = 32
OTHER_TYPE = "other"
#: The metric (``docs/operations.md``, "Metrics").
METRIC = "crkafka_pipeline_dead_letter_records"


def error_type(error: BaseException) -> str:
    """The error's class name, with its module unless a builtin (``ValueError``, ``json.decoder.JSONDecodeError``)."""
    cls = type(error)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _message(error: BaseException) -> str:
    try:
        text = str(error)
    except Exception as exc:  # noqa: BLE001 - said in the message: the record is dead-lettered all the same
        text = f"(the error's str() raised {error_type(exc)})"
    return text if len(text) <= MAX_MESSAGE_CHARS else text[: MAX_MESSAGE_CHARS - 3] + "..."


def _utf8(text: str) -> bytes:
    """A header value; a lone surrogate (a name decoded with surrogateescape) is escaped, not an error."""
    return text.encode("utf-8", "backslashreplace")


def dead_letter_record(item: Any, stage: str, error: BaseException, batch_source: tuple[str, int]) -> Record:
    """The dead-letter record of ``item``, rejected by ``stage`` with ``error`` (step 3 of the
    module docstring); ``batch_source`` is the source batch's topic and partition."""
    if isinstance(item, Undecodable):
        item = item.record
    try:
        topic, partition, offset = item.topic, item.partition, item.offset
        timestamp, key, value, headers = item.timestamp, item.key, item.value, tuple(item.headers or ())
    except AttributeError:  # a bare value a user's function made: provenance of the batch
        (topic, partition), offset = batch_source, -1
        timestamp, key, value, headers = None, None, item, ()
    ours: tuple[Header, ...] = (
        (HEADER_STAGE, _utf8(stage)),
        (HEADER_TYPE, _utf8(error_type(error))),
        (HEADER_MESSAGE, _utf8(_message(error))),
        (HEADER_TOPIC, _utf8(str(topic))),
        (HEADER_PARTITION, _utf8(str(partition))),
        (HEADER_OFFSET, _utf8(str(offset))),
    )
    return Record(topic, partition, offset, timestamp, key, value, headers + ours)


class DeadLetterRouter:
    """The dead-letter policy of one pipeline (see the module docstring).

    ``sink``: the dead-letter sink; ``split_undecodable``: the source hands undecodable records
    downstream (step 1). :attr:`counts` is written by the process thread only, replaced as a
    whole (never mutated) so that a scrape on another thread reads one consistent map.
    """

    counts: Mapping[tuple[str, ...], int]

    def __init__(self, sink: Operator, *, split_undecodable: bool) -> None:
        self.sink = sink
        self._split_undecodable = split_undecodable
        self.counts = {}

    def process(self, stages: Sequence[tuple[str, Operator]], records: list[Any]) -> None:
        """Push one batch down ``stages`` (operator id, operator), rejects to the sink (steps 1-5)."""
        if not records:
            return
        letters: list[tuple[Record, str, Exception]] = []  # (dead-letter record, stage, error)
        first = records[0]
        if isinstance(first, Undecodable):
            first = first.record
        batch_source: tuple[str, int] = (first.topic, first.partition)

        def rejecter(stage: str) -> Reject:
            def reject(record: Any, error: Exception) -> None:
                letters.append((dead_letter_record(record, stage, error, batch_source), stage, error))

            return reject

        batch = records
        if self._split_undecodable:
            batch = []
            reject = rejecter(DESERIALIZE_STAGE)
            for r in records:
                if isinstance(r, Undecodable):
                    reject(r, r.error)
                else:
                    batch.append(r)
        for stage, op in stages:
            if not batch:
                break
            batch = op.process_isolated(batch, rejecter(stage))
        if letters:
            self.sink.process_batch([letter for letter, _, _ in letters])
            self._count(letters)

    def _count(self, letters: list[tuple[Record, str, Exception]]) -> None:
        counts = dict(self.counts)
        types = {kind for _, kind in counts}
        for letter, stage, error in letters:
            kind = error_type(error)
            if kind not in types:
                if len(types) >= MAX_ERROR_TYPES:
                    kind = OTHER_TYPE
                types.add(kind)
            if (stage, kind) not in counts:
                log.warning(
                    "stage %s: dead-lettering the record at topic %s partition %s offset %s: %s: %s "
                    "(later ones of this stage and error type are only counted, in %s_total)",
                    stage,
                    letter.topic,
                    letter.partition,
                    letter.offset,
                    error_type(error),
                    _message(error),
                    METRIC,
                )
            counts[(stage, kind)] = counts.get((stage, kind), 0) + 1
        self.counts = counts

    def collector(self) -> LabelledCounters:
        """The Prometheus counter of :attr:`counts` (:data:`METRIC`, labels stage and error_type)."""
        return LabelledCounters(
            METRIC,
            "Records a pipeline stage rejected and handed to the dead-letter sink (replays after a reset included)",
            ("stage", "error_type"),
            lambda: self.counts,
        )

    def registry(self) -> CollectorRegistry:
        registry = CollectorRegistry(auto_describe=True)
        registry.register(self.collector())
        return registry
