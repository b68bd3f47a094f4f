"""The drill's own pipeline: Kafka source -> Probe -> FailureTrigger -> an exactly-once sink.

``build(ctx)`` is what ``crkafka member cr_consumer.drill.pipeline`` calls in
every member process. Parameters (``--param NAME=VALUE``, all set by the drill):

* ``topics`` (comma-separated) or ``pattern`` (a regex; the new-topic scenario
  subscribes by pattern so that a topic created mid-run is picked up);
* ``timeline_dir``: where the :class:`Probe` writes this member's events;
* ``fault_dir``: where the drill drops fault triggers (``sink-failure``);
* ``session_timeout_ms`` / ``heartbeat_interval_ms``: the group timeouts
  (short in tests: a join takes about half the session timeout);
* ``max_poll_records``;
* ``assignment_strategy``: the consumers' ``partition.assignment.strategy``
  (``range,roundrobin``: eager; default: the region runtime's, ``cooperative-sticky``);
* ``sink``: ``file`` (default: the runtime's ``FileSink`` under the member's output directory)
  or ``kafka`` (the transactional Kafka sink, ``ctx.kafka_sink``, into ``output_topic``; a
  :func:`with_provenance` map before it puts each record's input topic, partition and offset
  in its headers, where the verifier reads them: ``provenance.py``);
* ``state``: ``true`` puts the drill's keyed state before the sink (``state.py``: a count per
  key on a Kafka changelog, which the verifier checks); needs ``topics`` to name one topic;
* ``dead_letter``: ``true`` gives the pipeline a dead-letter sink of the same kind as its sink
  (``Pipeline(source, dead_letter=...)``, ``runtime/pipeline/dead_letter.py``): the file sink
  under :data:`DEAD_LETTER_SUBDIR` of the output directory, or the Kafka sink into
  ``dead_letter_topic``.

Records: the drill produces UTF-8 values; a *poison* record has a value that is
not UTF-8, or, in dead-letter mode, may be UTF-8 text behind :data:`POISON_MARKER`
(``workload.py``). Without a dead-letter sink the source's value deserialiser
(:func:`decode_value`) raises on a poison record and the source's ``on_malformed="skip"``
policy counts and skips it, so it never reaches the sink; the verifier expects exactly that.
With one, the source's ``on_malformed`` is the pipeline's default, ``dead_letter``: an
undecodable record is dead-lettered by the deserialiser's stage, and the map
:func:`reject_marked` raises on a marked one, which dead-letters it; neither reaches the sink,
each reaches the dead-letter sink once (the verifier checks both).

Fault hooks, both in this module so the drill needs nothing from the runtime:

* :class:`Probe` writes the timeline (throughput samples, drain, checkpoint,
  complete, reset, resume) used for the report and the plot;
* :class:`FailureTrigger`, right before the sink, raises once when the drill drops
  ``<fault_dir>/sink-failure``: the first member to claim the trigger (an atomic rename, so
  exactly one member raises) fails its batch before the sink writes it, whichever the sink.
"""

from __future__ import annotations

import enum
import os
import time
from pathlib import Path
from typing import Any

from cr_consumer.drill.provenance import provenance_headers
from cr_consumer.drill.state import MATERIALIZE_AFTER, count_by_key
from cr_consumer.drill.timeline import SAMPLE_PERIOD_S, TimelineWriter
from cr_consumer.runtime import KafkaSource, Pipeline, PipelineContext
from cr_consumer.runtime.pipeline.operators import Operator
from cr_consumer.runtime.pipeline.records import replace

SINK_FAILURE_TRIGGER = "sink-failure"
#: A value that starts with this is poison the drill pipeline's map rejects (dead-letter mode).
POISON_MARKER = "poison:"
#: The file dead-letter sink's directory, under the member's output directory.
DEAD_LETTER_SUBDIR = "dlq"
#: The sink looks for a trigger file at most this often (one stat() per period,
#: not per batch).
TRIGGER_CHECK_PERIOD_S = 0.05


class SinkKind(enum.Enum):
    """Where the pipeline writes (parameter ``sink``): the exactly-once file sink, or a topic
    through the transactional Kafka sink; the verifier has a reader for each."""

    FILE = "file"
    KAFKA = "kafka"


class InjectedSinkFailure(RuntimeError):
    """The failure the sink-failure drill injects."""


def decode_value(raw: bytes | None) -> str | None:
    """The drill's value deserialiser: UTF-8 text; anything else is poison."""
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"undecodable (poison) value: {raw[:16]!r}") from exc


class PoisonRecord(ValueError):
    """What :func:`reject_marked` raises on a marked poison record."""


def reject_marked(record: Any) -> Any:
    """The drill's map in dead-letter mode: raises on a value behind :data:`POISON_MARKER`."""
    if isinstance(record.value, str) and record.value.startswith(POISON_MARKER):
        raise PoisonRecord(f"marked poison value at offset {record.offset}")
    return record


