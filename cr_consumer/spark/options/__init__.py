"""Options of the ``crkafka`` Spark source: Spark's Kafka source names, validated at ``load()``.

Spark hands a Python data source its options as a case-insensitive map
(pyspark lower-cases the names before the source sees them, so an error
names the option lower-cased). :func:`parse_options` turns the map into a
frozen :class:`SourceOptions`, or raises :class:`InvalidOptionError` naming
the option and what to change; ``DataSource.schema()`` calls it, so a bad
option fails ``load()`` and never reaches a running query.

Spark's names (``format("kafka")``), see docs/spark.md for the table::

    kafka.bootstrap.servers      required   host:port[,host:port...]
    subscribe | subscribePattern | assign   exactly one: topic list, regular
                                            expression, or JSON {"topic":[0,1]}
    startingOffsets              latest (*) earliest | latest | committed |
                                            JSON {"topic":{"0":23,"1":-2}} (-2 earliest, -1 latest)
    startingTimestamp            -          epoch ms (or ISO-8601): every partition
    startingOffsetsByTimestamp   -          JSON {"topic":{"0":<epoch ms>}}
    endingOffsets                latest     batch queries only: latest | JSON (-1 latest)
    commitOnBatchRead            false      batch queries only: commit each partition's end to
                                            kafka.group.id once its task has read it
    maxOffsetsPerTrigger         -          records per micro-batch (all partitions)
    minPartitions                -          Spark tasks per batch at least (ranges split)
    failOnDataLoss               true       fail when a range is no longer on the broker
    includeHeaders               false      add the headers column
    kafka.group.id               -          the consumer group (default: groupIdPrefix-<query id>)
    groupIdPrefix                crkafka    prefix of the generated group id
    kafka.<consumer property>    -          passed to every consumer by its dotted name
    kafka.client                 librdkafka the executors' Kafka library: librdkafka (confluent-kafka,
                                            the ``librdkafka`` extra) or kafka-python

(*) a batch read (``spark.read``) starts at earliest by default, as in Spark.

crkafka's own::

    coordinator                  required   the coordinator endpoint, e.g. tcp://127.0.0.1:5570
    members                      1          group members in the driver (hold partitions, commit)
    regionIndex                  0          the region index registered with the coordinator
    metricsPort / metricsHost    - / 127.0.0.1   Prometheus /metrics of the source runner

An unknown option fails, naming the closest valid one.

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
