"""librdkafka's errors -> the seam's exceptions (:mod:`cr_consumer.kafka.client`).

1. A commit the group refused: :class:`MemberFenced` when the group no longer
   knows this consumer in its generation (its partitions may be another
   member's), :class:`CommitRefused` for a rebalance in progress (the consumer
   keeps its partitions): :func:`refusal`.
2. Everything else (:func:`raise_for`): ``_TIMED_OUT`` -> :class:`ClientTimeout`
   (outcome unknown), an unknown topic or partition ->
   :class:`UnknownTopicOrPartition`, the rest -> :class:`KafkaClientError`, each
   naming the call and librdkafka's error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn, TypeVar

from confluent_kafka import KafkaError, KafkaException

from cr_consumer.kafka.client import (
    ClientTimeout,
    CommitRefused,
    KafkaClientError,
    MemberFenced,
    UnknownTopicOrPartition,
)

T = TypeVar("T")

#: librdkafka's errors that mean "the group refused the commit because of a rebalance".
REFUSED_CODES = frozenset(
    getattr(KafkaError, name)
    for name in (
        "REBALANCE_IN_PROGRESS",
        "ILLEGAL_GENERATION",
        "UNKNOWN_MEMBER_ID",
        "FENCED_INSTANCE_ID",
        "STALE_MEMBER_EPOCH",
        "_ASSIGNMENT_LOST",
    )
    if hasattr(KafkaError, name)
)
#: Of those, the ones that mean "this consumer is no longer the group's member"
#: (MemberFenced): everything but a rebalance in progress.
FENCED_CODES = REFUSED_CODES - {KafkaError.REBALANCE_IN_PROGRESS}
UNKNOWN_CODES = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION})


def error_of(exc: KafkaException) -> KafkaError | None:
    """The KafkaError a KafkaException carries, if any."""
    err = exc.args[0] if exc.args else None
    return err if isinstance(err, KafkaError) else None


def fetcher_not_started(exc: BaseException) -> bool:
    """librdkafka's ``_STATE`` answer to a seek: the partition's fetcher is not running yet."""
    err = error_of(exc) if isinstance(exc, KafkaException) else None
    return err is not None and err.code() == KafkaError._STATE


def refusal(err: KafkaError, what: str) -> CommitRefused:
    """Step 1 of the module docstring."""
    if err.code() in FENCED_CODES:
        return MemberFenced(f"{what} refused: the group no longer knows this consumer: {err.name()} ({err.str()})")
    return CommitRefused(f"{what} refused by the group (rebalance): {err.name()} ({err.str()})")


def raise_for(what: str, err: KafkaError, cause: BaseException | None = None) -> NoReturn:
    """Step 2 of the module docstring."""
    code = err.code()
    message = f"{what}: {err.name()} ({err.str()})"
    if code == KafkaError._TIMED_OUT:
        raise ClientTimeout(message) from cause
    if code in UNKNOWN_CODES:
        raise UnknownTopicOrPartition(message) from cause
    raise KafkaClientError(message) from cause


def call_mapped(what: str, call: Callable[[], T]) -> T:
    """``call()``, its KafkaException raised as the seam's exception (step 2)."""
    try:
        return call()
    except KafkaException as exc:
        err = error_of(exc)
        if err is None:
            raise KafkaClientError(f"{what}: {exc!r}") from exc
        raise_for(what, err, exc)


__all__ = [
    "FENCED_CODES",
    "REFUSED_CODES",
    "UNKNOWN_CODES",
    "call_mapped",
    "error_of",
    "fetcher_not_started",
    "raise_for",
    "refusal",
]
