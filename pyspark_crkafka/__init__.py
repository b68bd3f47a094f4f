"""``crkafka`` registered by PySpark itself, without ``register(spark)``.

PySpark (4.x) looks, when the first Python data source is used, for
top-level modules named ``pyspark_*`` on the Python path of its workers that
define ``DefaultSource`` (a ``DataSource`` subclass), and registers each under
its ``name()``. This module is that entry: with the project installed
(``pip install .``), ``spark.readStream.format("crkafka")`` works in any
session. An editable install (``pip install -e``) is served by an import hook
that PySpark's module scan does not see: call
``cr_consumer.spark.session.register(spark)`` there.
"""

from cr_consumer.spark.source import CrKafkaDataSource as DefaultSource

__all__ = ["DefaultSource"]
