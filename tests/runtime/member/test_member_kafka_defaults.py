"""The region runtime's Kafka defaults reach the member's source (no broker):
Kafka's own 50 MB fetch.max.bytes with either client, under the pipeline's and
the member's own properties."""

from __future__ import annotations

from cr_consumer.kafka.kafka_python.properties import kafka_python_config
from cr_consumer.operator.config import OperatorConfig
from cr_consumer.runtime.member.setup import RUNTIME_KAFKA_DEFAULTS


def _config(client: str, **props: object) -> OperatorConfig:
    return OperatorConfig(
        bootstrap_servers="localhost:9092",
        group_id="g",
        operator_name="m-0",
        topics=("t",),
        consumer_properties={**RUNTIME_KAFKA_DEFAULTS, **props},
        client=client,
    )


def test_members_fetch_up_to_kafkas_default_with_either_client():
    for client in ("kafka-python", "librdkafka"):
        assert _config(client).client_properties()["fetch.max.bytes"] == 50 * 1024 * 1024


def test_a_pipelines_own_fetch_max_bytes_wins():
    assert _config("kafka-python", **{"fetch.max.bytes": 1 << 20}).client_properties()["fetch.max.bytes"] == 1 << 20
    assert kafka_python_config(_config("kafka-python").client_properties())["fetch_max_bytes"] == 50 * 1024 * 1024
