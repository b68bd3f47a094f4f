"""The coordinator's durable log on Kafka: a second backend of
`coordinator.store.durable_log.DurableLog` (the file log stays the default).

``settings`` validates where the log lives and how it is written; ``topics`` creates
and checks its two one-partition topics; ``producer`` writes the log topic in
transactions of one transactional id (fencing) and the snapshots idempotently;
``tail`` reads the log topic's committed transactions (start-up replay, a standby
following the leader); ``reader`` reads the snapshot topic to the high watermark
of a fetch response and keeps the snapshot pointer; ``snapshots`` writes a
snapshot of the tables; ``kafka_log`` is the `DurableLog`. Only kafka-python and
``coordinator.kafka`` are used here (the coordinator does not import ``cr_consumer``),
every call bounded.
"""
