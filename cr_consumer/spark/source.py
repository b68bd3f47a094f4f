"""The ``crkafka`` DataSource: options, schema, the stream and batch reader factories, and the
stream writer factory (the sink: ``cr_consumer/spark/sink/``).

Spark constructs the DataSource in a planner process and pickles it to the
source runner; it only holds the raw option map. The options are validated in
:meth:`CrKafkaDataSource.schema`, which ``readStream...load()`` and
``read...load()`` call, so that an invalid option fails ``load()`` with an
:class:`~cr_consumer.spark.options.InvalidOptionError` naming it. ``load()``
does not tell a batch read from a streaming one, so what only one of them
refuses (``startingOffsets=latest`` and ``endingOffsets``; a streaming query
without ``coordinator``) is refused when Spark asks for that reader: the batch
reader when the read runs, the stream reader when the query starts.

The schema is Spark's Kafka source schema (key, value, topic, partition,
offset, timestamp, timestampType, and headers with ``includeHeaders=true``).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, DataSourceStreamWriter
from pyspark.sql.types import StructType

from cr_consumer.kafka.start_position import StartKind
from cr_consumer.spark.arrow import spark_schema
from cr_consumer.spark.options import InvalidOptionError, SourceOptions, parse_options

#: The name given to ``spark.readStream.format(...)``.
FORMAT_NAME = "crkafka"


class CrKafkaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def source_options(self) -> SourceOptions:
        return parse_options(self.options)

    def schema(self) -> StructType:
        return spark_schema(self.source_options().include_headers)  # fails load() on a bad option

    def _checked(self, schema: StructType) -> SourceOptions:
        options = self.source_options()
        expected = spark_schema(options.include_headers)
        if schema != expected:
            raise ValueError(f"crkafka has a fixed schema ({expected.simpleString()}); got {schema.simpleString()}")
        return options

    def reader(self, schema: StructType) -> DataSourceReader:
        from cr_consumer.spark.reader import CrKafkaBatchReader

        options = self._checked(schema)
        if options.starting is not None and options.starting.kind is StartKind.LATEST:
            raise InvalidOptionError(
                "startingOffsets", "latest is not allowed for a batch read (it would read nothing)"
            )
        return CrKafkaBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from cr_consumer.spark.reader import CrKafkaStreamReader

        options = self._checked(schema)
        if options.ending:
            raise InvalidOptionError("endingOffsets", "is for batch queries (spark.read) only")
        options.coordinator_endpoint()  # a streaming query needs the coordinator
        return CrKafkaStreamReader(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from cr_consumer.spark.sink.options import parse_sink_options
        from cr_consumer.spark.sink.writer import CrKafkaStreamWriter

        return CrKafkaStreamWriter(parse_sink_options(self.options), schema)