class Probe(Operator):
    """Pass-through operator that writes the member's timeline events."""

    kind = "probe"

    def __init__(self, timeline: TimelineWriter, name: str | None = None) -> None:
        super().__init__(name)
        self.timeline = timeline
        self._count = 0
        self._last_sample = time.monotonic()
        self._after_reset = False
        self.timeline.event("start", pid=os.getpid())

    def process_batch(self, records: list[Any]) -> list[Any]:
        if self._after_reset:
            self._after_reset = False
            self.timeline.event("resume")
        self._count += len(records)
        now = time.monotonic()
        if now - self._last_sample >= SAMPLE_PERIOD_S:
            self._sample(now)
        return records

    def _sample(self, now: float | None = None) -> None:
        if self._count:
            self.timeline.event("batch", n=self._count)
            self._count = 0
        self._last_sample = now if now is not None else time.monotonic()

    def drain(self) -> None:
        self._sample()
        self.timeline.event("drain")

    def checkpoint(self, seq: int) -> bytes:
        self.timeline.event("checkpoint", seq=seq)
        return super().checkpoint(seq)

    def notify_checkpoint_complete(self, seq: int) -> None:
        self.timeline.event("complete", seq=seq)

    def reset(self, seq: int, data: bytes, attempt: int = 0) -> None:
        super().reset(seq, data, attempt)
        self._sample()
        self._after_reset = True
        self.timeline.event("reset", seq=seq, attempt=attempt)

    def reset_to_initial_state(self, attempt: int = 0) -> None:
        self._sample()
        self._after_reset = True
        self.timeline.event("reset", seq=None, attempt=attempt)

    def retire_checkpoint(self, seq: int) -> None:
        pass

    def close(self) -> None:
        self._sample()
        self.timeline.event("close")
        self.timeline.close()


class FailureTrigger(Operator):
    """Pass-through that raises once per trigger file (see the module docstring)."""

    kind = "failure-trigger"

    def __init__(
        self,
        member: str,
        fault_dir: str | os.PathLike[str] | None,
        timeline: TimelineWriter | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        self.member = member
        self.fault_dir = Path(fault_dir) if fault_dir else None
        self.timeline = timeline
        self._next_check = 0.0

    def process_batch(self, records: list[Any]) -> list[Any]:
        if self.fault_dir is not None and records:
            now = time.monotonic()
            if now >= self._next_check:
                self._next_check = now + TRIGGER_CHECK_PERIOD_S
                self._maybe_fail(self.fault_dir)
        return records

    def _maybe_fail(self, fault_dir: Path) -> None:
        trigger = fault_dir / SINK_FAILURE_TRIGGER
        claimed = fault_dir / f"{SINK_FAILURE_TRIGGER}.claimed-by-{self.member}-{os.getpid()}"
        try:
            os.rename(trigger, claimed)  # atomic: one member wins the trigger
        except FileNotFoundError:
            return
        if self.timeline is not None:
            self.timeline.event("fault_fired", fault="sink-failure")
        raise InjectedSinkFailure(f"drill: injected sink failure in member {self.member}")


def build(ctx: PipelineContext) -> Pipeline:
    topics = str(ctx.params.get("topics") or "")
    pattern = str(ctx.params.get("pattern") or "")
    if bool(topics) == bool(pattern):
        raise ValueError("drill pipeline: pass exactly one of --param topics=a,b or --param pattern=REGEX")
    session = int(ctx.param("session_timeout_ms", "6000"))
    heartbeat = int(ctx.param("heartbeat_interval_ms", str(max(100, session // 6))))
    strategy = str(ctx.params.get("assignment_strategy") or "")
    dead_letter = ctx.param("dead_letter", "false") == "true"
    kind = SinkKind(ctx.param("sink", SinkKind.FILE.value))
    source = KafkaSource(
        topics=tuple(t for t in topics.split(",") if t),
        pattern=pattern or None,
        options={
            "start_position": "earliest",
            "value_deserializer": decode_value,
            # with a dead-letter sink: the pipeline's default, dead_letter
            **({} if dead_letter else {"on_malformed": "skip"}),
            "max_poll_records": int(ctx.param("max_poll_records", "500")),
        },
        kafka={
            "session.timeout.ms": session,
            "heartbeat.interval.ms": heartbeat,
            "auto.offset.reset": "earliest",
            **({"partition.assignment.strategy": strategy} if strategy else {}),
        },
    )
    timeline_dir = Path(ctx.param("timeline_dir", str(Path(ctx.output_dir).parent / "timeline")))
    timeline = TimelineWriter(timeline_dir / f"{ctx.member}-{os.getpid()}.jsonl", ctx.member)
    dead_letter_sink = None
    if dead_letter:
        dead_letter_sink = (
            ctx.kafka_sink(ctx.param("dead_letter_topic"), name="dlq-sink")
            if kind is SinkKind.KAFKA
            else ctx.file_sink(DEAD_LETTER_SUBDIR, name="dlq-sink")
        )
    pipeline = (
        Pipeline(source, dead_letter=dead_letter_sink)
        .then(Probe(timeline))
        .then(FailureTrigger(ctx.member, ctx.params.get("fault_dir"), timeline))
    )
    if dead_letter:
        pipeline = pipeline.map(reject_marked, name="reject-marked")
    if ctx.param("state", "false") == "true":
        if pattern or "," in topics:
            raise ValueError("drill pipeline: state=true needs topics= to name exactly one topic")
        stage = ctx.keyed_state(count_by_key, topic=topics, name="drill-state", materialize_after=MATERIALIZE_AFTER)
        pipeline = pipeline.then(stage)
    if kind is SinkKind.KAFKA:
        return pipeline.map(with_provenance, name="provenance").sink(
            ctx.kafka_sink(ctx.param("output_topic"), name="kafka-sink")
        )
    return pipeline.sink(ctx.file_sink())


def with_provenance(record: Any) -> Any:
    """``record`` with its input topic, partition and offset as headers (``provenance.py``) and
    its value as the UTF-8 bytes the producer wrote (the source decoded them to text)."""
    value = record.value.encode("utf-8") if isinstance(record.value, str) else record.value
    headers = (*record.headers, *provenance_headers(record.topic, record.partition, record.offset))
    return replace(record, value=value, headers=headers)
