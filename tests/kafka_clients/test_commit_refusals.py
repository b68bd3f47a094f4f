"""A refused commit as the seam reports it, for both clients: a rebalance in
progress (the consumer keeps its partitions: CommitRefused) against a consumer
the group no longer knows (MemberFenced: its partitions may be another
member's). The operator's drain fails on the second only (handlers.py)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError
from kafka import errors as kafka_errors

from cr_consumer.kafka.client import CommitRefused, MemberFenced
from cr_consumer.kafka.kafka_python.errors import commit_refusal
from cr_consumer.kafka.librdkafka.errors import refusal


@pytest.mark.parametrize(
    "exc",
    [
        kafka_errors.CommitFailedError(kafka_errors.UnknownMemberIdError("g")),
        kafka_errors.CommitFailedError(kafka_errors.IllegalGenerationError("g")),
        kafka_errors.CommitFailedError(
            "Offset commit cannot be completed since the consumer is not part of an active group"
        ),
        kafka_errors.FencedInstanceIdError(),
        kafka_errors.UnknownMemberIdError("g"),
    ],
)
def test_kafka_python_fenced(exc):
    assert isinstance(commit_refusal(exc), MemberFenced)


@pytest.mark.parametrize(
    "exc",
    [
        kafka_errors.CommitFailedError(kafka_errors.RebalanceInProgressError()),
        kafka_errors.RebalanceInProgressError(
            "Offset commit cannot be completed since the consumer is undergoing a rebalance"
        ),
    ],
)
def test_kafka_python_rebalance_keeps_the_partitions(exc):
    refusal = commit_refusal(exc)
    assert isinstance(refusal, CommitRefused)
    assert not isinstance(refusal, MemberFenced)


@pytest.mark.parametrize(
    "code", [KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION, KafkaError.FENCED_INSTANCE_ID]
)
def test_librdkafka_fenced(code):
    assert isinstance(refusal(KafkaError(code), "commit"), MemberFenced)


def test_librdkafka_rebalance_keeps_the_partitions():
    refused = refusal(KafkaError(KafkaError.REBALANCE_IN_PROGRESS), "commit")
    assert isinstance(refused, CommitRefused)
    assert not isinstance(refused, MemberFenced)
