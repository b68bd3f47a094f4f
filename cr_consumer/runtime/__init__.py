"""The consistent-region runtime: pipelines, sinks, checkpoint store, member
processes and the runner (see docs/pipelines.md and docs/region.md)."""

from cr_consumer.runtime.pipeline.checkpoint_store import CheckpointStore, DirectoryCheckpointStore
from cr_consumer.runtime.pipeline.operators import Filter, FlatMap, KeyedAggregate, Map, Operator, RecordOperator
from cr_consumer.runtime.pipeline.records import Record, replace
from cr_consumer.runtime.pipeline.sinks import CollectSink, ConsoleSink, FileSink
from cr_consumer.runtime.pipeline.wiring import KafkaSource, Pipeline, PipelineContext

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
    "RecordOperator",
    "replace",
]
