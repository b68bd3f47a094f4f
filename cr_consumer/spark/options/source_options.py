"""The validated options of one ``crkafka`` source (:class:`SourceOptions`), built by
:func:`cr_consumer.spark.options.parse.parse_options`, and the Kafka client
settings derived from them."""

from __future__ import annotations

import attrs

from cr_consumer.kafka.client import ClientKind
from cr_consumer.kafka.properties import redacted_repr
from cr_consumer.kafka.start_position import PartitionValues, StartKind, StartPosition
from cr_consumer.spark.options.kafka_properties import EXECUTOR_DEFAULT_CLIENT
from cr_consumer.spark.options.values import InvalidOptionError


@attrs.frozen
class SourceOptions:
    """The validated options of one ``crkafka`` source (picklable, no live objects)."""

    bootstrap_servers: str
    #: The cr-coordinator endpoint; None: not given (a batch read needs none: :meth:`coordinator_endpoint`).
    coordinator: str | None = None
    #: The consumer group (kafka.group.id); None: ``<group_id_prefix>-<query id>``, fixed per checkpoint.
    group_id: str | None = None
    group_id_prefix: str = "crkafka"
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    #: ``assign``: fixed partitions, no group assignment (the group is used for commits only).
    assign: tuple[tuple[str, int], ...] = ()
    #: None: not given (streaming starts at latest, a batch read at earliest, as in Spark).
    starting: StartPosition | None = None
    #: Batch queries: ((topic, partition), offset or -1) pairs; empty: latest everywhere.
    ending: PartitionValues = ()
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    #: Batch reads: commit each partition's end to the group once read (``commitOnBatchRead``).
    commit_on_batch_read: bool = False
    include_headers: bool = False
    members: int = 1
    region_index: int = 0
    #: Prometheus /metrics of the source runner (None: not served).
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    #: ``kafka.client``: the Kafka library of the executors' range reads.
    client: ClientKind = EXECUTOR_DEFAULT_CLIENT
    #: Kafka consumer properties by dotted name (typed values), sorted (name, value) pairs;
    #: shown with secret values redacted.
    kafka_properties: tuple[tuple[str, object], ...] = attrs.field(default=(), repr=redacted_repr)

    @property
    def consumer_properties(self) -> dict[str, object]:
        """The pass-through properties by their dotted Kafka names."""
        return dict(self.kafka_properties)

    def coordinator_endpoint(self) -> str:
        """The coordinator endpoint of a streaming query, which registers its group members
        and keeps its control variables there; raises naming the option when not given."""
        if self.coordinator is None:
            raise InvalidOptionError(
                "coordinator",
                "is required by a streaming query (readStream): its group members register there and "
                "its start positions are kept there; only a batch read (spark.read) runs without it",
            )
        return self.coordinator

    def starting_or(self, default: StartKind) -> StartPosition:
        return self.starting if self.starting is not None else StartPosition(default)

    def group_for(self, query: str) -> str:
        """The consumer group of the query with id ``query``."""
        return self.group_id if self.group_id is not None else f"{self.group_id_prefix}-{query}"

    def describe_subscription(self) -> str:
        if self.assign:
            return f"assign {[f'{t}:{p}' for t, p in self.assign]}"
        return f"pattern {self.pattern!r}" if self.pattern is not None else f"topics {list(self.topics)}"
