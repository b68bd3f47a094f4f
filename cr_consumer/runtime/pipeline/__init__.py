"""The pipeline library: a Kafka source, operators, sinks, the record that flows between
them, keyed aggregates and the checkpoint store.
"""
