"""Options of the ``crkafka`` Spark source: Spark's Kafka source names, validated at ``load()``.

Spark hands a Python data source its options as a case-insensitive map
(pyspark lower-cases the names before the source sees them, so an error
names the option lower-cased). :func:`parse_options` turns the map into a
frozen :class:`SourceOptions`, or raises :class:`InvalidOptionError` naming
the option and what to change; ``DataSource.schema()`` calls it, so a bad
option fails ``load()`` and never reaches a running query.

Spark's Kafka source names (``format("kafka")``) and crkafka's own, with their
defaults: the table in ``docs/spark.md``. An unknown option fails, naming the
closest valid one.

The modules, one concern each: ``values`` (names, spellings, refused names,
single values, the error), ``kafka_properties`` (``kafka.*``), ``offset_specs``
(where reads start and end), ``source_options`` (:class:`SourceOptions`),
``parse`` (:func:`parse_options`: the whole map, and what is read).
"""

from cr_consumer.spark.options.kafka_properties import EXECUTOR_DEFAULT_CLIENT
from cr_consumer.spark.options.parse import parse_options
from cr_consumer.spark.options.source_options import SourceOptions
from cr_consumer.spark.options.values import SPELLING, UNSUPPORTED, InvalidOptionError

__all__ = ["EXECUTOR_DEFAULT_CLIENT", "SPELLING", "UNSUPPORTED", "InvalidOptionError", "SourceOptions", "parse_options"]
