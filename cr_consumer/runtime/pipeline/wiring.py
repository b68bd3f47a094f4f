"""Wiring operators into a pipeline: Kafka source -> operators -> sinks.

A pipeline module exposes ``build(ctx: PipelineContext) -> Pipeline``::

    from cr_consumer.runtime import Pipeline, KafkaSource

    def build(ctx):
        return (
            Pipeline(KafkaSource(topics=[ctx.param("topic")]))
            .map(lambda r: replace(r, value=r.value.upper()))
            .filter(lambda r: r.value)
            .sink(ctx.file_sink())
        )

Data flow: the source (a ``ConsumerOperator``, built by the member runtime
from the :class:`KafkaSource` spec) hands each batch of records to
:meth:`Pipeline.process_batch` on its process thread; the batch goes down the
chain, each operator returning the batch for the next one. Nothing crosses a
thread record by record.

Errors: by default an exception of any stage fails the batch (the member
resets the region). ``Pipeline(source, dead_letter=sink)`` chooses the
dead-letter policy instead: a record whose stage raises, or that the source
cannot deserialise, goes to ``sink`` with the error in its headers
(``dead_letter.py``).

Region flow: :attr:`Pipeline.operators` lists the pipeline's operators in
pipeline order, the dead-letter sink last; with :meth:`Pipeline.operator_ids`
they are the member runtime's state handlers after the source: it drains and
checkpoints in that order and resets in the reverse order (see
``cr_consumer/runtime/member/executor.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec

import attrs
from prometheus_client import CollectorRegistry

from cr_consumer.kafka.properties import redacted_repr
from cr_consumer.operator.config import MalformedPolicy, as_malformed_policy
from cr_consumer.operator.region import TransactionalOperator
from cr_consumer.runtime.pipeline.dead_letter import DeadLetterRouter
from cr_consumer.runtime.pipeline.operators import Filter, FlatMap, KeyedAggregate, Map, Operator
from cr_consumer.runtime.pipeline.sinks import ConsoleSink, FileSink
from cr_consumer.state.changelog import MATERIALIZE_MIN_CHANGES

if TYPE_CHECKING:
    from cr_consumer.runtime.pipeline.kafka_sink import KafkaSink
    from cr_consumer.runtime.pipeline.keyed_state import KeyedState, PartitionState
    from cr_consumer.runtime.pipeline.partitioned_aggregate import PartitionedAggregate
    from cr_consumer.runtime.pipeline.partitioned_tables import TablesArgs

P = ParamSpec("P")


def _names(value: Iterable[str]) -> tuple[str, ...]:
    """Topic names as given (a list, a tuple, a generator) -> a tuple."""
    return tuple(value)


@attrs.frozen
class KafkaSource:
    """What the member runtime needs to build the Kafka source of a pipeline.

    ``topics`` or ``pattern`` (exactly one); ``options`` are further keyword
    arguments of ``OperatorConfig`` (start_position, max_poll_records, ...);
    ``kafka`` is a pass-through of Kafka consumer properties by dotted name.
    Bootstrap servers, group id, operator name, coordinator and region index
    come from the member's context.
    """

    topics: tuple[str, ...] = attrs.field(default=(), converter=_names)
    pattern: str | None = None
    options: Mapping[str, Any] = attrs.field(factory=dict)
    kafka: Mapping[str, Any] = attrs.field(factory=dict, repr=redacted_repr)
    name: str = "source"

    def __attrs_post_init__(self) -> None:
        if bool(self.topics) == bool(self.pattern):
            raise ValueError("KafkaSource: give exactly one of topics=[...] or pattern='regex'")


@attrs.frozen
class PipelineContext:
    """What ``build(ctx)`` gets: where the member runs and with which settings."""

    bootstrap: str
    group: str
    member: str
    coordinator: str | None
    output_dir: Path = attrs.field(converter=Path)
    state_dir: Path = attrs.field(converter=Path)
    region_index: int = 0
    params: Mapping[str, str] = attrs.field(factory=dict)
    #: The member's Kafka client (``--kafka-client``), the Kafka sinks' unless they name one; None:
    #: the project's default.
    kafka_client: str | None = None

    def param(self, name: str, default: str | None = None) -> str:
        """A ``--param NAME=VALUE`` of the run; a missing required one is a clear error."""
        if name in self.params:
            return self.params[name]
        if default is None:
            raise KeyError(f"pipeline parameter {name!r} is required: pass --param {name}=VALUE")
        return default

    def file_sink(self, subdir: str | None = None, name: str | None = None) -> FileSink:
        directory = self.output_dir / subdir if subdir else self.output_dir
        return FileSink(directory, self.member, name=name)

    def kafka_sink(
        self,
        topic: str,
        *,
        name: str | None = None,
        kafka: Mapping[str, object] | None = None,
        partition_of: Callable[[Any], int | None] | None = None,
        client: str | None = None,
    ) -> KafkaSink:
        """An exactly-once sink to ``topic`` on the member's cluster (``kafka``: producer properties
        by dotted name; ``partition_of(record)``: the output partition, None for the partitioner's;
        ``client``: ``kafka-python`` or ``librdkafka``, else the member's client)."""
        from cr_consumer.kafka.client import DEFAULT_CLIENT
        from cr_consumer.runtime.pipeline.kafka_sink import KafkaSink  # lazily: kafka is heavy

        return KafkaSink(
            topic,
            bootstrap=self.bootstrap,
            group=self.group,
            member=self.member,
            name=name,
            kafka=kafka,
            partition_of=partition_of,
            client=client or self.kafka_client or DEFAULT_CLIENT,
        )

    def partitioned_aggregate(
        self,
        key_fn: Callable[[Any], Any],
        update: Callable[[Any, Any], Any],
        initial: Callable[[], Any] | Any = None,
        *,
        topic: str,
        name: str | None = None,
        emit: bool = True,
        output: Callable[[Any, Any, Any], Any] | None = None,
        kafka: Mapping[str, object] | None = None,
        materialize_after: int = MATERIALIZE_MIN_CHANGES,
    ) -> PartitionedAggregate:
        """A keyed aggregate with one table per partition of the input ``topic``, kept in a
        changelog topic on the member's cluster and restored by whichever member owns the
        partition (``partitioned_aggregate.py``; ``materialize_after``: the floor of changes
        before a partition's next base, ``partitioned_tables.py``); add it with ``Pipeline.then``."""
        from cr_consumer.runtime.pipeline.partitioned_aggregate import PartitionedAggregate  # lazily: kafka

        tables = self._tables(topic, kafka, materialize_after)
        return PartitionedAggregate(key_fn, update, initial, emit=emit, output=output, name=name, **tables)

    def keyed_state(
        self,
        fn: Callable[[Any, PartitionState], Iterable[Any]],
        *,
        topic: str,
        name: str | None = None,
        kafka: Mapping[str, object] | None = None,
        materialize_after: int = MATERIALIZE_MIN_CHANGES,
    ) -> KeyedState:
        """``fn(record, state) -> records`` with a get/set/delete state per key, scoped to the
        record's partition of the input ``topic``, kept and restored as the partitioned
        aggregate's (``keyed_state.py``); add it with ``Pipeline.then``."""
        from cr_consumer.runtime.pipeline.keyed_state import KeyedState  # lazily: kafka

        return KeyedState(fn, name=name, **self._tables(topic, kafka, materialize_after))

    def _tables(self, topic: str, kafka: Mapping[str, object] | None, materialize_after: int) -> TablesArgs:
        """Where a partition-scoped operator's tables live: this member's cluster and names."""
        return {
            "topic": topic,
            "bootstrap": self.bootstrap,
            "group": self.group,
            "member": self.member,
            "kafka": kafka,
            "materialize_after": materialize_after,
        }


