"""The ``crkafka`` Spark Structured Streaming source (see ``docs/spark.md``).

    from cr_consumer.spark.session import register
    register(spark)
    df = (spark.readStream.format("crkafka")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("kafka.group.id", "orders-etl")
          .option("subscribe", "orders")
          .load())

Modules: ``source`` (the DataSource), ``reader`` (the stream and batch
readers), ``options`` (Spark's option names), ``session`` (register, a local
session). Importing this package imports nothing else (no pyspark).
"""
