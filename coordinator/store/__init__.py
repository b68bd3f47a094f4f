"""The coordinator's durable state, after Kafka's offsets topic: an in-memory table over a
compacted append-only log, replayed on start-up, with tombstones, retention and compaction.

``state_store`` is the live API; it owns the tables (``tables``), writes through one
``writer.RecordWriter``, replays the log with one ``replay.Replay`` at start-up and
schedules retention and compaction (``maintenance``, ``compaction``) over the log in ``log``.
"""
