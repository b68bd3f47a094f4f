"""The ``crkafka`` Spark sink: ``df.writeStream.format("crkafka")``, each micro-batch's rows in
Kafka exactly once.

The modules, one concern each: ``options`` (the sink's options, Spark's Kafka sink names, and
the input schema), ``reports`` (what a task reports to the driver and what the driver records
as a batch's decision: versioned JSON), ``decisions`` (the query's decision log in Kafka),
``writer`` (the protocol: the tasks' transactions and the driver's commit and abort).
"""
