"""The operator's broker tests run with both Kafka clients.

A module (or test) that uses the ``kafka_client`` fixture (``pytestmark =
pytest.mark.usefixtures("kafka_client")``) runs once per client: every operator
that ``support.operator.config()``/``make()`` builds in it uses that client.
"""

from __future__ import annotations

import pytest

import support.operator

#: The clients every such test runs with (kafka-python: the default; librdkafka: the fast option).
CLIENTS = ("kafka-python", "librdkafka")


@pytest.fixture(params=CLIENTS)
def kafka_client(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The client of this run of the test (``support.operator.CLIENT`` while it runs)."""
    monkeypatch.setattr(support.operator, "CLIENT", request.param)
    return request.param
