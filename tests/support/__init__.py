"""Helpers shared by the tests (no tests here): operators wired to a sink, a scripted
region member without Kafka, a region of member processes, the drills' small scale,
metrics scraping, a Spark standalone cluster, and the repository's paths.

``tests/`` is on ``sys.path`` (``pythonpath`` in pyproject.toml), so a test imports
``from support.operator import make``.
"""
