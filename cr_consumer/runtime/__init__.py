"""The consistent-region runtime: pipelines, sinks, checkpoint store, member
processes and the runner (see docs/pipelines.md and docs/region.md)."""

from .aggregate import KeyedAggregate
from .checkpoint_store import CheckpointStore, DirectoryCheckpointStore
from .operators import Filter, FlatMap, Map, Operator
from .pipeline import KafkaSource, Pipeline, PipelineContext
from .records import Record, replace
from .sinks import CollectSink, ConsoleSink, FileSink

__all__ = [
    "CheckpointStore",
    "CollectSink",
    "ConsoleSink",
    "DirectoryCheckpointStore",
    "FileSink",
    "Filter",
    "FlatMap",
    "KafkaSource",
    "KeyedAggregate",
    "Map",
    "Operator",
    "Pipeline",
    "PipelineContext",
    "Record",
    "replace",
]
