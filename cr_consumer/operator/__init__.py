"""The consumer operator: one member of a Kafka consumer group in a consistent region.

The event thread (``event_thread``) owns the KafkaConsumer; the process thread
(``process_thread``) submits tuples under a region permit; a bounded queue
(``message_queue``) joins them. ``consumer`` assembles them into ``ConsumerOperator``.
"""
