"""Helpers for tests, benchmarks, drills and demos: the embedded tansu broker and small
Kafka helpers (create a topic, produce, read committed offsets).
"""
