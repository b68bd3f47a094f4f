"""The ``crkafka`` Spark Structured Streaming source (use: ``docs/spark.md``).

Modules: ``source`` (the DataSource), ``reader`` (the stream and batch
readers), ``options`` (Spark's option names), ``session`` (register, a local
session). Importing this package imports nothing else (no pyspark).
"""