def _stage(operator: Callable[P, Operator]) -> Callable[Concatenate[Pipeline, P], Pipeline]:
    """A :class:`Pipeline` method that appends ``operator(*args, **kwargs)`` (same arguments)."""

    def append(pipeline: Pipeline, /, *args: P.args, **kwargs: P.kwargs) -> Pipeline:
        return pipeline.then(operator(*args, **kwargs))

    return append


def _check_operator(operator: Operator) -> None:
    if not callable(getattr(operator, "process_batch", None)):
        raise TypeError(f"{operator!r} has no process_batch(records) method")
    for method in ("drain", "checkpoint", "reset", "reset_to_initial_state", "retire_checkpoint"):
        if not callable(getattr(operator, method, None)):
            raise TypeError(f"{operator!r} is not a state handler: it has no {method}()")


def _malformed_policy(source: KafkaSource | None) -> MalformedPolicy | None:
    """The source's ``on_malformed`` if it sets one (ConfigError for a value that is none)."""
    if source is None or "on_malformed" not in source.options:
        return None
    return as_malformed_policy(source.options["on_malformed"])


def _check_transactional_ids(operators: list[Operator]) -> None:
    """Two transactional operators (Kafka sinks) writing with one transactional id would fence
    each other at every interval: refused when the pipeline is built."""
    seen: dict[str, Operator] = {}
    for op in operators:
        if isinstance(op, TransactionalOperator):
            for tid in op.transactions().fence:
                if tid in seen:
                    raise ValueError(
                        f"{op!r} and {seen[tid]!r} both write with the transactional id {tid!r}: "
                        "give the Kafka sinks of one pipeline different name=s"
                    )
                seen[tid] = op


