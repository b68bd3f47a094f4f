"""The ``crkafka`` DataSource: options, schema, and the stream reader factory.

Spark constructs the DataSource in a planner process and pickles it to the
source runner; it only holds the raw option map. The options are validated in
:meth:`CrKafkaDataSource.schema`, which ``readStream...load()`` calls, so that an
invalid option fails ``load()`` with an :class:`~cr_consumer.spark.options.InvalidOptionError`
naming it.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import StructType

from cr_consumer.spark.arrow import spark_schema
from cr_consumer.spark.options import SourceOptions, parse_options

#: The name given to ``spark.readStream.format(...)``.
FORMAT_NAME = "crkafka"


class CrKafkaDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def source_options(self) -> SourceOptions:
        return parse_options(self.options)

    def schema(self) -> StructType:
        self.source_options()  # fail load() on a bad or contradictory option
        return spark_schema()

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from cr_consumer.spark.reader import CrKafkaStreamReader

        if schema != spark_schema():
            raise ValueError(f"crkafka has a fixed schema ({spark_schema().simpleString()}); got {schema.simpleString()}")
        return CrKafkaStreamReader(self.source_options())
