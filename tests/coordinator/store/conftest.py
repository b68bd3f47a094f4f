"""Fixtures of the store's tests: the durable log a contract test runs against."""

from __future__ import annotations

import pytest

from coordinator.store.kafka.kafka_log import KafkaLog
from coordinator.store.kafka.settings import KafkaLogSettings


@pytest.fixture(params=["file", "kafka"])
def store_log(request):
    """The durable log of one test's stores: a factory called for every (re)open. The
    file log in the test's directory (None: the store's default), or the Kafka log on
    a fresh topic of the test broker with the defaults a user gets: every contract
    test that takes it runs against both logs."""
    if request.param == "file":
        return lambda: None
    bootstrap = request.getfixturevalue("bootstrap")
    settings = KafkaLogSettings(bootstrap, request.getfixturevalue("names").topic("log"))
    return lambda: KafkaLog(settings)