class Pipeline:
    """A Kafka source followed by a chain of operators (see the module docstring).

    ``dead_letter``: the dead-letter sink (any operator, e.g. ``ctx.file_sink("dlq")``); without
    it the error policy is *fail*. With it, the source's ``on_malformed`` defaults to
    ``dead_letter``. A source set to ``on_malformed="dead_letter"`` needs a dead-letter sink.
    """

    def __init__(self, source: KafkaSource | None = None, *, dead_letter: Operator | None = None) -> None:
        self._stages: list[Operator] = []
        self._named: list[tuple[str, Operator]] = []  # the stages with their operator ids
        self.dead_letter = dead_letter
        self._router: DeadLetterRouter | None = None
        malformed = _malformed_policy(source)
        if dead_letter is None:
            if malformed is MalformedPolicy.DEAD_LETTER:
                raise ValueError("KafkaSource(on_malformed='dead_letter') needs Pipeline(..., dead_letter=sink)")
        else:
            _check_operator(dead_letter)
            if source is not None and malformed is None:
                source = attrs.evolve(source, options={**source.options, "on_malformed": MalformedPolicy.DEAD_LETTER})
                malformed = MalformedPolicy.DEAD_LETTER
            self._router = DeadLetterRouter(dead_letter, split_undecodable=malformed is MalformedPolicy.DEAD_LETTER)
        self.source = source
        self.prometheus_registry = self._router.registry() if self._router is not None else CollectorRegistry()

    @property
    def operators(self) -> list[Operator]:
        """Every operator, in pipeline order: the stages, then the dead-letter sink."""
        return [*self._stages] if self.dead_letter is None else [*self._stages, self.dead_letter]

    # -- building -----------------------------------------------------------
    def then(self, operator: Operator) -> Pipeline:
        """Append any operator (your own subclass of ``Operator`` included)."""
        _check_operator(operator)
        if operator is self.dead_letter:
            raise ValueError(f"{operator!r} is the dead-letter sink: it cannot be a stage of the pipeline too")
        _check_transactional_ids([*self.operators, operator])
        self._stages.append(operator)
        self._named = list(zip(self.operator_ids(), self._stages, strict=False))
        return self

    sink = then
    map = _stage(Map)
    filter = _stage(Filter)
    flat_map = _stage(FlatMap)
    aggregate = _stage(KeyedAggregate)
    console = _stage(ConsoleSink)

    # -- running ------------------------------------------------------------
    def process_batch(self, records: list[Any]) -> None:
        """Push one batch down the chain (on the source's process thread)."""
        if self._router is not None:
            self._router.process(self._named, records)
            return
        batch = records
        for op in self._stages:
            if not batch:
                return
            batch = op.process_batch(batch)

    def dead_letter_counts(self) -> Mapping[tuple[str, ...], int]:
        """Records handed to the dead-letter sink by (stage, error type); empty without one."""
        return self._router.counts if self._router is not None else {}

    def dead_lettered(self) -> int | None:
        """Records handed to the dead-letter sink in all; None without one (the member's heartbeat)."""
        return sum(list(self._router.counts.values())) if self._router is not None else None

    def operator_ids(self) -> list[str]:
        return [f"{i + 1:02d}-{op.name}" for i, op in enumerate(self.operators)]

    def close(self) -> None:
        errors = []
        for op in self.operators:
            try:
                op.close()
            except Exception as exc:  # noqa: BLE001 - collected, the first re-raised: every operator gets closed
                errors.append(exc)
        if errors:
            raise errors[0]
