"""The Kafka client layer: client properties (and keeping their secrets out of sight) and
the work-arounds for kafka-python defects.
"""
