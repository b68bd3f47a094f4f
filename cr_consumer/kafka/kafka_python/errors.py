"""kafka-python's errors -> the seam's exceptions (:mod:`cr_consumer.kafka.client`).

1. A commit the group refused (:func:`commit_refusal`): :class:`MemberFenced` when
   the group no longer knows this consumer in its generation (its partitions may
   be another member's), :class:`CommitRefused` for a rebalance in progress (the
   consumer keeps its partitions).
2. Any other failed commit (:func:`commit_error`): not answered in time ->
   :class:`ClientTimeout` (outcome unknown), the rest -> :class:`KafkaClientError`.
3. A failed lookup (:func:`lookup_errors`): no answer in time ->
   :class:`ClientTimeout`, an unknown topic or partition ->
   :class:`UnknownTopicOrPartition`, the rest -> :class:`KafkaClientError`, each
   naming the lookup and kafka-python's error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from kafka import errors as kafka_errors

from cr_consumer.kafka.client import (
    ClientTimeout,
    CommitRefused,
    KafkaClientError,
    MemberFenced,
    UnknownTopicOrPartition,
)

#: kafka-python errors that mean "the group refused the commit" (see commit_refusal).
_REFUSED = (
    kafka_errors.CommitFailedError,
    kafka_errors.RebalanceInProgressError,
    kafka_errors.IllegalGenerationError,
    kafka_errors.UnknownMemberIdError,
    kafka_errors.FencedInstanceIdError,
)
#: Of those, the ones that mean "this consumer is no longer the group's member".
_FENCED = (kafka_errors.IllegalGenerationError, kafka_errors.UnknownMemberIdError, kafka_errors.FencedInstanceIdError)


def commit_refusal(exc: BaseException) -> CommitRefused:
    """The seam's error for a refused commit. kafka-python wraps the broker's
    answer in CommitFailedError (its first argument): UNKNOWN_MEMBER_ID and
    ILLEGAL_GENERATION (it reset the generation: the member lost its
    partitions), REBALANCE_IN_PROGRESS (still a member: it keeps them); a
    CommitFailedError with a message only means "not part of an active group"
    (kicked out). Fenced or kicked out -> MemberFenced; a rebalance -> CommitRefused."""
    cause = exc.args[0] if isinstance(exc, kafka_errors.CommitFailedError) and exc.args else exc
    if isinstance(cause, kafka_errors.RebalanceInProgressError):
        return CommitRefused(f"commit refused by the group (rebalance): {exc!r}")
    if isinstance(cause, _FENCED) or isinstance(exc, kafka_errors.CommitFailedError):
        return MemberFenced(f"commit refused: the group no longer knows this consumer: {exc!r}")
    return CommitRefused(f"commit refused by the group (rebalance): {exc!r}")


def commit_error(exc: BaseException) -> KafkaClientError:
    """The seam's error for a failed commit: refused (:func:`commit_refusal`), not
    answered in time (ClientTimeout, outcome unknown), or any other failure."""
    if isinstance(exc, _REFUSED):
        return commit_refusal(exc)
    if isinstance(exc, kafka_errors.KafkaTimeoutError):
        return ClientTimeout(f"commit not answered in time (outcome unknown): {exc!r}")
    return KafkaClientError(f"commit failed: {exc!r}")


@contextlib.contextmanager
def lookup_errors(what: str) -> Iterator[None]:
    """Turn kafka-python's errors of a lookup into the seam's error types (step 3)."""
    try:
        yield
    except kafka_errors.KafkaTimeoutError as exc:
        raise ClientTimeout(f"{what}: no answer in time: {exc!r}") from exc
    except kafka_errors.UnknownTopicOrPartitionError as exc:
        raise UnknownTopicOrPartition(f"{what}: {exc!r}") from exc
    except kafka_errors.KafkaError as exc:
        raise KafkaClientError(f"{what}: {exc!r}") from exc


__all__ = ["commit_error", "commit_refusal", "lookup_errors"]
