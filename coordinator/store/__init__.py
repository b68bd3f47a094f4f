"""The coordinator's durable state, after Kafka's offsets topic: an in-memory table over an
append-only log, replayed on start-up, with tombstones, retention and compaction.

The log is behind one seam, ``durable_log.DurableLog``: the segment file (``file_log``
over ``log``, compacted by ``compaction``; the default) or a Kafka topic (``kafka``,
shortened by snapshots); both rebuild from a ``snapshot`` of the tables.

``state_store`` is the live API; it owns the tables (``tables``), writes through one
``writer.RecordWriter``, replays the log with one ``replay.Replay`` at start-up and
schedules retention and compaction (``maintenance``, ``compaction``) over the log in ``log``.
"""
