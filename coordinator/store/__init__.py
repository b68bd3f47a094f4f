"""The coordinator's durable state, after Kafka's offsets topic: an in-memory table over a
compacted append-only log, replayed on start-up, with tombstones, retention and compaction.
"""
