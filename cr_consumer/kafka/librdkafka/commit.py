"""A synchronous, bounded commit on librdkafka (:func:`commit_offsets`).

librdkafka's synchronous commit takes no timeout (it waits for the group
coordinator as long as that takes), so:

1. the commit runs on the client's :class:`~cr_consumer.kafka.librdkafka.bounded_call.BoundedCaller`
   thread, and the polling thread waits for it at most ``timeout_ms``;
2. no answer within ``timeout_ms``: :class:`~cr_consumer.kafka.client.ClientTimeout`
   (the outcome is unknown: the drain fails, the commit finishes on the
   caller's thread); a commit that could not start in time (an earlier one
   still running) never runs;
3. the group refused the commit: CommitRefused / MemberFenced
   (:func:`~cr_consumer.kafka.librdkafka.errors.refusal`), for the request as a
   whole or for any partition of it;
4. any other error of the request or of a partition raises
   (:func:`~cr_consumer.kafka.librdkafka.errors.raise_for`): a commit returns
   only when the broker accepted every offset.
"""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaException

from cr_consumer.kafka.client import KafkaClientError, TopicPartition
from cr_consumer.kafka.librdkafka.bounded_call import BoundedCaller
from cr_consumer.kafka.librdkafka.errors import REFUSED_CODES, error_of, raise_for, refusal
from cr_consumer.kafka.librdkafka.offsets import ck


def commit_offsets(
    consumer: Consumer, caller: BoundedCaller, offsets: Mapping[TopicPartition, int], timeout_ms: int
) -> None:
    """Commit ``offsets`` (next offset to read) through ``consumer`` on ``caller``'s
    thread, bounded by ``timeout_ms`` (steps 1-4 of the module docstring)."""
    request = [ck(tp, int(off)) for tp, off in sorted(offsets.items())]
    if not request:
        return
    try:
        result = caller.run(lambda: consumer.commit(offsets=request, asynchronous=False), timeout_ms / 1000, "commit")
    except KafkaException as exc:
        err = error_of(exc)
        if err is not None and err.code() in REFUSED_CODES:
            raise refusal(err, "commit") from exc
        if err is None:
            raise KafkaClientError(f"commit failed: {exc!r}") from exc
        raise_for("commit", err, exc)
    for p in result or ():
        if p.error is not None:
            if p.error.code() in REFUSED_CODES:
                raise refusal(p.error, f"commit of {p.topic}[{p.partition}]")
            raise_for(f"commit of {p.topic}[{p.partition}]", p.error)


__all__ = ["commit_offsets"]
